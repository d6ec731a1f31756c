"""The nccl-tests table of ``ipupod bench``: the lines above it (what ran where, the
clocks, the columns), a line per :class:`gcl.bench_rows.BenchRow`, the summary below;
or the rows as JSON (``--json``). GCL hands over rows as data; the words are here.

Per size: ``size count type redop algorithm``, then an out-of-place group (the result in a
tensor of its own) and an in-place group (the result over the input), each ``time algbw
busbw wall #wrong`` as nccl-tests prints them. ``time`` is *simulated* microseconds on the
emulated hardware, ``algbw`` and ``busbw`` decimal GB/s; ``wall`` is seconds of this
machine (or of the service's); ``#wrong`` is ``N/A`` when not checked, as nccl-tests
prints it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict

from cluster.model.units import format_size, plural
from gcl.bench_rows import BenchRow
from gcl.bench_spec import PlacedBench
from gcl.collectives import CollectiveName

MAX_RANK_LINES = 64  # ranks listed one per line above the table

# (name, unit, width): the columns before the placement groups, and those of each group
_SIZE_COLUMNS = (("size", "(B)", 12), ("count", "(elements)", 12), ("type", "", 7),
                 ("redop", "", 6), ("algorithm", "", 23))
_GROUP_COLUMNS = (("time", "(us)", 10), ("algbw", "(GB/s)", 7), ("busbw", "(GB/s)", 7),
                  ("wall", "(s)", 8), ("#wrong", "", 6))
_GAP = "  "  # between the column groups


def _columns(columns: Sequence[tuple[str, str, int]], which: int) -> str:
    """Line ``which`` (0: names, 1: units) of ``columns``, right-aligned as the rows."""
    return " ".join(f"{column[which]:>{column[2]}}" for column in columns)


def table_header() -> str:
    """The column headings as three comment lines, as nccl-tests prints them: the
    placement over each group, the column names, their units."""
    size_width = len(_columns(_SIZE_COLUMNS, 0))
    group_width = len(_columns(_GROUP_COLUMNS, 0))
    lines = [" " * size_width + _GAP + f"{'out-of-place':^{group_width}}" + _GAP
             + f"{'in-place':^{group_width}}"]
    for which in (0, 1):
        group = _columns(_GROUP_COLUMNS, which)
        lines.append(_columns(_SIZE_COLUMNS, which) + _GAP + group + _GAP + group)
    return "\n".join("#" + line[1:].rstrip() for line in lines)


def _measures(row: BenchRow, wall_seconds: float, wrong: int | None) -> str:
    """One placement's group of a row: the simulated figures, wall seconds, #wrong."""
    shown = "N/A" if wrong is None or wrong < 0 else wrong  # phantom mode, or -c 0
    widths = [width for _, _, width in _GROUP_COLUMNS]
    return " ".join([f"{row.sim_seconds * 1e6:>{widths[0]}.2f}",
                     f"{row.algbw_GBps:>{widths[1]}.2f}", f"{row.busbw_GBps:>{widths[2]}.2f}",
                     f"{wall_seconds:>{widths[3]}.3f}", f"{shown:>{widths[4]}}"])


def format_row(row: BenchRow) -> str:
    """One row of the table, under :func:`table_header`'s columns."""
    widths = [width for _, _, width in _SIZE_COLUMNS]
    size = " ".join(f"{value:>{width}}" for value, width in zip(
        (row.bytes, row.count, row.type, row.op, row.algorithm), widths))
    return (size + _GAP + _measures(row, row.wall_seconds, row.wrong) + _GAP
            + _measures(row, row.in_place_wall_seconds, row.in_place_wrong))



def preamble(bench: PlacedBench) -> str:
    """The lines above a standalone run's table: topology, mode, groups, ranks, clocks,
    columns."""
    spec, topology = bench.spec, bench.topology
    groups = [g.tolist() for g in bench.groups]
    where = f"topology {topology.name} ({plural(topology.ipu_count, 'IPU')})"
    return heading(f"# ipupod bench {spec.collective.name}: {where}, mode {spec.mode}, "
                   f"{groups_words(spec.collective.name, str(spec.group), groups, spec.root)}",
                   rank_lines(groups, topology.ipu_name), "this machine")


def groups_words(collective: CollectiveName, group: str, groups: Sequence[Sequence[int]],
                 root: int = 0) -> str:
    """``group all (1 x 16 IPUs)``, and the root of a broadcast."""
    rooted = f", root {root}" if collective == CollectiveName.BROADCAST else ""
    return f"group {group} ({len(groups)} x {plural(len(groups[0]), 'IPU')}){rooted}"


def heading(title: str, ranks: list[str], wall_on: str) -> str:
    """The lines above a table: ``title``, the ranks' IPUs, what each clock and column
    group is (wall seconds ``on`` this machine or the service), the column headings."""
    return "\n".join([
        title, *ranks,
        f"# time, algbw, busbw: simulated on the emulated hardware; wall: seconds on {wall_on}",
        "# out-of-place: the result in a tensor of its own; in-place: over the input "
        "(simulated: the same)",
        "#",
        table_header(),
    ])


def rank_lines(groups: Sequence[Sequence[int]], ipu_name: Callable[[int], str]) -> list[str]:
    """Which IPU each rank runs on, as nccl-tests lists ranks and devices: a line per rank
    up to :data:`MAX_RANK_LINES` ranks, else one line saying how they are laid out."""
    ranks = sum(len(g) for g in groups)
    if ranks > MAX_RANK_LINES:
        first = list(groups[0])
        return [f"#  {plural(ranks, 'rank')} in {plural(len(groups), 'group')}; group 0 on "
                f"IPUs {first[0]}, {first[1] if len(first) > 1 else ''}... (listed up to "
                f"{MAX_RANK_LINES} ranks)"]
    return [f"#  Rank {rank:>3} Group {g:>3} on IPU {ipu:>4} {ipu_name(ipu)}"
            for g, members in enumerate(groups) for rank, ipu in enumerate(members)]


def summary_line(rows: list[BenchRow]) -> str:
    """The lines below the table: the average bus bandwidth over the sizes, and
    nccl-tests' out-of-bounds count."""
    if not rows:
        return "# no sizes"
    average = sum(r.busbw_GBps for r in rows) / len(rows)
    return (f"# Avg bus bandwidth (simulated): {average:.2f} GB/s over "
            f"{plural(len(rows), 'size')}, "
            f"{format_size(rows[0].bytes)} to {format_size(rows[-1].bytes)} bytes\n"
            f"{out_of_bounds_line(rows)}")


def out_of_bounds_line(rows: list[BenchRow]) -> str:
    """nccl-tests' last line: how many result elements differ from the reference, out of
    place and in place together."""
    counts = [w for r in rows for w in (r.wrong, r.in_place_wrong)]
    if any(w is None for w in counts):
        return "# Out of bounds values : not checked (phantom mode moves no data)"
    if any(w is not None and w < 0 for w in counts):
        return "# Out of bounds values : not checked (-c 0)"
    wrong = sum(w or 0 for w in counts)
    return f"# Out of bounds values : {wrong} {'OK' if wrong == 0 else 'FAILED'}"


def rows_to_json(rows: list[BenchRow]) -> str:
    """The rows as a JSON list (``--json``)."""
    return json.dumps([asdict(r) for r in rows], indent=2)
