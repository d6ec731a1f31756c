"""The one place a PyTorch module becomes the workload its step is priced on.

:func:`torch_workload` is where the importer (``cluster/training/importers/torch_import.py``:
``import_torch_module(module, input_shape, name)``, counted with PyTorch's own FLOP counter)
is called for real-mode training and the PopTorch-shaped API. Until that importer is in this
tree it returns None, and a run reports its wall time without a simulated time.
"""

from __future__ import annotations

from typing import Any

from cluster.training.workloads import Workload


def torch_workload(module: Any, sample_shape: tuple[int, ...], name: str) -> Workload | None:
    """``module`` as a workload for samples of ``sample_shape`` (None: no importer yet)."""
    del module, sample_shape, name  # the importer's arguments: (module, (1, *shape), name)
    return None
