"""The layouts ``ipupod plan`` tries: the replica's shape (pipeline stages, each a tensor
group or one IPU, and for a mixture-of-experts model the expert group), the data-parallel
replicas, the micro-batch and the accumulation that make the global batch, recomputation
and where the optimiser state lives.

A replica is ``S`` pipeline stages of a tensor group of ``T`` (or ``T1 x T2``) IPUs each
(``T`` of 1: a stage per IPU; ``S`` of 1: one tensor group), as ``ipupod train
--ipus-per-replica S x T --tensor-parallel T`` runs it; a MoE model's experts may spread
over ``E`` consecutive replicas (``--expert-parallel E``; with tensor groups, each expert
also split over its tensor group). Every count is a power of two but the accumulation,
which is what is left of the global batch: ``replicas x micro-batch x accumulation =
global batch``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from cluster.model.hardware import DeviceKind
from cluster.model.topology import Topology
from cluster.training.config import IPUS_PER_REPLICA
from cluster.training.optimizer_state import OptimizerState
from cluster.training.tensor_parallel.layout import GROUP_SIZES, OFF, TensorParallel

GPT3_BATCH = {  # Brown et al. 2020, Table 2.1: 0.5M, 1M, 2M, 3.2M tokens in sequences of 2048
    "gpt3-125m": 256, "gpt3-350m": 256, "gpt3-1.3b": 512, "gpt3-2.7b": 512,
    "gpt3-6.7b": 1024, "gpt3-13b": 1024, "gpt3-175b": 1536}
GPT3_SEQUENCE = 2048  # the sequence length of the paper's batches
MOST_STAGES = 16  # pipeline stages, and IPUs of a 1-D group, the search tries at most
WIDE_T1 = (8,)  # t1 of the search's groups of 32 and 64 IPUs: two adjacent IPU-M2000s
PRACTITIONER_BATCH = 512
"""The global batch (samples) of a model without a published one in the repository: a
common pre-training batch (Graphcore's GPT-3 2.7B and BERT phase-1 recipes use 512)."""


@dataclass(frozen=True)
class ReplicaShape:
    """How one replica spreads over its IPUs: ``stages`` pipeline stages, each a tensor
    group (or one IPU with tensor parallelism off), and its MoE layers' experts over
    ``expert_parallel`` replicas (1: off)."""

    tensor_parallel: TensorParallel = OFF
    stages: int = 1
    expert_parallel: int = 1

    @property
    def ipus(self) -> int:
        """IPUs of one replica: stages x the tensor group's."""
        return self.tensor_parallel.size * self.stages

    def __str__(self) -> str:
        experts = (f", experts over {self.expert_parallel} replicas"
                   if self.expert_parallel > 1 else "")
        pipeline = f"pipeline of {self.stages} stages"
        if self.tensor_parallel.on:
            tensor = f"tensor-parallel {self.tensor_parallel}"
            return (f"{pipeline} x {tensor}" if self.stages > 1 else tensor) + experts
        return ("1 IPU" if self.stages == 1 else pipeline) + experts


@dataclass(frozen=True)
class Layout:
    """One candidate: the replica's shape, replicas per server or rack, micro-batch
    (samples), accumulation (micro-batches a step), recomputation, optimiser state, and
    whether its layers run phase by phase (``--phased``)."""

    shape: ReplicaShape
    replicas_per_server: int
    micro_batch: int
    accumulation: int
    recompute: bool
    optimizer_state: OptimizerState
    phased: bool = False


def default_global_batch(model: str, sequence_length: int | None) -> tuple[int, str]:
    """The global batch (samples a step) when none is given, and why: a GPT-3's Table 2.1
    batch (its tokens, in sequences of ``sequence_length`` when given), else
    :data:`PRACTITIONER_BATCH`."""
    sequences = GPT3_BATCH.get(model)
    if sequences is None:
        return PRACTITIONER_BATCH, ("a common pre-training batch: no published batch for "
                                    "this model in the emulator")
    sequence = sequence_length or GPT3_SEQUENCE
    batch = max(1, sequences * GPT3_SEQUENCE // sequence)
    same = "" if sequence == GPT3_SEQUENCE else f", as {batch} of {sequence}"
    return batch, (f"Brown et al. 2020, Table 2.1: {sequences} sequences of "
                   f"{GPT3_SEQUENCE} tokens{same}")


def replica_shapes(server_size: int, layers: int, experts: int = 1) -> list[ReplicaShape]:
    """The replica shapes the search tries on a server or rack of ``server_size`` IPUs:
    one IPU, pipelines of 2 to 16 stages (no more stages than ``layers``), the
    :func:`tensor_groups`, and pipelines of those groups; with ``experts`` per MoE layer
    (1: none), every shape again with the experts over 2, 4, ... replicas (a power of two
    that divides ``experts``)."""
    groups = [OFF, *tensor_groups(server_size)]
    shapes = [ReplicaShape(group, k) for group in groups for k in IPUS_PER_REPLICA
              if k <= min(layers, MOST_STAGES) and group.size * k <= server_size]
    degrees = [e for e in powers_of_two(experts) if e > 1 and experts % e == 0]
    return shapes + [ReplicaShape(shape.tensor_parallel, shape.stages, e) for e in degrees
                     for shape in shapes]


def tensor_groups(server_size: int) -> list[TensorParallel]:
    """The tensor groups the search tries on a server or rack of ``server_size`` IPUs:
    1-D and 2-D groups of 2 to 16 IPUs, and rack-wide 2-D groups of 32 and 64 whose
    ``t1`` is one of :data:`WIDE_T1` (within an IPU-M2000 or two adjacent ones, as
    Graphcore's GPT-3 175B 8 x 8 is): the other shapes of those sizes spend longer in
    all-reduces over IPU-M2000s and are left out to keep the search interactive."""
    sizes = [n for n in GROUP_SIZES if 1 < n <= server_size and server_size % n == 0]
    narrow = [n for n in sizes if n <= MOST_STAGES]
    return [*(TensorParallel(n) for n in narrow),
            *(TensorParallel(n // t2, t2) for n in narrow for t2 in narrow if 1 < t2 < n),
            *(TensorParallel(t1, n // t1) for n in sizes if n > MOST_STAGES
              for t1 in WIDE_T1)]


def optimizer_states(topology: Topology) -> list[OptimizerState]:
    """Where the optimiser state may live: Streaming Memory only on IPU-M2000s."""
    streams = all(unit.kind == DeviceKind.IPU_M2000 for unit in topology.units)
    return [state for state in OptimizerState if streams or not state.offchip]


def powers_of_two(most: int) -> list[int]:
    """1, 2, 4, ... up to ``most``."""
    return [1 << i for i in range(max(0, most).bit_length())]


def layouts(shape: ReplicaShape, servers: int, server_size: int, global_batch: int,
            states: list[OptimizerState]) -> Iterator[tuple[Layout, ...]]:
    """The layouts of ``shape``, in runs of the same replicas, recomputation, state and
    phasing whose micro-batch grows (so a search stops a run at the first that does not
    fit: a larger micro-batch needs more memory); phased only for a replica of one stage
    with its optimiser state in Streaming Memory (what ``--phased`` takes)."""
    for per_server in powers_of_two(server_size // shape.ipus):
        replicas = servers * per_server
        if global_batch % replicas or per_server % shape.expert_parallel:
            continue
        for recompute in (True, False):
            for state in states:
                for phased in (False, True)[:1 + (shape.stages == 1 and state.offchip)]:
                    yield tuple(Layout(shape, per_server, m, global_batch // (replicas * m),
                                       recompute, state, phased)
                                for m in powers_of_two(global_batch // replicas)
                                if global_batch % (replicas * m) == 0)
