"""Real-mode tensor parallelism of the NumPy MLP: one Megatron MLP block over ``T`` IPUs.

The block is the pair of dense layers around the MLP's widest hidden width ``H`` (layer
``i`` into it, layer ``i + 1`` out of it). Rank ``k`` of a tensor group holds layer ``i``'s
columns ``C_k`` of ``H`` (weights and biases) and layer ``i + 1``'s rows ``C_k``; every
other layer, and layer ``i + 1``'s bias, is replicated on every rank and computed by every
rank on the same values (Shoeybi et al. 2019, section 3). Forward, each rank computes
``relu(a @ W_i[:, C_k] + b_i[C_k]) @ W_{i+1}[C_k, :]``, a partial sum of the block's output:
one allreduce (sum) over the group gives the whole. Backward, each rank's partial gradient
of the block's input ``a`` is summed by one allreduce likewise (none when the block is
the first layer). Each rank keeps ONE flat float32 vector: the replicated layers in order
(weights then bias; of layer ``i + 1`` only its bias), then ``W_i[:, C_k]``, ``b_i[C_k]``,
``W_{i+1}[C_k, :]``. Its gradient has the same layout.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cluster.training.numpy_mlp import MLPSpec
from cluster.training.pipeline.stage_math import loss_gradient
from cluster.training.tensor_parallel.layer_allreduces import Axis, Phase, TensorCollective
from cluster.training.workloads.layers import DType
from cluster.training.workloads.tensor_shape import TensorRole

Layer = tuple[np.ndarray, np.ndarray]  # a dense layer's (W, b), views into a flat vector


@dataclass(frozen=True)
class RankParts:
    """Views into one rank's flat vector (parameters or gradient)."""

    replicated: dict[int, Layer]  # every layer but the block's, by index
    block_bias: np.ndarray  # b_{i+1}: replicated
    w_in: np.ndarray  # W_i[:, C_k]
    b_in: np.ndarray  # b_i[C_k]
    w_out: np.ndarray  # W_{i+1}[C_k, :]


@dataclass(frozen=True)
class MegatronSplit:
    """The MLP ``spec``'s block (layers ``layer`` and ``layer + 1``) over ``ranks`` IPUs."""

    spec: MLPSpec
    ranks: int
    layer: int

    @classmethod
    def of(cls, spec: MLPSpec, ranks: int) -> MegatronSplit:
        """The block around the widest hidden width (the first of equals); ValueError if
        the MLP has no hidden layer or it is narrower than ``ranks``."""
        if not spec.hidden or max(spec.hidden) < ranks:
            raise ValueError(f"tensor parallelism over {ranks} IPUs needs a hidden layer of "
                             f"at least {ranks} units, not {spec.hidden}")
        return cls(spec, ranks, int(np.argmax(spec.hidden)))

    @property
    def shapes(self) -> list[tuple[int, int]]:
        """``(fan_in, fan_out)`` of every dense layer."""
        return self.spec.layer_shapes()

    def columns(self, k: int) -> np.ndarray:
        """Rank ``k``'s hidden units ``C_k`` (contiguous; the first ranks take the remainder)."""
        width = self.shapes[self.layer][1]
        return np.array_split(np.arange(width), self.ranks)[k]

    def rank_size(self, k: int) -> int:
        """Values in rank ``k``'s flat vector."""
        fan_in, _ = self.shapes[self.layer]
        _, fan_out = self.shapes[self.layer + 1]
        replicated = sum(a * b + b for j, (a, b) in enumerate(self.shapes)
                         if j not in (self.layer, self.layer + 1))
        return replicated + fan_out + len(self.columns(k)) * (fan_in + 1 + fan_out)

    def parts(self, k: int, flat: np.ndarray) -> RankParts:
        """Views of rank ``k``'s layers in its flat vector (``flat`` may be padded)."""
        offset, replicated = 0, {}
        for j, (fan_in, fan_out) in enumerate(self.shapes):
            if j in (self.layer, self.layer + 1):
                continue
            w = flat[offset:offset + fan_in * fan_out].reshape(fan_in, fan_out)
            offset += fan_in * fan_out
            replicated[j] = (w, flat[offset:offset + fan_out])
            offset += fan_out
        fan_in, _ = self.shapes[self.layer]
        _, fan_out = self.shapes[self.layer + 1]
        c = len(self.columns(k))
        sizes = np.cumsum([offset, fan_out, fan_in * c, c, c * fan_out])
        return RankParts(replicated, flat[sizes[0]:sizes[1]],
                         flat[sizes[1]:sizes[2]].reshape(fan_in, c), flat[sizes[2]:sizes[3]],
                         flat[sizes[3]:sizes[4]].reshape(c, fan_out))

    def rank_params(self, params: np.ndarray, k: int) -> np.ndarray:
        """Rank ``k``'s flat vector cut from the whole MLP's flat ``params`` (of its dtype)."""
        whole, offset = [], 0
        for fan_in, fan_out in self.shapes:
            w = params[offset:offset + fan_in * fan_out].reshape(fan_in, fan_out)
            offset += fan_in * fan_out
            whole.append((w, params[offset:offset + fan_out]))
            offset += fan_out
        flat = np.zeros(self.rank_size(k), dtype=params.dtype)
        parts, cols = self.parts(k, flat), self.columns(k)
        for j, (w, b) in parts.replicated.items():
            w[...], b[...] = whole[j]
        w_in, b_in = whole[self.layer]
        w_out, b_out = whole[self.layer + 1]
        parts.w_in[...], parts.b_in[...] = w_in[:, cols], b_in[cols]
        parts.w_out[...], parts.block_bias[...] = w_out[cols, :], b_out
        return flat


def block_collectives(split: MegatronSplit) -> list[TensorCollective]:
    """The block's all-reduces for one micro-batch, as the pricing counts them (float32
    values per sample): its output's partial sums (forward, named by its row-parallel
    layer ``dense{i+1}``) and, with layers below it, its input's gradient (backward,
    named by its column-parallel layer ``dense{i}``), over the whole tensor group."""
    fan_in, _ = split.shapes[split.layer]
    _, fan_out = split.shapes[split.layer + 1]
    found = [TensorCollective(f"dense{split.layer + 1}", TensorRole.FFN, Phase.FORWARD,
                              Axis.TENSOR, "output", fan_out, DType.FLOAT32)]
    if split.layer > 0:
        found.append(TensorCollective(f"dense{split.layer}", TensorRole.FFN, Phase.BACKWARD,
                                      Axis.TENSOR, "input gradient", fan_in, DType.FLOAT32))
    return found


def head_forward(split: MegatronSplit, parts: RankParts,
                 x: np.ndarray) -> tuple[np.ndarray, list[np.ndarray]]:
    """The replicated layers below the block: the block's input and each layer's input."""
    a, inputs = x, []
    for j in range(split.layer):
        inputs.append(a)
        w, b = parts.replicated[j]
        a = np.maximum(a @ w + b, 0)
    return a, inputs


def block_forward(parts: RankParts, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rank's hidden units ``h`` and its partial sum of the block's output (before the
    allreduce and the bias)."""
    h = np.maximum(a @ parts.w_in + parts.b_in, 0)
    return h, h @ parts.w_out


def tail_forward_backward(split: MegatronSplit, parts: RankParts, grads: RankParts,
                          summed: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    """From the block's summed output: the replicated layers above it, the loss (mean
    softmax cross-entropy), their gradients added to ``grads``; returns the loss and its
    gradient at the block's output (before its bias)."""
    z = summed + parts.block_bias
    stashed: list[np.ndarray] = []
    for j in range(split.layer + 2, len(split.shapes)):
        a = np.maximum(z, 0)
        stashed.append(a)
        w, b = parts.replicated[j]
        z = a @ w + b
    loss, delta = loss_gradient(z, labels)
    for j in range(len(split.shapes) - 1, split.layer + 1, -1):
        a = stashed[j - split.layer - 2]
        w, b = parts.replicated[j]
        gw, gb = grads.replicated[j]
        gw[...] += a.T @ delta
        gb[...] += delta.sum(axis=0)
        delta = (delta @ w.T) * (a > 0)
    grads.block_bias[...] += delta.sum(axis=0)
    return loss, delta


def block_backward(parts: RankParts, grads: RankParts, a: np.ndarray, h: np.ndarray,
                   delta: np.ndarray) -> np.ndarray:
    """Rank's block gradients added to ``grads``; its partial gradient of the block's input
    (before the allreduce)."""
    grads.w_out[...] += h.T @ delta
    dh = (delta @ parts.w_out.T) * (h > 0)
    grads.w_in[...] += a.T @ dh
    grads.b_in[...] += dh.sum(axis=0)
    return np.asarray(dh @ parts.w_in.T)


def head_backward(parts: RankParts, grads: RankParts, inputs: list[np.ndarray],
                  a: np.ndarray, da: np.ndarray) -> None:
    """The replicated layers below the block, from the summed gradient ``da`` of its
    input ``a``: their gradients added to ``grads``."""
    delta = da * (a > 0)
    for j in range(len(inputs) - 1, -1, -1):
        w, _ = parts.replicated[j]
        gw, gb = grads.replicated[j]
        gw[...] += inputs[j].T @ delta
        gb[...] += delta.sum(axis=0)
        if j > 0:
            delta = (delta @ w.T) * (inputs[j] > 0)
