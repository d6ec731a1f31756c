"""What each IPU of an expert group holds: its share of every MoE layer's experts.

With ``E`` IPUs (the same IPU of ``E`` replicas) sharing a layer's experts, each holds
``1/E`` of them: the layer's parameters (and with them its gradients and optimiser
state) are divided by ``E``, rounded up. The router and the norm stay whole on every IPU
in truth; they are counted split too here (about 0.003% of a ``moe-8x7b`` layer). FLOPs
and stashed activations do not change: each IPU computes ``count / E`` experts' buffers
of the tokens of ``E`` micro-batches, the same ``count x capacity`` token slots as all
the experts on its own micro-batch. Every other layer is whole on each IPU. With tensor
parallelism the layer it divides is already each tensor rank's share
(:mod:`cluster.training.tensor_parallel.expert_split`): ``1/(E x T)`` of the experts in all.
"""

from __future__ import annotations

from dataclasses import replace

from cluster.training.workloads.layers import Workload


def expert_rank_workload(workload: Workload, degree: int) -> Workload:
    """What one IPU of an expert group of ``degree`` holds of ``workload`` (``workload``
    itself when ``degree`` is 1)."""
    if degree == 1:
        return workload
    return replace(workload, layers=tuple(
        replace(layer, parameters=-(-layer.parameters // degree))
        if layer.experts is not None else layer for layer in workload.layers))
