"""The one place a PyTorch module becomes the workload its step is priced on.

Real-mode training (``train --torch``) and the PopTorch-shaped API price their step on the
workload the importer makes of the module (:func:`~cluster.training.importers.torch_import.
import_torch_module`: per-layer parameters, FLOPs and activation bytes counted with
PyTorch's own FLOP formulas), the same workload ``ipupod workload import`` writes.
"""

from __future__ import annotations

from typing import Any

from cluster.training.importers.torch_import import import_torch_module
from cluster.training.workloads import Workload


def torch_workload(module: Any, sample_shape: tuple[int, ...], name: str) -> Workload:
    """``module`` as a workload for samples of ``sample_shape`` (counted on one sample)."""
    return import_torch_module(module, (1, *sample_shape), name)
