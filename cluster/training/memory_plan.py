"""What each IPU of a replica holds while it trains, and a clear refusal when it cannot.

Per IPU of a replica, for its pipeline stage (both of IPU 0's when the last stage goes
back to it, the whole model when a replica is one IPU): weights, gradient
accumulators, optimiser state (none in In-Processor-Memory when it lives in an IPU-M2000's
Streaming Memory), and the activations stashed for as many micro-batches as the schedule
keeps in flight on that stage (:meth:`PipelineSchedule.stashed`), or, with recomputation,
only each micro-batch's stage input plus one micro-batch's working set
(:func:`cluster.training.workloads.memory_use`). Capacities from the catalogue: GC2 ~300 MB,
GC200 900 MB of In-Processor-Memory (docs/hardware.md).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from cluster.errors import SettingError, UserError
from cluster.model.hardware import DeviceKind
from cluster.model.topology import Topology
from cluster.training.config import TrainConfig
from cluster.training.phased import check_streaming_memory, phase_names, phases_of
from cluster.training.pipeline.schedules import pipeline_schedule
from cluster.training.pipeline.stages import stage_layers
from cluster.training.placement import replica_ipus
from cluster.training.plan import TrainPlan
from cluster.training.sharding import ColumnSplit
from cluster.training.workloads import MemoryUse, Workload, memory_use


class OutOfMemory(UserError):
    """A pipeline stage does not fit its IPU's In-Processor-Memory."""


@dataclass(frozen=True)
class StageMemory:
    """Bytes one IPU keeps for its stage (replica 0's; every replica's are the same):
    ``stage`` is its first stage, ``layers`` each stage's first and last layer."""

    stage: int
    ipu: int
    ipu_name: str
    layers: str  # "first..last" layer names
    use: MemoryUse
    capacity_bytes: int

    def as_record(self) -> dict[str, Any]:
        """For ``--json``: the stage, its IPU, each part in bytes, the total, the capacity."""
        return {"stage": self.stage, "ipu": self.ipu_name, "layers": self.layers,
                **asdict(self.use), "total_bytes": self.use.total_bytes,
                "capacity_bytes": self.capacity_bytes}


def stage_memory(run: TrainPlan) -> list[StageMemory]:
    """Each IPU's bytes of the ``run``: its stage's (both of IPU 0's when the last stage
    goes back to it), or its share of a sharded layer; with tensor parallelism, the first
    IPU of the tensor group's share (:attr:`TrainPlan.rank_workload`: every IPU of the
    group holds the same)."""
    config, topology, workload = run.config, run.topology, run.rank_workload
    if config.splits_columns:
        return _sharded_memory(config, topology, workload)
    if config.phased:
        return _phased_memory(run)
    stages = stage_layers([layer.training_flops for layer in workload.layers],
                          config.pipeline_stages, config.layers_per_ipu)
    in_flight = pipeline_schedule(config.pipeline_schedule, len(stages),
                                  config.accumulation).stashed()
    chain = run.chains[0].tolist()
    held: dict[int, tuple[int, str, MemoryUse]] = {}  # IPU -> first stage, layers, bytes
    for s, (ipu, layers) in enumerate(zip(config.stage_ipus, stages)):
        chosen = [workload.layers[i] for i in layers]
        use = memory_use(workload, chosen, config.micro_batch, in_flight[s], config.recomputes,
                         optimizer_offchip=config.optimizer_offchip,
                         optimizer_shards=config.optimizer_shards)
        names = f"{chosen[0].name}..{chosen[-1].name}"
        if ipu in held:  # a second stage on this IPU (the last stage back on the first)
            first, before, other = held[ipu]
            use, names, s = _together(other, use), f"{before} + {names}", first
        held[ipu] = (s, names, use)
    return [StageMemory(s, chain[ipu], topology.ipu_name(chain[ipu]), names, use,
                        int(topology.ipu_processors[chain[ipu]].in_processor_memory_bytes))
            for ipu, (s, names, use) in sorted(held.items())]


def _phased_memory(run: TrainPlan) -> list[StageMemory]:
    """With phased execution, each IPU's bytes while its fullest phase runs (the rest of
    its layers wait in Streaming Memory: :mod:`.phased`)."""
    phases = phases_of(run)
    fullest = max(range(phases.count), key=lambda i: phases.use[i].total_bytes)
    ipu = int(run.chains[0, 0])
    return [StageMemory(0, ipu, run.topology.ipu_name(ipu), phase_names(run, phases, fullest),
                        phases.use[fullest],
                        int(run.topology.ipu_processors[ipu].in_processor_memory_bytes))]


def _together(a: MemoryUse, b: MemoryUse) -> MemoryUse:
    """Two stages' bytes on one IPU: both keep their weights, gradients, optimiser state
    and stashes; only one recomputes at a time."""
    return MemoryUse(a.weights_bytes + b.weights_bytes, a.gradients_bytes + b.gradients_bytes,
                     a.optimizer_bytes + b.optimizer_bytes, a.stash_bytes + b.stash_bytes,
                     max(a.recompute_bytes, b.recompute_bytes))


def _sharded_memory(config: TrainConfig, topology: Topology,
                    workload: Workload) -> list[StageMemory]:
    """Per IPU of a replica whose widest layer is split by columns: its parameters (IPU 0
    also every other layer), their gradient and velocity (float32), and one micro-batch's
    activations at a time (micro-batches run one after another): every layer's stash on
    IPU 0, the split layer's input and output columns on the others."""
    split = ColumnSplit.of(config.spec, config.ipus_per_replica)
    chain = replica_ipus(config, topology)[:split.shards].tolist()
    layer = workload.layers[split.layer]
    plan = []
    for k, parameters in enumerate(split.ipu_parameters):
        per_sample = (sum(other.stashed_bytes for other in workload.layers) if k == 0
                      else layer.stashed_bytes + 4 * len(split.columns[k]))
        use = MemoryUse(4 * parameters, 4 * parameters,
                        0 if config.optimizer_offchip
                        else -(-4 * parameters // config.optimizer_shards),
                        config.micro_batch * per_sample, 0)
        names = "all layers" if k == 0 else f"{layer.name} columns {split.columns[k].start}.."
        plan.append(StageMemory(k, chain[k], topology.ipu_name(chain[k]),
                                names + ("" if k == 0 else str(split.columns[k].stop - 1)),
                                use,
                                int(topology.ipu_processors[chain[k]].in_processor_memory_bytes)))
    return plan


def unfit_stage(run: TrainPlan, plan: list[StageMemory]) -> StageMemory | None:
    """The first stage of ``plan`` (the ``run``'s) that does not fit its IPU's
    In-Processor-Memory, or None; a SettingError if the optimiser's values are to live in
    Streaming Memory the topology's IPUs do not have."""
    config, topology = run.config, run.topology
    check_streaming_memory(run)
    machines = [set(u.ipus) for u in topology.units if u.kind == DeviceKind.IPU_M2000]
    if config.optimizer_offchip and not all(
            any(stage.ipu in ipus for ipus in machines) for stage in plan):
        raise SettingError("optimizer_state", "the IPUs of {name} have no Streaming Memory "
                           "(an IPU-M2000's): keep {optimizer_state} in-processor, or train "
                           "on a POD preset", name=topology.name)
    return next((stage for stage in plan if stage.use.total_bytes > stage.capacity_bytes),
                None)


def out_of_memory(config: TrainConfig, stage: StageMemory, advice: str) -> OutOfMemory:
    """The refusal for ``stage``: its IPU, what fills it, and ``advice``."""
    parts = ", ".join(f"{name.removesuffix('_bytes')} {decimal(value)}"
                      for name, value in asdict(stage.use).items() if value)
    return OutOfMemory(
        f"{config.model}: stage {stage.stage} of {config.pipeline_stages} ({stage.layers}) "
        f"needs {decimal(stage.use.total_bytes)} on IPU {stage.ipu_name}, which has "
        f"{decimal(stage.capacity_bytes)} of In-Processor-Memory ({parts}); {advice}")


def decimal(nbytes: int) -> str:
    """Bytes in decimal units, as the catalogue quotes memory (900 MB, 3.1 GB)."""
    for unit, factor in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= factor:
            return f"{nbytes / factor:.3g} {unit}"
    return f"{nbytes} B"
