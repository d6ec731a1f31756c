"""The simulated time of a PyTorch replica's step: its workload priced as phantom mode prices it.

Real mode runs the module's arithmetic on this machine's CPU, which says nothing about an
IPU. What the step would take on the emulated hardware comes from the module's
:class:`~cluster.training.workloads.Workload` (per-layer parameters, FLOPs and activation
bytes, from the importer) priced by :func:`~cluster.training.step_timing.step_time` with the
run's placement: exactly what ``ipupod train --model net.yaml --mode phantom`` prints for
the same workload, replicas and batch. The workload's memory is checked the same way, so a
model too big for an IPU is refused before anything starts.
"""

from __future__ import annotations

from dataclasses import replace

from cluster.model.topology import Topology
from cluster.training.config import TrainConfig
from cluster.training.fit import check_fits
from cluster.training.memory_plan import stage_memory
from cluster.training.model_ref import model_ref
from cluster.training.plan import TrainPlan, plan_for
from cluster.training.step_parts import StepTime
from cluster.training.step_timing import step_time
from cluster.training.workloads import Workload
from gcl.modes import Mode


def priced_config(workload: Workload, placement: TrainConfig,
                  layers_per_ipu: tuple[int, ...] | None = None) -> TrainConfig:
    """``placement`` (servers or topology, replicas, IPUs per replica, micro-batch,
    accumulation) priced on ``workload`` (``model`` is only its label): phantom mode, no
    recomputation (PopTorch's default), stages as ``layers_per_ipu`` (None: balanced on
    FLOPs)."""
    return replace(placement, model=model_ref(workload.name), mode=Mode.PHANTOM, check=False,
                   recompute=False, hidden=None, layers_per_ipu=layers_per_ipu)


def simulated_step_time(workload: Workload, placement: TrainConfig, topology: Topology,
                        layers_per_ipu: tuple[int, ...] | None = None) -> StepTime:
    """Simulated seconds of one step of ``workload`` placed as ``placement`` on
    ``topology``, by part; an OutOfMemory (a UserError) if a stage does not fit its IPU."""
    return priced_step(workload, placement, topology, layers_per_ipu)[1]


def priced_step(workload: Workload, placement: TrainConfig, topology: Topology,
                layers_per_ipu: tuple[int, ...] | None = None) -> tuple[TrainPlan, StepTime]:
    """:func:`simulated_step_time`, with the run as it was priced (planned on
    ``topology`` with ``workload`` as given): what draws its simulated timeline
    (:mod:`.torch_trace`)."""
    plan = plan_for(priced_config(workload, placement, layers_per_ipu), topology, workload,
                    fixed=True)
    check_fits(plan, stage_memory(plan))
    return plan, step_time(plan)
