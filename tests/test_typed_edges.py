"""Choices are compared as the enums they are, and device answers have one typed shape
(docs/architecture.md, "Typed edges"): text becomes an enum once, where it enters, so no
module below compares a collective's, a health state's or an op's name as a string."""

import ast
from pathlib import Path

import numpy as np
import pytest

from cluster.errors import ScheduleError
from cluster.service.partition_health import PartitionState
from gcl.collectives import CollectiveName, ReduceOp
from gcl.groups import CommGroup
from ipu_node.answers import DeviceStats, HealthState, IpuCounters, zero_counters
from ipu_node.counters import Counters
from ipu_node.roster import Roster

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("gcl", "ipu_node", "cluster")  # every package of the project
ENUM_TEXT = {member.value: member
             for enum in (CollectiveName, HealthState, ReduceOp, PartitionState)
             for member in enum}


def _literals(node: ast.expr) -> list[ast.Constant]:
    """String constants of a compared operand, and of a tuple, list or set of them."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [i for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)]


def raw_comparisons(source: str) -> list[tuple[int, str]]:
    """(line, text) of each comparison against an enum's value written as a string."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            for operand in (node.left, *node.comparators):
                found += [(c.lineno, c.value) for c in _literals(operand)
                          if c.value in ENUM_TEXT]
    return found


def test_the_scan_finds_a_raw_comparison_and_passes_an_enum_one():
    assert raw_comparisons('if state == "dead" or name in ("allreduce", x): pass') == [
        (1, "dead"), (1, "allreduce")]
    assert raw_comparisons('if op != "mean": pass') == [(1, "mean")]
    assert raw_comparisons("if state == HealthState.DEAD: pass") == []
    assert raw_comparisons('label = "allreduce"') == []  # text, not a comparison


@pytest.mark.parametrize("package", SCANNED)
def test_no_collective_health_or_op_name_is_compared_as_a_string(package):
    offenders = [f"{path.relative_to(ROOT)}:{line}: {text!r} (use {ENUM_TEXT[text]!r})"
                 for path in sorted((ROOT / package).rglob("*.py"))
                 for line, text in raw_comparisons(path.read_text())]
    assert not offenders, "\n".join(offenders)


def test_the_health_states_and_collective_names_keep_their_wire_text():
    assert [s.value for s in HealthState] == ["healthy", "restarting", "unreachable", "dead"]
    assert [f"{s}" for s in PartitionState] == ["healthy", "degraded", "unhealthy"]
    assert CollectiveName.ALL_TO_ALL == "all-to-all"
    assert {CollectiveName.ALLREDUCE: 1}["allreduce"] == 1  # a str key finds an enum's


def test_a_device_s_counters_have_one_typed_shape():
    counters = Counters((3,), directed_links=4)
    counters.add(3, "supersteps", 2)
    counters.add_each("bytes_out", {3: 100})
    per_ipu, link_bytes = counters.snapshot()
    assert per_ipu == {3: IpuCounters(bytes_out=100, bytes_in=0, supersteps=2,
                                      sim_seconds=0.0)}
    assert set(per_ipu[3]) == set(IpuCounters.__annotations__)
    assert link_bytes.shape == (4,)


def _stats(pid: int, supersteps: int, link: float) -> DeviceStats:
    counts = zero_counters()
    counts["supersteps"] = supersteps
    return DeviceStats(name="card0", address="a", link_address=f"l{pid}", pid=pid,
                       counters={0: counts}, link_bytes=np.full(2, link), memory={},
                       collectives_running=0, dropped_chunks=0)


def test_a_restarted_device_s_counters_carry_on_from_its_last_life():
    roster = Roster([], [], ["card0"], ["l1"], None, ["1@l1"], [0])  # type: ignore[arg-type]
    roster.with_offsets(0, _stats(1, supersteps=5, link=10.0))
    roster._fold_counters(0)  # what rejoin does when it sees a new incarnation
    carried = roster.with_offsets(0, _stats(2, supersteps=1, link=1.0))
    assert carried["counters"][0]["supersteps"] == 6
    assert carried["link_bytes"].tolist() == [11.0, 11.0]
    assert carried["pid"] == 2


def test_a_replica_group_is_built_without_text():
    assert CommGroup.consecutive(4) == CommGroup.parse("consecutive:4")
    assert CommGroup.orthogonal(2) == CommGroup.parse("orthogonal:2")
    assert str(CommGroup.orthogonal(2)) == "orthogonal:2"
    for size in (0, -1, 2.0, True):
        with pytest.raises(ScheduleError, match="positive whole size"):
            CommGroup.consecutive(size)  # type: ignore[arg-type]
