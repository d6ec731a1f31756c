"""Phased execution (``--phased``): a replica's layers run phase by phase, each phase's
weights streamed in from an IPU-M2000's Streaming Memory.

A phase is a group of consecutive layers of what each IPU holds
(:attr:`TrainPlan.rank_workload`: its share with tensor parallelism). The phases are the
fewest, balanced on parameters, such that every phase's weights, gradients and one
micro-batch's activations, plus a prefetch buffer holding a neighbouring phase's weights,
fit In-Processor-Memory; if no count fits with the buffer, the fewest that fit without it
(loads then do not overlap compute). Each phase runs all the step's micro-batches while
its weights are resident (Graphcore's batch serialisation), so each phase loads its
weights once forward and once backward (not the last forward phase again: it is still
resident when the backward begins) and stores its updated weights once, after its
backward (the update runs as each phase's backward ends, as Graphcore's phased GPT-3
does); the activations it keeps of each micro-batch are stored in the forward pass and
loaded back in the backward. Loads and stores move at the GC200's PCIe Gen4 x16 to the
IPU-M2000's gateway, 32 GB/s each way at once: the path
:func:`~cluster.training.step_timing.stage_update_seconds` streams the optimiser state over
(the catalogue has no other Streaming Memory bandwidth).
With a prefetch buffer the next phase's load overlaps the current phase's compute (and a
store the next backward phase's compute); only what compute does not hide is the step's
"phase loads" part. With ``--optimizer-state sharded-streaming`` (replicated tensor
sharding) each replica of a rack loads and stores its share of a phase's weights and an
all-gather over the rack makes the whole phase (:class:`PhaseLoads`). The gradients are
reduced phase by phase (:func:`gradient_chunks`). Simulated seconds throughout.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from cluster.errors import SettingError
from cluster.model.hardware import DeviceKind, pcie_gen4_x16
from cluster.training.per_plan import per_plan
from cluster.training.plan import TrainPlan
from cluster.training.sharded_reduction import rack_all_gather_seconds
from cluster.training.workloads import (
    BACKWARD_FLOPS_FACTOR,
    MemoryUse,
    forward_seconds,
    memory_use,
)


@dataclass(frozen=True)
class Phases:
    """Each IPU's phases: ``layers[i]`` the layer indices of phase ``i``, its ``use``
    (bytes resident while it runs, the prefetch buffer in its weights), and whether a
    prefetch buffer lets loads overlap compute."""

    layers: tuple[range, ...]
    use: tuple[MemoryUse, ...]
    weights_bytes: tuple[int, ...]  # each phase's weights, per IPU
    prefetch: bool

    @property
    def count(self) -> int:
        """How many phases."""
        return len(self.layers)


@dataclass(frozen=True)
class PhaseLoads:
    """A step's Streaming Memory traffic per IPU: its ``phases``, the bandwidth (bytes a
    second, each way), the ``shards`` each phase's weights are split into over a rack's
    replicas (``sharded-streaming``: each loads and stores its share, then an all-gather
    over the rack, ``gather_seconds`` a phase, makes the whole phase; 1: no sharding), the
    step's ``micro_batches`` (each phase stores each one's activations in the forward pass
    and loads them back in the backward), each phase's compute, and the seconds compute
    does not hide (:attr:`seconds`)."""

    phases: Phases
    bandwidth_Bps: float
    shards: int
    gather_seconds: tuple[float, ...]
    micro_batches: int
    forward_compute: tuple[float, ...]  # each phase's forward, all the step's micro-batches
    backward_compute: tuple[float, ...]

    @property
    def share_bytes(self) -> tuple[int, ...]:
        """Each phase's weight bytes one IPU loads or stores: its share of them."""
        return tuple(-(-w // self.shards) for w in self.phases.weights_bytes)

    @property
    def activation_bytes(self) -> tuple[int, ...]:
        """Each phase's activations of all the step's micro-batches, stored forward and
        loaded backward (what it keeps of one, :class:`MemoryUse`'s stash, each)."""
        return tuple(self.micro_batches * use.stash_bytes for use in self.phases.use)

    @property
    def load_bytes(self) -> int:
        """Bytes each IPU loads from Streaming Memory a step: every phase's share forward,
        every phase's but the last forward one's backward (still resident), and the
        activations."""
        return 2 * sum(self.share_bytes) - self.share_bytes[-1] + sum(self.activation_bytes)

    @property
    def store_bytes(self) -> int:
        """Bytes each IPU stores to Streaming Memory a step: its share of every phase's
        updated weights, and the activations."""
        return sum(self.share_bytes) + sum(self.activation_bytes)

    @cached_property
    def seconds(self) -> float:
        """Exposed load and store seconds of a step. Without a prefetch buffer, all of
        them, one after another. With one, while a phase computes, reads (the next phase's
        fetch: load, then all-gather; backward, this phase's activations too) and writes
        (forward, its activations; backward, the previous phase's updated weights) run,
        each way of the link at once, and only what outlasts the compute is exposed; plus
        the first fetch and the last store."""
        bw = self.bandwidth_Bps
        store = [n / bw for n in self.share_bytes]
        act = [n / bw for n in self.activation_bytes]
        fetch = [t + g for t, g in zip(store, self.gather_seconds)]
        last = len(fetch) - 1
        if not self.phases.prefetch:
            return 2 * sum(fetch) - fetch[last] + sum(store) + 2 * sum(act)
        fc, bc = self.forward_compute, self.backward_compute
        forward = fetch[0] + sum(
            max(0.0, max(fetch[i + 1] if i < last else 0.0, act[i]) - fc[i])
            for i in range(last + 1))
        backward = sum(
            max(0.0, max(act[i] + (fetch[i - 1] if i > 0 else 0.0),
                         store[i + 1] if i < last else 0.0) - bc[i])
            for i in range(last + 1))
        return forward + backward + store[0]


@per_plan
def phases_of(run: TrainPlan) -> Phases:
    """The ``run``'s phases by the module's rule: the fewest that fit with a prefetch
    buffer, else the fewest that fit without, else one a layer (which does not fit). The
    fewest is found by bisection (more phases are taken to need no more memory)."""
    workload = run.rank_workload
    capacity = int(run.topology.ipu_processors[int(run.chains[0, 0])].in_processor_memory_bytes)
    params = [layer.parameters for layer in workload.layers]

    def phased(count: int, prefetch: bool) -> Phases:
        return grouped_phases(run, consecutive_groups(params, count), prefetch)

    def fit(phases: Phases) -> bool:
        return max(use.total_bytes for use in phases.use) <= capacity

    for prefetch in (True, False):
        most = phased(len(params), prefetch)
        if not fit(most):
            continue
        low, high, found = 1, len(params), most  # phased(high) fits
        while low < high:
            middle = (low + high) // 2
            tried = phased(middle, prefetch)
            if fit(tried):
                high, found = middle, tried
            else:
                low = middle + 1
        return found
    return phased(len(params), False)


def consecutive_groups(params: list[int], count: int) -> list[range]:
    """``count`` groups of consecutive layers (``params``: each layer's parameters), each
    ending at the first layer whose running total reaches its share of the whole (a cut
    in linear time: a search tries every count), none empty."""
    total, cuts, running = max(1, sum(params)), [0], 0
    for i, value in enumerate(params):
        running += value
        left_groups, left_layers = count - len(cuts), len(params) - i - 1
        if left_groups > 0 and left_layers >= left_groups and (
                running * count >= total * len(cuts) or left_layers == left_groups):
            cuts.append(i + 1)
    return [range(a, b) for a, b in zip(cuts, cuts[1:] + [len(params)])]


def grouped_phases(run: TrainPlan, groups: list[range], prefetch: bool) -> Phases:
    """``groups`` as phases: each one's bytes resident, with a neighbour's weights as the
    prefetch buffer when ``prefetch``."""
    config, workload = run.config, run.rank_workload
    size = workload.weight_dtype.itemsize
    weights = [size * sum(workload.layers[i].parameters for i in g) for g in groups]
    uses = []
    for i, group in enumerate(groups):
        use = memory_use(workload, [workload.layers[j] for j in group], config.micro_batch, 1,
                         config.recomputes, optimizer_offchip=True)
        buffer = max(weights[max(0, i - 1):i] + weights[i + 1:i + 2], default=0)
        uses.append(replace(use, weights_bytes=use.weights_bytes
                            + (buffer if prefetch else 0)))
    return Phases(tuple(groups), tuple(uses), tuple(weights), prefetch)


@per_plan
def phase_loads(run: TrainPlan) -> PhaseLoads:
    """The ``run``'s Streaming Memory traffic and how much of it compute hides."""
    config, workload = run.config, run.rank_workload
    phases = phases_of(run)
    processor = run.topology.ipu_processors[int(run.chains[0, 0])]
    forward = tuple(config.accumulation * forward_seconds(
        workload, processor, config.micro_batch, config.efficiencies,
        [workload.layers[i] for i in group]) for group in phases.layers)
    factor = BACKWARD_FLOPS_FACTOR + (1 if config.recomputes else 0)
    return PhaseLoads(phases, pcie_gen4_x16().bandwidth_Bps, config.optimizer_shards,
                      _gathers(run, phases), config.accumulation, forward,
                      tuple(factor * f for f in forward))


def _gathers(run: TrainPlan, phases: Phases) -> tuple[float, ...]:
    """Each phase's all-gather of its weights' shares over each rack's replicas (0 when
    they are not sharded, or the phase has no weights, as a phase of the loss alone),
    priced by GCL as the sharded reduction's all-gather is; each size priced once."""
    config = run.config
    if config.optimizer_shards == 1:
        return (0.0,) * phases.count
    itemsize = run.rank_workload.weight_dtype.itemsize
    priced: dict[int, float] = {0: 0.0}
    for nbytes in phases.weights_bytes:
        count = -(-nbytes // itemsize // config.optimizer_shards)
        if count not in priced:
            priced[count] = rack_all_gather_seconds(config, run.topology, count,
                                                    run.rank_workload.weight_dtype,
                                                    run.chains)
    return tuple(priced[-(-nbytes // itemsize // config.optimizer_shards)]
                 for nbytes in phases.weights_bytes)


def phase_load_seconds(run: TrainPlan) -> float:
    """The step's "phase loads" part: 0 unless ``--phased``."""
    return phase_loads(run).seconds if run.config.phased else 0.0


def gradient_chunks(run: TrainPlan) -> int:
    """How many collectives reduce the ``run``'s gradients, one after another: one per
    phase with phased execution (each phase's as its backward ends), else 1."""
    return phases_of(run).count if run.config.phased else 1


def check_streaming_memory(run: TrainPlan) -> None:
    """A SettingError if ``--phased`` is asked of IPUs without Streaming Memory (not in an
    IPU-M2000: a DSS 8440's C2 cards have none)."""
    if not run.config.phased:
        return
    streaming = {ipu for u in run.topology.units if u.kind == DeviceKind.IPU_M2000
                 for ipu in u.ipus}
    if not streaming.issuperset(run.chains.ravel().tolist()):
        raise SettingError("phased", "{phased} streams weights from an IPU-M2000's Streaming "
                           "Memory, which the IPUs of {name} do not have: train on a POD "
                           "preset (pod16, pod64, ...)", name=run.topology.name)


def phase_names(run: TrainPlan, phases: Phases, i: int) -> str:
    """Phase ``i``'s name in a memory plan: its number and first and last layers."""
    layers = run.rank_workload.layers
    group = phases.layers[i]
    return (f"phase {i + 1} of {phases.count}, {layers[group[0]].name}.."
            f"{layers[group[-1]].name}{', with prefetch' if phases.prefetch else ''}")

