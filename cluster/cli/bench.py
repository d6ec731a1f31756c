"""``ipupod bench COLLECTIVE``: sweep sizes like nccl-tests, here (phantom or real mode) or
on a partition of a running service (``--partition``); one table either way
(:mod:`cluster.cli.bench_table`)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, replace
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

import click

from cluster.cli.bench_table import (
    format_row,
    groups_words,
    heading,
    preamble,
    rank_lines,
    rows_to_json,
    summary_line,
)
from cluster.cli.output import progress, ray_chatter_to_stderr
from cluster.cli.phantom_note import options_given, phantom_note
from cluster.cli.placement_flags import Placement, launch_pod, placement_options
from cluster.cli.trace_option import (
    check_trace_path,
    save_trace,
    trace_detail_option,
    trace_option,
    wall_recorder,
)
from cluster.errors import UserError
from cluster.model.hardware import FIGURE_SOURCES
from cluster.model.spec import DEFAULT_TOPOLOGY, load_topology
from cluster.model.units import format_size, parse_size, plural
from gcl.algorithms import algorithm as check_algorithm
from gcl.bench_rows import BenchRow, size_notes
from gcl.bench_spec import MAX_RUNS, BenchSpec, PlacedBench, Runs, SizeRange, sizes
from gcl.collectives import DTYPES, Collective, CollectiveName, DType, ReduceOp
from gcl.collectives import collective as lookup
from gcl.groups import CommGroup
from gcl.modes import Mode
from gcl.planner import AUTO
from gcl.sweep_trace import SweepTrace
from ipu_node.bench import run_bench
from ipu_node.bench_fit import DoesNotFit, check_here

if TYPE_CHECKING:
    from ipu_node.wall_trace import WallRecorder
    from ipupod_proto.control_pb2 import BenchmarkRequest

COLLECTIVE_NAMES = [name.value for name in CollectiveName]
DEFAULT_MAX_BYTES = 128 << 20  # -e, as nccl-tests' examples sweep up to
PROGRESS_MIN_PHASES = 200  # a progress bar for sizes with at least this many phases


class SizeType(click.ParamType):
    """A byte count with an optional K/M/G suffix (powers of 1024)."""

    name = "size"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> int:
        """The byte count ``value`` says, or click's usage error."""
        try:
            return parse_size(value)
        except UserError as error:
            self.fail(str(error), param, ctx)


def bench_notes(mode: Mode, real_only_given: tuple[str, ...], coll: Collective,
                byte_sizes: Sequence[int], group_size: int, dtype: DType) -> list[str]:
    """The ``note:`` lines for stderr: the real-mode options given (``real_only_given``)
    that phantom mode does not use, sizes that do not run as asked."""
    unused = phantom_note(real_only_given) if mode != Mode.REAL else []
    return unused + size_notes(coll, byte_sizes, group_size, dtype)


def _notes(lines: list[str]) -> None:
    """``note:`` lines, on stderr (stdout stays the table, or one JSON document)."""
    for line in lines:
        click.echo(line, err=True)


def _echo_table(rows: Iterator[BenchRow], heading: Callable[[], str], out: TextIO) -> None:
    """The table: ``heading()``, a line per row as it comes, the summary. The first row
    comes before any output, so a request that cannot be scheduled fails before any."""
    first = next(rows, None)
    click.echo(heading(), file=out)
    done = []
    for row in rows if first is None else chain([first], rows):
        click.echo(format_row(row), file=out)
        done.append(row)
    click.echo(summary_line(done), file=out)


def _rows_here(bench: PlacedBench, stack: ExitStack, ray_address: str | None,
               trace: SweepTrace | None = None,
               wall: WallRecorder | None = None,
               placement: Placement = Placement()) -> Iterator[BenchRow]:
    """The rows, costed in this process (phantom) or run on devices it launches (real);
    what must be undone afterwards goes on ``stack``; ``trace`` gets each size's simulated
    timeline, ``wall`` (real) what the devices did."""
    on_costed = trace.add if trace else None
    if bench.spec.mode != Mode.REAL:
        on_phase = stack.enter_context(progress("simulating supersteps",
                                                min_total=PROGRESS_MIN_PHASES))
        return run_bench(bench, on_phase=on_phase, on_costed=on_costed)
    pod = launch_pod(bench.topology, ray_address, placement)
    stack.callback(pod.shutdown, stop_ray=True)
    rows = run_bench(bench, pod, on_costed=on_costed)
    if wall is None:
        return rows
    wall.start(pod)
    stack.callback(wall.stop, pod)  # before the POD shuts down
    return wall.each(rows, "sizes", lambda row: f"{row.collective} {format_size(row.bytes)}")


@dataclass(frozen=True)
class TraceRequest:
    """``--trace FILE`` and ``--trace-detail``: where the timeline goes, how fine."""

    path: Path
    detail: str = "auto"


def bench_here(spec: BenchSpec, topology_spec: str, figures: str, ray_address: str | None,
               as_json: bool, trace_request: TraceRequest | None = None,
               placement: Placement = Placement(), max_bytes_given: bool = True,
               real_only_given: tuple[str, ...] = ()) -> None:
    """``ipupod bench`` without ``--partition``: place the request on the topology, check
    it, run it, print it (and write its timeline, if asked). ``max_bytes_given`` False:
    real mode here lowers the largest size to what fits."""
    topology = load_topology(topology_spec, figures)
    devices_here = not (ray_address or os.environ.get("RAY_ADDRESS"))
    if spec.mode == Mode.REAL and not max_bytes_given:
        trial = replace(spec, size_range=SizeRange(DEFAULT_MAX_BYTES, DEFAULT_MAX_BYTES))
        bench = trial.place(topology)
        largest = _default_max_bytes(bench, spec.size_range.min_bytes, devices_here)
        bench = bench.with_range(replace(spec.size_range, max_bytes=largest))
    else:
        bench = spec.place(topology)
    if spec.mode == Mode.REAL:  # before Ray is imported: a refusal starts nothing
        check_here(bench, devices_here=devices_here)
    _notes(bench_notes(spec.mode, real_only_given, spec.collective, bench.byte_sizes,
                       bench.group_size, spec.dtype))
    trace = (SweepTrace(topology, trace_request.detail) if trace_request else None)
    wall = wall_recorder(spec.mode, trace_request.path if trace_request else None)
    with ExitStack() as stack:
        out = (stack.enter_context(ray_chatter_to_stderr()) if spec.mode == Mode.REAL
               else sys.stdout)
        rows = _rows_here(bench, stack, ray_address, trace, wall, placement)
        if as_json:
            click.echo(rows_to_json(list(rows)), file=out)
        else:
            _echo_table(rows, lambda: preamble(bench), out)
    if trace is not None and trace_request is not None:
        if wall is not None:
            wall.add_to(trace.trace)
        save_trace(trace.trace, trace_request.path)


def _default_max_bytes(bench: PlacedBench, min_bytes: int, devices_here: bool) -> int:
    """``-e`` not given, in real mode: the largest power of two up to
    :data:`DEFAULT_MAX_BYTES` (and not below ``-b``, ``min_bytes``) that the IPUs and this
    machine hold, with a note saying so; a default must run. If even ``-b`` does not fit,
    the check that follows says why."""
    size = DEFAULT_MAX_BYTES
    while size > min_bytes:
        try:
            check_here(bench.with_range(SizeRange(size, size)), devices_here=devices_here)
            break
        except DoesNotFit:
            size //= 2
    size = max(size, min_bytes)
    if size < DEFAULT_MAX_BYTES:
        _notes([f"note: -e not given: {format_size(size)} in real mode, the largest size up "
                f"to {format_size(DEFAULT_MAX_BYTES)} whose sweep this machine's memory "
                "holds (give -e to choose; phantom mode prices any size)"])
    return size


def _group_size(result: Any) -> int:
    """Ranks per replica group of a service's result (its ranks, group by group)."""
    return sum(1 for placed in result.ranks if placed.group == 0) or 1


def _service_row(row: Any) -> BenchRow:
    """A row of the service's stream as a :class:`gcl.bench_rows.BenchRow` (its ``json``,
    whose collective and dtype names become their enums again)."""
    fields = json.loads(row.json)
    return BenchRow(**{**fields, "collective": CollectiveName(fields["collective"]),
                       "type": DType(fields["type"])})


def _service_heading(result: Any, request: BenchmarkRequest) -> str:
    """The lines above the table of a bench on the service, from its first result: the
    partition, mode and groups, which IPU each rank runs on, the clocks, the columns."""
    groups: list[list[int]] = []
    names: dict[int, str] = {}
    for placed in result.ranks:
        if placed.group == len(groups):
            groups.append([])
        groups[-1].append(placed.ipu)
        names[placed.ipu] = placed.ipu_name
    where = f"partition {result.partition} ({plural(result.ipus, 'IPU')})"
    grouped = groups_words(CollectiveName(result.collective), result.group or request.group, groups,
                           request.root)
    return heading(f"# ipupod bench {result.collective}: {where}, mode {result.mode}, "
                   f"{grouped}", rank_lines(groups, names.__getitem__), "the service")


def _service_notes(request: BenchmarkRequest, real_only_given: tuple[str, ...],
                   result: Any) -> list[str]:
    """The ``note:`` lines of a bench on the service, once its first result came (the
    service checked the request: its sizes are sound)."""
    return bench_notes(Mode(request.mode), real_only_given, lookup(result.collective),
                       sizes(request.min_bytes, request.max_bytes, request.factor),
                       _group_size(result), DType(request.dtype))


def bench_on_partition(request: BenchmarkRequest, as_json: bool, host: str | None,
                       port: int | None, token_file: str | None,
                       trace_request: TraceRequest | None = None,
                       real_only_given: tuple[str, ...] = ()) -> None:
    """``ipupod bench --partition NAME``: the service reads ``request`` and runs it on
    that partition's IPUs, streaming the rows; each is printed as it comes, under the
    same heading as a bench here. A failure prints the rows done, then the error. (``-e``
    not given: 128M; the service refuses, naming a size that fits, what its machine
    cannot hold.) With ``trace_request`` the service sends the trace after the rows, in
    pieces."""
    # gRPC: only for --partition
    from cluster.service.client import Client

    results = Client(host, port, token_file).stream_benchmark(request)
    done: list[BenchRow] = []
    pieces: list[bytes] = []
    try:
        for result in results:
            if result.trace_chunk:
                pieces.append(result.trace_chunk)
                continue
            if not done:
                _notes(_service_notes(request, real_only_given, result))
            if not done and not as_json:
                click.echo(_service_heading(result, request))
            for row in result.rows:
                done.append(_service_row(row))
                if not as_json:
                    click.echo(format_row(done[-1]))
    finally:
        if as_json:
            click.echo(rows_to_json(done))
        elif done:
            click.echo(summary_line(done))
    if trace_request is not None:
        _save_service_trace(pieces, trace_request.path)


def _save_service_trace(pieces: list[bytes], path: Path) -> None:
    """The trace the service sent, written whole, or a UserError if it did not come."""
    data = b"".join(pieces)
    if not data:
        raise UserError("the service sent no trace: is it older than this ipupod? (its "
                        "BenchmarkResult has no trace_chunk)")
    save_trace(data, path)


@click.command("bench")
@click.argument("collective", type=click.Choice(COLLECTIVE_NAMES, case_sensitive=False))
@click.option("--topology", "topology_spec", default=DEFAULT_TOPOLOGY, show_default=True,
              help="A preset (dss8440, dss8440xN, pod16 ... pod65536) or a YAML file.")
@click.option("--mode", type=click.Choice([mode.value for mode in Mode]), default="phantom",
              show_default=True,
              help="phantom: sizes only, no devices, any scale; real: data through emulated "
                   "devices (Ray actors, gRPC links).")
@click.option("--ray-address", default=None,
              help="Real mode: an existing Ray cluster (default: RAY_ADDRESS, else local Ray).")
@placement_options
@click.option("-b", "--minbytes", "min_bytes", type=SizeType(), default="1M", show_default=True,
              help="Smallest size, bytes (K/M/G = powers of 1024).")
@click.option("-e", "--maxbytes", "max_bytes", type=SizeType(), default=None,
              help="Largest size, bytes. Default: 128M; in real mode on a local Ray, the "
                   "largest power of two up to 128M that this machine's memory holds.")
@click.option("-f", "--stepfactor", "factor", type=float, default=2.0, show_default=True,
              help="Multiply the size by this from one row to the next.")
@click.option("--algorithm", default="auto", show_default=True,
              help="auto, clockwise_ring (ring), anticlockwise_ring, bidirectional_ring_pair, "
                   "hierarchical, halving_doubling.")
@click.option("--dtype", type=click.Choice(list(DTYPES)), default="float32",
              show_default=True)
@click.option("--op", type=click.Choice([op.value for op in ReduceOp]), default="sum",
              show_default=True)
@click.option("--group", "group_text", default="all", show_default=True,
              help="Replica groups: all, consecutive:K or orthogonal:K (K replicas per group).")
@click.option("--root", type=click.IntRange(0, 65535), default=0, show_default=True,
              help="Broadcast root rank.")
@click.option("-n", "--iters", "iterations", type=click.IntRange(1, MAX_RUNS), default=1,
              show_default=True,
              help="Real mode: timed runs per size and placement (wall is their mean).")
@click.option("-w", "--warmup_iters", "warmup", type=click.IntRange(0, MAX_RUNS), default=0,
              show_default=True, help="Real mode: untimed runs per size before those.")
@click.option("-c", "--check", type=click.IntRange(0, 1), default=1, show_default=True,
              help="Real mode: check results against NumPy (#wrong), 1 or 0.")
@click.option("--figures", type=click.Choice(FIGURE_SOURCES), default="seed",
              show_default=True,
              help="Where seed and public figures disagree, which to use (presets; a YAML "
                   "file says its own).")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of rows.")
@trace_option
@trace_detail_option
@click.option("--partition", default=None,
              help="Run on this partition of a running `ipupod serve` (the service runs it).")
@click.option("--host", default=None, help="With --partition: the service's host.")
@click.option("--port", type=click.IntRange(1, 65535), default=None,
              help="With --partition: the service's port.")
@click.option("--token-file", default=None, help="With --partition: the token file.")
def bench_command(collective: str, topology_spec: str, mode: str, min_bytes: int,
                  max_bytes: int | None, factor: float, algorithm: str, dtype: str, op: str,
                  group_text: str, root: int, iterations: int, warmup: int, check: int,
                  figures: str, as_json: bool, trace_path: Path | None, trace_detail: str,
                  ray_address: str | None, placement: Placement, partition: str | None,
                  host: str | None, port: int | None, token_file: str | None) -> None:
    """Sweep sizes of a COLLECTIVE and print simulated time and bandwidth per size."""
    real_only_given = options_given(("iterations", "-n"), ("warmup", "-w"), ("check", "-c"),
                                    ("ray_address", "--ray-address"),
                                    ("allow_split_server", "--allow-split-server"),
                                    ("devices_per_process", "--devices-per-process"))
    trace_request = _trace_request(trace_path, trace_detail)
    size_range = SizeRange(min_bytes, DEFAULT_MAX_BYTES if max_bytes is None else max_bytes,
                           factor)
    runs = Runs(iterations, warmup, bool(check))
    if partition:
        given = click.get_current_context().get_parameter_source("topology_spec")
        if (given is not click.core.ParameterSource.DEFAULT or ray_address or figures != "seed"
                or placement != Placement()):
            raise UserError("--partition runs on the service's POD: --topology, --figures, "
                            "--ray-address, --allow-split-server and --devices-per-process "
                            "belong to the service "
                            "(`ipupod serve`), not to "
                            "the bench; drop them, or drop --partition to bench here")
        request = _service_request(partition, collective, mode, size_range, algorithm, dtype,
                                   op, group_text, root, runs, trace_request)
        bench_on_partition(request, as_json, host, port, token_file, trace_request,
                           real_only_given)
    else:
        spec = _spec(collective, mode, size_range, algorithm, dtype, op, group_text, root, runs)
        bench_here(spec, topology_spec, figures, ray_address, as_json, trace_request,
                   placement, max_bytes is not None, real_only_given)


def _spec(collective: str, mode: str, size_range: SizeRange, algorithm: str, dtype: str,
          op: str, group_text: str, root: int, runs: Runs) -> BenchSpec:
    """The options of a bench here, parsed: a user error for an algorithm that does not
    run the collective, or a replica group that is not one."""
    coll = lookup(collective)
    if algorithm != AUTO:
        check_algorithm(algorithm, coll)
    return BenchSpec(coll, size_range, Mode(mode), DType(dtype), ReduceOp(op), algorithm,
                     CommGroup.parse(group_text), root, runs)


def _service_request(partition: str, collective: str, mode: str, size_range: SizeRange,
                     algorithm: str, dtype: str, op: str, group_text: str, root: int,
                     runs: Runs, trace_request: TraceRequest | None) -> BenchmarkRequest:
    """The options of a bench on the service, as its request: the service reads them (its
    refusals come back as they are; :func:`cluster.service.bench_run.read_request`)."""
    from ipupod_proto import control_pb2  # gRPC: only for --partition

    return control_pb2.BenchmarkRequest(
        partition=partition, collective=collective, min_bytes=size_range.min_bytes,
        max_bytes=size_range.max_bytes, factor=size_range.factor, algorithm=algorithm,
        dtype=dtype, op=op, mode=mode, group=group_text, root=root,
        iterations=runs.iterations, warmup=runs.warmup, check=runs.check,
        trace=trace_request is not None,
        trace_detail=trace_request.detail if trace_request else "")


def _trace_request(path: Path | None, detail: str) -> TraceRequest | None:
    """``--trace`` and ``--trace-detail`` as given, checked before anything runs: a
    timeline of the bench (here, or by the service with ``--partition``), in real mode with
    the devices' wall clock."""
    if path is None:
        if detail != "auto":
            raise UserError("--trace-detail says how fine a --trace is: give --trace FILE too")
        return None
    check_trace_path(path)
    return TraceRequest(path, detail)
