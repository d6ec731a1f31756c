"""Workloads: what a network asks of the IPUs, layer by layer (see :mod:`.layers`)."""

from cluster.training.workloads.layers import (
    BACKWARD_FLOPS_FACTOR,
    DType,
    Layer,
    LayerKind,
    Workload,
)
from cluster.training.workloads.mlp import mlp_workload

__all__ = ["BACKWARD_FLOPS_FACTOR", "DType", "Layer", "LayerKind", "Workload", "mlp_workload"]
