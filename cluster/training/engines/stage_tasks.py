"""What a card runs for the pipeline stages on its IPUs (given through ``Card.execute``).

Each IPU of a pipelined replica holds one stage: its slice of the weights, velocity and
accumulated gradient. Activations are tensors on the IPUs, named by stage boundary and
micro-batch: ``pipe.f{b}.{m}`` is what crosses boundary ``b`` forward (``b = -1``: the
host's input to stage 0), ``pipe.g{b}.{m}`` its gradient going back. The driver moves
them between IPUs over the emulated links; here a stage reads its input, computes and
leaves its output for the next move. Everything on an IPU is accounted in its memory.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from cluster.training.numpy_mlp import DTYPE, MLPSpec, sgd_momentum
from cluster.training.pipeline import stage_math
from cluster.training.pipeline.pass_schedule import Pass
from ipu_node.store import TensorStore

PARAMS, VELOCITY = "pipe.params", "pipe.velocity"
GRAD, GRAD_MEAN = "pipe.grad", "pipe.grad.mean"


def activation(boundary: int, micro: int) -> str:
    """The activation crossing ``boundary`` forward for micro-batch ``micro``."""
    return f"pipe.f{boundary}.{micro}"


def gradient(boundary: int, micro: int) -> str:
    """The gradient of that activation, crossing ``boundary`` backward."""
    return f"pipe.g{boundary}.{micro}"


def _stashed(stage: int, micro: int, layer: int) -> str:
    return f"pipe.h{stage}.{micro}.{layer}"


@dataclass(frozen=True)
class Stage:
    """Which stage an IPU holds: layers ``layers`` of ``spec``, stage ``index`` of
    ``count``; with ``recompute`` only the stage's input is kept between passes."""

    spec: MLPSpec
    layers: range
    index: int
    count: int
    recompute: bool

    @property
    def parameters(self) -> int:
        start, stop = stage_math.stage_offsets(self.spec, self.layers)
        return stop - start


@dataclass(frozen=True)
class StageOp:
    """One pass of one micro-batch; the host's input ``x`` (stage 0's forward) or labels
    ``y`` (the last stage's forward); ``ends_step`` on a stage's last backward."""

    pass_: Pass
    micro: int
    x: np.ndarray | None = None
    y: np.ndarray | None = None
    ends_step: bool = False
    micro_batches: int = 1


@dataclass(frozen=True)
class RoundWork:
    """An IPU's share of a round: its ops, the buffers to make ready for what lands on
    it after the round, the tensors it no longer needs."""

    stage: Stage
    ops: tuple[StageOp, ...] = ()
    expect: tuple[tuple[str, tuple[int, ...]], ...] = ()
    free: tuple[str, ...] = ()


def place_stages(store: TensorStore, work: dict[int, tuple[np.ndarray, int]]) -> None:
    """Per IPU, its stage's starting weights; zero velocity; a zero gradient of
    ``padded`` elements (every stage's the same size, for one allreduce)."""
    for ipu, (weights, padded) in work.items():
        store.put(ipu, PARAMS, weights.copy())
        store.put(ipu, VELOCITY, np.zeros_like(weights))
        store.put(ipu, GRAD, np.zeros(padded, dtype=DTYPE))


def run_round(store: TensorStore, work: dict[int, RoundWork]) -> dict[int, dict[int, float]]:
    """Run each IPU's ops of the round; return the losses the last stages computed, per
    IPU and micro-batch."""
    losses: dict[int, dict[int, float]] = {}
    for ipu, share in work.items():
        for name in share.free:
            store.free(ipu, name)
        for op in share.ops:
            if op.pass_ is Pass.FORWARD:
                loss = _forward(store, ipu, share.stage, op)
                if loss is not None:
                    losses.setdefault(ipu, {})[op.micro] = loss
            else:
                _backward(store, ipu, share.stage, op)
        for name, shape in share.expect:
            store.put(ipu, name, np.zeros(shape, dtype=DTYPE))
    return losses


def _forward(store: TensorStore, ipu: int, stage: Stage, op: StageOp) -> float | None:
    """The stage's forward of ``op.micro``: its output for the next stage, or, on the last
    stage, the loss and its gradient (kept for the backward)."""
    if op.x is not None:
        store.put(ipu, activation(stage.index - 1, op.micro), op.x)
    layers = stage_math.unflatten(stage.spec, stage.layers, store.get(ipu, PARAMS))
    x = _rows(store.get(ipu, activation(stage.index - 1, op.micro)), layers[0][0].shape[0])
    ends_model = stage.index == stage.count - 1
    out, inputs = stage_math.forward(layers, x, ends_model)
    if not stage.recompute:
        for i, kept in enumerate(inputs[1:], start=1):
            store.put(ipu, _stashed(stage.index, op.micro, i), kept)
    if not ends_model:
        store.put(ipu, activation(stage.index, op.micro), out)
        return None
    if op.y is None:
        raise ValueError("the last stage's forward needs the labels")
    loss, delta = stage_math.loss_gradient(out, op.y)
    store.put(ipu, gradient(stage.index, op.micro), delta)
    return loss


def _backward(store: TensorStore, ipu: int, stage: Stage, op: StageOp) -> None:
    """The stage's backward of ``op.micro``: add its weight gradient to the stage's and
    leave the input's gradient for the previous stage."""
    params = store.get(ipu, PARAMS)
    layers = stage_math.unflatten(stage.spec, stage.layers, params)
    x_name = activation(stage.index - 1, op.micro)
    x = _rows(store.get(ipu, x_name), layers[0][0].shape[0])
    if stage.recompute:
        _, inputs = stage_math.forward(layers, x, stage.index == stage.count - 1)
    else:
        inputs = [x] + [
            store.get(ipu, _stashed(stage.index, op.micro, i)) for i in range(1, len(layers))]
    grad = np.empty_like(params)
    delta = _rows(store.get(ipu, gradient(stage.index, op.micro)), layers[-1][0].shape[1])
    back = stage_math.backward(layers, inputs, delta,
                               stage_math.unflatten(stage.spec, stage.layers, grad),
                               starts_model=stage.index == 0)
    total = store.get(ipu, GRAD)
    total[:grad.size] += grad
    if op.ends_step:
        total[:grad.size] /= DTYPE(op.micro_batches)
    for name in [x_name, gradient(stage.index, op.micro)] + (
            [] if stage.recompute else
            [_stashed(stage.index, op.micro, i) for i in range(1, len(layers))]):
        store.free(ipu, name)
    if back is not None:
        store.put(ipu, gradient(stage.index - 1, op.micro), back)


def _rows(tensor: np.ndarray, width: int) -> np.ndarray:
    """``tensor`` as rows of ``width`` values: what crossed a link arrives flat."""
    return tensor.reshape(-1, width)


def apply_stage_updates(store: TensorStore,
                        work: dict[int, tuple[float, float]]) -> dict[int, str]:
    """Apply each stage's averaged gradient (:func:`update_weights`); a digest of the new
    weights per IPU."""
    return {ipu: update_weights(store, ipu, (PARAMS, VELOCITY, GRAD, GRAD_MEAN), lr, momentum)
            for ipu, (lr, momentum) in work.items()}


def place_padded(store: TensorStore, ipu: int, names: tuple[str, str, str],
                 params: np.ndarray, padded: int) -> None:
    """IPU ``ipu``'s starting ``params``, zero velocity, and a zero gradient of ``padded``
    values (``names``: weights, velocity, gradient): a split replica's shares differ in
    size, their gradients are padded to the largest for the allreduce."""
    weights, velocity, gradient = names
    store.put(ipu, weights, np.array(params, dtype=DTYPE))
    store.put(ipu, velocity, np.zeros(len(params), dtype=DTYPE))
    store.put(ipu, gradient, np.zeros(padded, dtype=DTYPE))


def update_weights(store: TensorStore, ipu: int, names: tuple[str, str, str, str], lr: float,
                   momentum: float) -> str:
    """SGD with momentum on IPU ``ipu``'s weights from the first values of its averaged,
    padded gradient (``names``: weights, velocity, accumulated gradient, averaged
    gradient); zero the accumulated gradient for the next step, free the averaged one.
    Returns a digest of the new weights (equal digests: identical replicas, without
    shipping the weights)."""
    params_name, velocity_name, grad_name, mean_name = names
    params, velocity = store.get(ipu, params_name), store.get(ipu, velocity_name)
    sgd_momentum(params, velocity, store.get(ipu, mean_name)[:params.size], lr, momentum)
    store.get(ipu, grad_name)[:] = 0
    store.free(ipu, mean_name)
    return hashlib.sha256(params.tobytes()).hexdigest()
