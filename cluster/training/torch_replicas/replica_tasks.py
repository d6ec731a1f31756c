"""PyTorch replicas on a card: the tasks a card runs (``Card.execute``), in the card's process.

A replica is the user's ``torch.nn.Module`` with its parameters laid over ONE flat float32
tensor of the card's IPU (``torch.<run>.params``): the module computes on the IPU's memory,
and an optimiser step updates that tensor in place. After the forward and backward passes
of its micro-batches, a replica copies its mean gradient into the IPU tensor
``torch.<run>.grad``, which GCL's allreduce averages into ``torch.<run>.grad.mean``; the
replica then hands that to its optimiser. The card knows nothing of PyTorch: it only runs
these functions on its :class:`~ipu_node.store.TensorStore`. torch is imported here, in the
card's process, only when a task runs.
"""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass
from typing import Any

import numpy as np

from cluster.errors import UserError
from cluster.training.importers.torch_factory import one_line, require_torch
from ipu_node.store import TensorStore

LOGITS, MODEL_LOSS = "logits", "model-loss"
"""How a replica gets its loss: cross-entropy of the module's output (``train --torch``),
or the module's own (``forward(x, labels)`` returns the loss, or a tuple ending with it,
as PopTorch's training models do)."""


def tensor_names(run: str) -> tuple[str, str, str]:
    """The IPU tensors of run ``run``: its weights, its gradient, the averaged gradient."""
    return f"torch.{run}.params", f"torch.{run}.grad", f"torch.{run}.grad.mean"


@dataclass
class _Replica:
    """One replica in this card's process: the module over the IPU's weight tensor."""

    module: Any  # torch.nn.Module
    optimizer: Any  # torch.optim.Optimizer
    loss_kind: str


_REPLICAS: dict[tuple[str, int], _Replica] = {}  # (run, IPU) -> replica, in this process


def flat_parameters(module: Any) -> np.ndarray:
    """The module's parameters in ``parameters()`` order, as one flat float32 vector."""
    parts = [p.detach().reshape(-1).numpy() for p in module.parameters()]
    if not parts:
        return np.zeros(0, np.float32)
    return np.concatenate(parts).astype(np.float32, copy=False)


def bind_parameters(module: Any, flat: np.ndarray) -> None:
    """Lay the module's parameters over ``flat`` (views, no copies): the module then reads
    and its optimiser writes that array."""
    torch = require_torch()
    offset = 0
    for parameter in module.parameters():
        count = parameter.numel()
        parameter.data = torch.from_numpy(flat[offset:offset + count]).view(parameter.shape)
        offset += count


def batch_loss(module: Any, loss_kind: str, x: np.ndarray, y: np.ndarray) -> Any:
    """``module``'s loss on one micro-batch, as a scalar torch tensor (``loss_kind``:
    :data:`LOGITS` or :data:`MODEL_LOSS`); a failure of the user's code is one line."""
    try:
        return _loss(module, loss_kind, x, y)
    except UserError:
        raise
    except Exception as error:  # noqa: BLE001 - the user's model: any failure is said
        raise UserError(f"the model's forward pass failed: {one_line(error)}") from None


def _loss(module: Any, loss_kind: str, x: np.ndarray, y: np.ndarray) -> Any:
    """The loss of :func:`batch_loss`, failures as they come."""
    torch = require_torch()
    inputs, labels = torch.from_numpy(x), torch.from_numpy(y)
    if loss_kind == LOGITS:
        return torch.nn.functional.cross_entropy(module(inputs), labels)
    out = module(inputs, labels)
    loss = out[-1] if isinstance(out, (tuple, list)) else out
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
        raise UserError("the model's forward(x, labels) must return the loss (a scalar "
                        "tensor) or a tuple ending with it, as a PopTorch training model does")
    return loss.reshape(())


def place(store: TensorStore, run: str, payload: bytes, ipus: list[int]) -> None:
    """Put a replica on each of ``ipus``: the pickled ``(module, optimizer class, its
    settings, loss kind)`` of ``payload``, its weights on the IPU."""
    torch = require_torch()
    torch.set_num_threads(1)  # a card is one of many processes sharing the cores
    params_name = tensor_names(run)[0]
    for ipu in ipus:
        module, optimizer_class, settings, loss_kind = pickle.loads(payload)
        flat = flat_parameters(module).copy()
        store.put(ipu, params_name, flat)
        bind_parameters(module, flat)
        module.train()
        _REPLICAS[(run, ipu)] = _Replica(module, optimizer_class(module.parameters(),
                                                                **settings), loss_kind)


def gradients(store: TensorStore, run: str,
              work: dict[int, list[tuple[np.ndarray, np.ndarray]]]) -> dict[int, float]:
    """Forward and backward over each replica's micro-batches; leave the mean gradient on
    its IPU; return each replica's mean loss."""
    grad_name = tensor_names(run)[1]
    losses = {}
    for ipu, batches in work.items():
        replica = _REPLICAS[(run, ipu)]
        replica.optimizer.zero_grad(set_to_none=True)
        total = 0.0
        for x, y in batches:
            loss = batch_loss(replica.module, replica.loss_kind, x, y)
            (loss / len(batches)).backward()
            total += float(loss.detach())
        grads = [np.zeros(p.numel(), np.float32) if p.grad is None
                 else p.grad.detach().reshape(-1).numpy()
                 for p in replica.module.parameters()]
        store.put(ipu, grad_name, np.concatenate(grads).astype(np.float32, copy=False))
        losses[ipu] = total / len(batches)
    return losses


def update(store: TensorStore, run: str, ipus: list[int], averaged: bool) -> dict[int, str]:
    """Apply the averaged gradient (``averaged``: the allreduce's; else a lone replica's
    own) with each replica's optimiser; return a digest of its new weights (equal
    digests: identical replicas, without shipping the weights)."""
    torch = require_torch()
    params_name, grad_name, mean_name = tensor_names(run)
    digests = {}
    for ipu in ipus:
        replica = _REPLICAS[(run, ipu)]
        mean = np.require(store.get(ipu, mean_name if averaged else grad_name), np.float32,
                          ["C", "W"])
        offset = 0
        for parameter in replica.module.parameters():
            count = parameter.numel()
            parameter.grad = torch.from_numpy(mean[offset:offset + count]).view(parameter.shape)
            offset += count
        replica.optimizer.step()
        digests[ipu] = hashlib.sha256(store.get(ipu, params_name).tobytes()).hexdigest()
    return digests


def weights(store: TensorStore, run: str, ipu: int) -> np.ndarray:
    """The flat weights of the replica on ``ipu``."""
    return store.get(ipu, tensor_names(run)[0]).copy()


def drop(store: TensorStore, run: str, ipus: list[int]) -> None:
    """Forget run ``run``'s replicas on ``ipus`` and free their IPU tensors."""
    for ipu in ipus:
        _REPLICAS.pop((run, ipu), None)
        for name in tensor_names(run):
            store.free(ipu, name)
