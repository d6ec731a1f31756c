"""``ipupod train --torch file.py:factory``: a user's PyTorch classifier trained data-parallel.

Everything about the model is checked in this process before a device starts (the factory
loads and builds a module, a sample of ``sample_shape`` goes through it, its output is
``(batch, classes)``); the data is synthetic and deterministic: step ``s``'s global batch
is drawn from ``seed`` and ``s`` (inputs standard normal, labels from a fixed random
linear teacher), and cut into one block of micro-batches per replica as the MLP's is
(:func:`~cluster.training.data.replica_slice`). The loss is cross-entropy; the optimiser is
SGD with momentum (``--lr``, ``--momentum``), as the MLP's. Pure: the steps on the devices
are :mod:`cluster.training.engines.torch_data_parallel`'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from cluster.errors import SettingError, UserError
from cluster.training.config import TrainConfig
from cluster.training.data import replica_slice
from cluster.training.importers.torch_factory import build_module, one_line, require_torch
from cluster.training.plan import TrainPlan
from cluster.training.step_parts import StepTime
from cluster.training.torch_replicas.pricing import priced_step
from cluster.training.torch_replicas.workload import torch_workload

if TYPE_CHECKING:
    from cluster.model.topology import Topology

MAX_SAMPLE_ELEMENTS = 1 << 24  # numbers in one sample: far past any image or sequence


@dataclass(frozen=True)
class TorchModel:
    """A user's module, checked: what a sample looks like and how many classes it tells."""

    spec: str
    module: Any  # torch.nn.Module
    sample_shape: tuple[int, ...]
    classes: int

    @property
    def parameters(self) -> int:
        """Scalars in the module's parameters."""
        return int(sum(p.numel() for p in self.module.parameters()))


def sample_shape(text: str) -> tuple[int, ...]:
    """One sample's shape from ``--sample-shape`` (``3,32,32``), checked."""
    parts = [part.strip() for part in text.split(",")]
    if not all(part.isdigit() and part.isascii() for part in parts) or len(parts) > 8:
        raise SettingError("sample_shape", "{sample_shape} takes up to 8 sizes separated by "
                           "commas, such as 3,32,32 (one sample, no batch dimension), not "
                           "{given!r}", given=text[:40])
    shape = tuple(int(part) for part in parts)
    if min(shape) < 1 or int(np.prod(shape, dtype=object)) > MAX_SAMPLE_ELEMENTS:
        raise SettingError("sample_shape", "{sample_shape} sizes must be 1 or more, "
                           "{most:,} numbers at most in all", most=MAX_SAMPLE_ELEMENTS)
    return shape


def load_model(spec: str, shape: tuple[int, ...]) -> TorchModel:
    """Build the factory's module and run two samples of ``shape`` through it: a UserError
    if it does not build, is not float32, or does not map samples to ``(batch, classes)``."""
    torch = require_torch()
    module = build_module(spec)
    if any(p.dtype != torch.float32 for p in module.parameters()):
        raise UserError(f"factory {spec}: real mode trains float32 parameters; call "
                        ".float() on the module")
    if not any(True for _ in module.parameters()):
        raise UserError(f"factory {spec}: the module has no parameters: nothing to train")
    try:
        with torch.no_grad():
            out = module(torch.zeros((2, *shape)))
    except Exception as error:  # noqa: BLE001 - the user's model: any failure is said
        raise SettingError("sample_shape", "factory {spec}: the module cannot take samples "
                           "of shape {shape} ({sample_shape}): {error}", spec=spec,
                           shape=shape, error=one_line(error)) from None
    if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[1] < 2:
        got = tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise SettingError("torch", "factory {spec}: train {torch} trains a classifier, "
                           "whose output is (batch, classes) with 2 classes or more; it "
                           "returned {got}", spec=spec, got=got)
    return TorchModel(spec, module, shape, int(out.shape[1]))


def step_data(model: TorchModel, seed: int, step: int,
              samples: int) -> tuple[np.ndarray, np.ndarray]:
    """Step ``step``'s global batch: ``samples`` standard-normal inputs drawn from ``seed``
    and ``step``, each labelled by a fixed random linear teacher drawn from ``seed`` (the
    class its projection scores highest), so that the problem can be learnt."""
    features = int(np.prod(model.sample_shape))
    teacher = np.random.default_rng([seed]).standard_normal((features, model.classes),
                                                            dtype=np.float32)
    x = np.random.default_rng([seed, step]).standard_normal((samples, *model.sample_shape),
                                                            dtype=np.float32)
    return x, np.argmax(x.reshape(samples, features) @ teacher, axis=1).astype(np.int64)


def replica_work(config: TrainConfig, x: np.ndarray,
                  y: np.ndarray) -> list[list[tuple[np.ndarray, np.ndarray]]]:
    """Each replica's micro-batches of the step's batch ``(x, y)``."""
    return [[replica_slice(x, y, r, config.replicas, config.micro_batch, config.accumulation,
                           micro) for micro in range(config.accumulation)]
            for r in range(config.replicas)]


def price(model: TorchModel, config: TrainConfig, topology: Topology) -> StepTime:
    """The step's simulated time, from the module's imported workload; an OutOfMemory (a
    UserError) if the model does not fit an IPU as placed."""
    return priced_run(model, config, topology)[1]


def priced_run(model: TorchModel, config: TrainConfig,
               topology: Topology) -> tuple[TrainPlan, StepTime]:
    """:func:`price`, with the run as it was priced (what draws its simulated timeline:
    :func:`~.torch_trace.torch_trace`)."""
    workload = torch_workload(model.module, model.sample_shape, model.spec)
    return priced_step(workload, config, topology)
