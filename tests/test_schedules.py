"""Every collective x algorithm x replica group computes its collective (run in memory on
the schedule's own byte ranges), and schedules are well-formed data."""

import numpy as np
import pytest

from cluster.errors import ScheduleError
from cluster.model.presets import build_preset
from gcl import CommGroup, plan
from gcl.algorithms import for_collective
from gcl.collectives import COLLECTIVES, DType
from gcl.local_executor import run_in_memory
from gcl.reference import expected

TOPOLOGIES = {name: build_preset(name) for name in ("dss8440", "dss8440x2", "pod16")}
GROUPS = ["all", "consecutive:4", "orthogonal:8"]
CASES = [(t, c, a.name) for t in TOPOLOGIES for c in COLLECTIVES
         for a in for_collective(COLLECTIVES[c])]
def check(topology, collective, algorithm, group, count, op="sum", root=1):
    schedule = plan(collective, topology, count, dtype=DType.INT32, algorithm_name=algorithm,
                    group=CommGroup.parse(group), root=root)
    n = schedule.group_size
    per_replica = count * (n if collective in ("reduce-scatter", "all-to-all") else 1)
    rng = np.random.default_rng(count)
    inputs = [rng.integers(-1000, 1000, per_replica, dtype=np.int32)
              for _ in range(topology.ipu_count)]
    results = run_in_memory(schedule, inputs, op)
    for g in range(len(schedule.groups)):
        ranks = slice(g * n, (g + 1) * n)
        for got, want in zip(results[ranks], expected(collective, inputs[ranks], op, root)):
            np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("topology, collective, algorithm", CASES)
@pytest.mark.parametrize("group", GROUPS)
def test_every_algorithm_computes_its_collective(topology, collective, algorithm, group):
    for count in (1, 7, 96):  # fewer elements than IPUs, uneven splits, even splits
        check(TOPOLOGIES[topology], collective, algorithm, group, count)


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_and_min_reduce_like_numpy(op):
    for algorithm in ("clockwise_ring", "hierarchical", "halving_doubling"):
        check(TOPOLOGIES["dss8440x2"], "allreduce", algorithm, "all", 50, op=op)


def test_mean_divides_the_sum_by_the_group_size():
    topology = TOPOLOGIES["dss8440"]
    schedule = plan("allreduce", topology, 10, dtype=DType.FLOAT32, algorithm_name="clockwise_ring")
    inputs = [np.full(10, float(i), dtype=np.float32) for i in range(16)]
    results = run_in_memory(schedule, inputs, "mean")
    np.testing.assert_allclose(results[0], np.full(10, 7.5), rtol=1e-6)


def test_float16_allreduce_matches_numpy_within_rounding():
    topology = TOPOLOGIES["pod16"]
    schedule = plan("allreduce", topology, 1000, dtype=DType.FLOAT16, algorithm_name="hierarchical")
    rng = np.random.default_rng(1)
    inputs = [rng.standard_normal(1000).astype(np.float16) for _ in range(16)]
    results = run_in_memory(schedule, inputs)
    np.testing.assert_allclose(results[3], np.sum(np.stack(inputs).astype(np.float32), axis=0),
                               atol=0.1)


def test_padding_rounds_each_slot_up_and_travels_with_the_data():
    schedule = plan("allreduce", TOPOLOGIES["dss8440"], 17, algorithm_name="clockwise_ring")
    assert (schedule.slots, schedule.chunk) == (16, 2)
    assert schedule.buffer_elements == 32
    assert schedule.supersteps == 30


def test_bidirectional_ring_pair_splits_every_chunk_in_two_halves():
    schedule = plan("allreduce", TOPOLOGIES["dss8440"], 16, algorithm_name="bidirectional")
    assert schedule.chunk == 2  # granularity 2: one element each way
    first = schedule.phases[0]
    assert len(first.src) == 32 and set(first.count.tolist()) == {1}


def test_a_phase_gives_the_byte_ranges_of_every_step():
    schedule = plan("reduce-scatter", TOPOLOGIES["dss8440"], 4, algorithm_name="clockwise_ring")
    phase = schedule.phases[0]
    with pytest.raises(IndexError):
        phase.transfers(phase.steps)
    seen = {tuple(phase.transfers(k).src_offset.tolist()) for k in range(phase.steps)}
    assert len(seen) == phase.steps  # each step moves different chunks


def test_hierarchical_needs_even_domains():
    topology = TOPOLOGIES["dss8440x2"]
    with pytest.raises(ScheduleError, match="same number of the group's IPUs"):
        plan("allreduce", topology, 64, algorithm_name="hierarchical",
             ipus=np.arange(20))


def test_halving_doubling_needs_a_power_of_two_group():
    with pytest.raises(ScheduleError, match="power-of-two"):
        plan("allreduce", TOPOLOGIES["dss8440"], 64, algorithm_name="halving_doubling",
             ipus=np.arange(12))


@pytest.mark.parametrize("request_kwargs, words", [
    ({"algorithm_name": "nope"}, "unknown algorithm 'nope'"),
    ({"algorithm_name": "hierarchical", "collective": "broadcast"}, "does not run broadcast"),
    ({"group": CommGroup.parse("consecutive:5")}, "does not divide 16"),
    ({"root": 16, "collective": "broadcast"}, "root 16"),
    ({"ipus": np.array([0, 0, 1])}, "duplicates"),
    ({"ipus": np.array([0, 99])}, "IPU ids run from 0 to 15"),
    ({"count": 0}, "at least one element"),
])
def test_bad_requests_are_refused_with_a_reason(request_kwargs, words):
    kwargs = {"count": 64, "collective": "allreduce", **request_kwargs}
    collective, count = kwargs.pop("collective"), kwargs.pop("count")
    with pytest.raises(ScheduleError, match=words):
        plan(collective, TOPOLOGIES["dss8440"], count, **kwargs)


def test_an_unknown_dtype_is_refused_where_its_text_is_parsed():
    with pytest.raises(ScheduleError, match="unknown dtype"):
        DType.parse("float64")


@pytest.mark.parametrize("text, error", [("ring:4", "unknown replica group"),
                                         ("consecutive", "positive size"),
                                         ("orthogonal:0", "positive size"),
                                         ("all:2", "takes no size")])
def test_bad_group_texts_are_refused(text, error):
    with pytest.raises(ScheduleError, match=error):
        CommGroup.parse(text)


def test_orthogonal_groups_stride_across_replicas():
    groups = CommGroup.parse("orthogonal:4").ranks(8)
    assert [g.tolist() for g in groups] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert [g.tolist() for g in CommGroup.parse("consecutive:4").ranks(8)] == [
        [0, 1, 2, 3], [4, 5, 6, 7]]


def test_auto_picks_the_fastest_by_the_cost_model():
    from gcl import simulate

    topology = TOPOLOGIES["dss8440x2"]
    chosen = plan("allreduce", topology, 1 << 20)
    times = {a.name: simulate(plan("allreduce", topology, 1 << 20, algorithm_name=a.name),
                              topology).sim_seconds
             for a in for_collective(COLLECTIVES["allreduce"])}
    assert chosen.algorithm == min(times, key=times.get) == "hierarchical"


def test_groups_split_differently_by_domains_get_a_schedule_error_and_auto_moves_on():
    from cluster.model.builder import TopologyBuilder
    from cluster.model.hardware import gc200
    from tests.builders import link, quiet

    b = TopologyBuilder("mixed")
    ipus = b.add_ipus([f"ipu{i}" for i in range(16)], gc200())
    switch = b.add_nodes(["sw"], "switch")
    fast = link(100, 0, "fast")
    for first, size in [(0, 2), (2, 2), (4, 2), (6, 2), (8, 4), (12, 4)]:  # six domains
        b.add_links(ipus[first:first + size - 1], ipus[first + 1:first + size], fast)
    b.add_links(ipus, np.repeat(switch, 16), link(10, 0, "slow"))
    topology = quiet(b)
    group = CommGroup.parse("consecutive:8")
    with pytest.raises(ScheduleError, match="differ in shape"):
        plan("allreduce", topology, 64, algorithm_name="hierarchical", group=group)
    assert plan("allreduce", topology, 64, group=group).algorithm != "hierarchical"


def test_every_algorithm_is_registered_whatever_was_imported_first():
    import subprocess
    import sys

    code = ("import gcl.algorithms.ring; from gcl.algorithms import algorithms; "
            "print(sorted(algorithms()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert "hierarchical" in out and "halving_doubling" in out


def test_halving_doubling_swaps_its_largest_halves_between_nearest_ranks():
    schedule = plan("allreduce", TOPOLOGIES["dss8440"], 1600, algorithm_name="halving_doubling")
    first, last = schedule.phases[0], schedule.phases[-1]
    ipus = np.arange(16)
    np.testing.assert_array_equal(first.dst, ipus ^ 1)  # the two IPUs of one C2 card
    np.testing.assert_array_equal(last.dst, ipus ^ 1)
    assert set(first.count.tolist()) == {8 * schedule.chunk}  # half of the 16 slots
    assert [int(p.count[0] // schedule.chunk) for p in schedule.phases] == [8, 4, 2, 1, 1, 2, 4, 8]
    assert schedule.slot_of_rank[0].tolist()[:4] == [0, 8, 4, 12]  # bit-reversed ranks


def test_hierarchical_over_many_groups_gives_each_group_the_phases_it_has_alone():
    # the groups share a domain grid, built once between ranks: each still gets its IPUs
    topology = TOPOLOGIES["dss8440x2"]
    groups = [np.array([0, 1, 16, 17]), np.array([3, 2, 19, 18]), np.array([4, 5, 20, 21])]
    together = plan("allreduce", topology, 64, algorithm_name="hierarchical", groups=groups)
    for g, ipus in enumerate(groups):
        alone = plan("allreduce", topology, 64, algorithm_name="hierarchical", groups=[ipus])
        np.testing.assert_array_equal(together.slot_of_rank[g], alone.slot_of_rank[0])
        for mixed, own in zip(together.phases, alone.phases):
            flows = slice(g * len(own.src), (g + 1) * len(own.src))
            np.testing.assert_array_equal(mixed.src[flows], own.src)
            np.testing.assert_array_equal(mixed.dst[flows], own.dst)
            assert own.src.dtype == own.dst.dtype == np.int64
