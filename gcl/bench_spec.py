"""One benchmark request as a value: parsed once where it enters (``ipupod bench``'s
options, the service's ``BenchmarkRequest``) into a :class:`BenchSpec`, then placed once on
a topology (:class:`PlacedBench`: its sizes and replica groups) and handed down whole to
what checks, plans and runs it (:func:`gcl.bench_rows.run_phantom`,
:mod:`ipu_node.bench_fit`, :func:`ipu_node.real_bench.run_real`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from cluster.errors import UserError
from cluster.model.topology import Topology
from gcl.collectives import Collective, CollectiveName, DType, ReduceOp
from gcl.groups import CommGroup
from gcl.modes import Mode
from gcl.planner import AUTO, replica_groups

MAX_SIZES = 64
MAX_RUNS = 10_000  # -n (timed runs) and -w (warm-up runs) per size, at most


def sizes(min_bytes: int, max_bytes: int, factor: float) -> list[int]:
    """``min, min*f, min*f^2, ...`` up to ``max`` (bytes), as nccl-tests' -b/-e/-f."""
    if min_bytes < 1:
        raise UserError("the smallest size (-b) must be at least 1 byte")
    if max_bytes < min_bytes:
        raise UserError(f"the largest size (-e {max_bytes}) is below the smallest (-b {min_bytes})")
    if min_bytes != max_bytes and not factor > 1:
        raise UserError(f"the size factor (-f) must be more than 1, not {factor}")
    out, size = [], float(min_bytes)
    while size <= max_bytes:
        out.append(int(size))
        if len(out) > MAX_SIZES:
            raise UserError(f"that sweep has more than {MAX_SIZES} sizes: raise -f or narrow -b/-e")
        if min_bytes == max_bytes:
            break
        size *= factor
    return out


def check_runs(iterations: int, warmup: int) -> None:
    """Refuse timed (``-n``) or warm-up (``-w``) run counts out of range, saying the range."""
    if not 1 <= iterations <= MAX_RUNS:
        raise UserError(f"the timed runs per size (-n, iterations) must be 1 to {MAX_RUNS:,}, "
                        f"not {iterations}")
    if not 0 <= warmup <= MAX_RUNS:
        raise UserError(f"the warm-up runs per size (-w, warmup) must be 0 to {MAX_RUNS:,}, "
                        f"not {warmup}")


@dataclass(frozen=True)
class SizeRange:
    """nccl-tests' ``-b``, ``-e`` and ``-f``: the smallest and largest size (bytes) and the
    factor from one size to the next, as asked (checked when placed)."""

    min_bytes: int
    max_bytes: int
    factor: float = 2.0

    def sizes(self) -> list[int]:
        """The sizes of the sweep, bytes, or :func:`sizes`' refusal."""
        return sizes(self.min_bytes, self.max_bytes, self.factor)


@dataclass(frozen=True)
class Runs:
    """Real mode's runs per size and placement: ``warmup`` untimed then ``iterations``
    timed (nccl-tests' ``-w`` and ``-n``), the last one's results checked against NumPy
    unless ``check`` is off (``-c 0``); checked when made (:func:`check_runs`)."""

    iterations: int = 1
    warmup: int = 0
    check: bool = True

    def __post_init__(self) -> None:
        check_runs(self.iterations, self.warmup)

    @property
    def total(self) -> int:
        """Runs per size and placement, warm-up and timed."""
        return self.iterations + self.warmup


@dataclass(frozen=True)
class BenchSpec:
    """What a benchmark asks, parsed: a collective over a range of sizes of ``dtype``
    elements, reduced by ``op``, by ``algorithm`` (``auto``: the fastest) in replica
    groups ``group`` (``root``: a broadcast's root rank), in ``mode``, with ``runs``."""

    collective: Collective
    size_range: SizeRange
    mode: Mode = Mode.PHANTOM
    dtype: DType = DType.FLOAT32
    op: ReduceOp = ReduceOp.SUM
    algorithm: str = AUTO
    group: CommGroup = field(default_factory=CommGroup)
    root: int = 0
    runs: Runs = field(default_factory=Runs)

    @property
    def rooted(self) -> int:
        """The root rank the collective uses: ``root`` for a broadcast, else 0."""
        return self.root if self.collective.name == CollectiveName.BROADCAST else 0

    def place(self, topology: Topology, ipus: Sequence[int] | None = None) -> PlacedBench:
        """The request on ``topology``'s IPUs ``ipus`` (replica ``r`` on ``ipus[r]``;
        None: all), its sizes and replica groups worked out once."""
        byte_sizes = tuple(self.size_range.sizes())
        chosen = None if ipus is None else tuple(int(ipu) for ipu in ipus)
        groups = tuple(replica_groups(topology, self.group, chosen))
        for members in groups:  # shared by every schedule of the sweep: read-only
            members.setflags(write=False)
        return PlacedBench(self, topology, byte_sizes, chosen, groups)


@dataclass(frozen=True, eq=False)
class PlacedBench:
    """A :class:`BenchSpec` on a topology: the sizes (bytes), the replicas' IPUs (None:
    all) and the IPUs of each replica group (:func:`gcl.planner.replica_groups`), which
    everything below reads rather than works out again."""

    spec: BenchSpec
    topology: Topology
    byte_sizes: tuple[int, ...]
    ipus: tuple[int, ...] | None
    groups: tuple[np.ndarray, ...]

    @property
    def replicas(self) -> list[int]:
        """The replicas' IPUs."""
        return list(range(self.topology.ipu_count)) if self.ipus is None else list(self.ipus)

    @property
    def group_size(self) -> int:
        """Ranks per replica group."""
        return len(self.groups[0])

    def with_range(self, size_range: SizeRange) -> PlacedBench:
        """The same request over ``size_range`` (the groups kept)."""
        return replace(self, spec=replace(self.spec, size_range=size_range),
                       byte_sizes=tuple(size_range.sizes()))
