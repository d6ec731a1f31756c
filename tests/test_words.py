"""What the CLI writes reads right: counts in the right number, IPU lists as ranges, and no
reduction op for a collective that reduces nothing."""

import pytest

from cluster.cli.bench_table import format_row, summary_line
from cluster.model.spec import load_topology
from cluster.model.units import plural, ranges
from gcl.bench_rows import run_phantom
from gcl.bench_spec import BenchSpec, SizeRange
from gcl.collectives import COLLECTIVES, ReduceOp


@pytest.mark.parametrize("count, text", [(0, "0 IPUs"), (1, "1 IPU"), (2, "2 IPUs"),
                                         (4096, "4,096 IPUs")])
def test_a_count_takes_the_right_number(count, text):
    assert plural(count, "IPU") == text


@pytest.mark.parametrize("numbers, text", [([], ""), ([5], "5"), ([0, 1, 2, 3], "0-3"),
                                           ([0, 1, 2, 3, 8, 9, 11], "0-3,8-9,11"),
                                           ([4, 6, 8], "4,6,8")])
def test_ipu_lists_print_as_ranges(numbers, text):
    assert ranges(numbers) == text


def max_of(coll):
    """A 1 MiB sweep of ``coll`` on dss8440 with the op ``max``."""
    spec = BenchSpec(coll, SizeRange(1 << 20, 1 << 20), op=ReduceOp.MAX)
    return spec.place(load_topology("dss8440"))


@pytest.mark.parametrize("name", ["broadcast", "all-gather", "all-to-all"])
def test_a_collective_without_a_reduction_shows_none_as_its_op(name):
    [row] = run_phantom(max_of(COLLECTIVES[name]))
    assert row.op == "none" and " none " in format_row(row)
    assert "over 1 size," in summary_line([row])


def test_a_reducing_collective_keeps_its_op():
    [row] = run_phantom(max_of(COLLECTIVES["allreduce"]))
    assert row.op == "max"
