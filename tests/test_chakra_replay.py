"""Replaying Chakra traces in phantom mode (``ipupod replay``): an all-reduce replayed takes
exactly the simulated time ``ipupod bench allreduce`` gives; nodes run in dependency
order, compute one at a time per IPU; sends pair with receives; a 2-rank trace re-scales
to 64; deadlocks, unpaired sends and traces larger than the topology are one error line;
--json and --trace write what they say; the example traces replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster.model.spec import load_topology
from cluster.training.chakra.et_reader import read_chakra_trace
from cluster.training.chakra.replay_pricing import ComputeSource, ReplayOptions
from cluster.training.chakra.replay_run import replay
from gcl.bench_rows import run_phantom
from gcl.bench_spec import BenchSpec, SizeRange
from gcl.collectives import ALLREDUCE
from ipupod_proto import chakra_et_pb2 as et
from tests.test_chakra_reader import attr, coll, comp, framed
from tests.test_chakra_reader import write_trace as write_reader_trace

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
MiB = 1 << 20


def send(node_id: int, src: int, dst: int, size: int, deps: tuple[int, ...] = (),
         tag: int = 0) -> et.Node:
    node = et.Node(id=node_id, name=f"send{node_id}", type=et.COMM_SEND_NODE, data_deps=deps)
    node.attr.extend([attr("comm_src", int32_val=src), attr("comm_dst", int32_val=dst),
                      attr("comm_tag", int32_val=tag), attr("comm_size", int64_val=size)])
    return node


def recv(node_id: int, src: int, dst: int, size: int, deps: tuple[int, ...] = (),
         tag: int = 0) -> et.Node:
    node = et.Node(id=node_id, name=f"recv{node_id}", type=et.COMM_RECV_NODE, data_deps=deps)
    node.attr.extend([attr("comm_src", int32_val=src), attr("comm_dst", int32_val=dst),
                      attr("comm_tag", int32_val=tag), attr("comm_size", int64_val=size)])
    return node


def write(folder: Path, ranks: list[list[et.Node]]) -> str:
    """One file per rank, ``step.RANK.et``; the trace's prefix."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank, nodes in enumerate(ranks):
        (folder / f"step.{rank}.et").write_bytes(
            framed(et.GlobalMetadata(version="0.0.4"), *nodes))
    return str(folder / "step")


def allreduce_trace(folder: Path, ranks: int, size: int) -> str:
    return write(folder, [[coll(1, et.ALL_REDUCE, size)] for _ in range(ranks)])


def bench_seconds(ipupod_main, topology: str, size: int, *options: str) -> float:
    run = ipupod_main("bench", "allreduce", "--topology", topology, "-b", str(size), "-e",
                      str(size), "--json", *options)
    assert run.returncode == 0, run.stderr
    [row] = json.loads(run.stdout)
    return float(row["sim_seconds"])


def replayed(ipupod_main, trace: str, *options: str) -> dict:
    run = ipupod_main("replay", trace, "--json", *options)
    assert run.returncode == 0, run.stderr
    return json.loads(run.stdout)


@pytest.mark.parametrize(("topology", "ranks", "size", "options"), [
    ("pod16", 16, 100 * MiB, ()),
    ("pod16", 16, 3 * MiB + 4, ("--algorithm", "clockwise_ring")),
    ("dss8440", 16, 7 * MiB, ("--algorithm", "hierarchical", "--dtype", "float16")),
    ("pod64", 64, 64 * MiB, ("--algorithm", "bidirectional_ring_pair")),
])
def test_an_allreduce_replayed_takes_exactly_the_time_bench_gives(
        tmp_path, ipupod_main, topology, ranks, size, options) -> None:
    trace = allreduce_trace(tmp_path, ranks, size)
    summary = replayed(ipupod_main, trace, "--topology", topology, *options)
    expected = bench_seconds(ipupod_main, topology, size, *options)
    assert summary["end_seconds"] == expected
    assert summary["collectives"]["all-reduce"]["sim_seconds"] == expected
    assert all(rank["end_seconds"] == expected for rank in summary["per_rank"])


def test_an_allreduce_on_some_ranks_of_a_pod_matches_the_bench_on_those_ipus(tmp_path) -> None:
    topology = load_topology("pod16")
    trace = read_chakra_trace(allreduce_trace(tmp_path, 4, 8 * MiB))
    _, summary = replay(trace, topology)
    bench = BenchSpec(ALLREDUCE, SizeRange(8 * MiB, 8 * MiB)).place(topology, [0, 1, 2, 3])
    [row] = run_phantom(bench)
    assert summary["end_seconds"] == row.sim_seconds


def test_nodes_run_after_their_dependencies_and_compute_one_at_a_time(tmp_path) -> None:
    # 1 and 2 are both ready at 0: one waits for the other; 3 waits for both; the all-reduce
    # starts when the slower rank reaches it; 5 after it.
    nodes = [[comp(1, 100), comp(2, 200), comp(3, 50, deps=(1, 2)),
              coll(4, et.ALL_REDUCE, MiB, deps=(3,)), comp(5, 10, deps=(4,))],
             [comp(1, 700), coll(4, et.ALL_REDUCE, MiB, deps=(1,)), comp(5, 10, deps=(4,))]]
    record, summary = replay(read_chakra_trace(write(tmp_path, nodes)), load_topology("pod16"))
    zero = record.runs[0]
    for run in record.runs:
        for index, node in enumerate(run.nodes):
            deps = [i for i, other in enumerate(run.nodes)
                    if other.id in (*node.data_deps, *node.ctrl_deps)]
            assert all(run.start[index] >= run.end[d] for d in deps)
    assert (zero.start[0], zero.end[0], zero.start[1], zero.end[1]) == pytest.approx(
        (0.0, 100e-6, 100e-6, 300e-6))
    assert zero.start[2] == pytest.approx(300e-6)
    assert zero.start[3] == record.runs[1].start[1] == pytest.approx(700e-6)
    assert summary["per_rank"][0]["idle_seconds"] == pytest.approx(700e-6 - 350e-6)
    path = summary["critical_path"]
    assert path["steps"][0]["rank"] == 1  # rank 1's long compute
    assert path["end_seconds"] == summary["end_seconds"]


def test_a_receive_ends_when_the_bytes_of_its_send_arrive(tmp_path) -> None:
    # rank 0 sends after 100 us; rank 1 posts its receive at 0 and its second one late
    nodes = [[comp(1, 100), send(2, 0, 1, 4 * MiB, deps=(1,), tag=5),
              send(3, 0, 1, 4 * MiB, deps=(1,), tag=6)],
             [recv(1, 0, 1, 4 * MiB, tag=5), comp(2, 5000), recv(3, 0, 1, 4 * MiB, deps=(2,),
                                                                   tag=6)]]
    record, summary = replay(read_chakra_trace(write(tmp_path, nodes)), load_topology("pod16"))
    sender, receiver = record.runs
    assert sender.start[1] == pytest.approx(100e-6)
    assert receiver.end[0] == sender.end[1] > sender.start[1]
    assert receiver.end[2] == pytest.approx(5000e-6)  # the bytes were there before it
    assert summary["collectives"]["send"]["count"] == 2
    assert summary["links"][0]["bytes"] == 8 * MiB


def test_a_two_rank_trace_rescaled_to_64_ranks_runs_its_allreduce_over_all_64(
        tmp_path, ipupod_main) -> None:
    nodes = [[comp(1, 100), coll(2, et.ALL_REDUCE, 32 * MiB, deps=(1,), pg_name="dp"),
              send(3, rank, 1 - rank, MiB, deps=(2,)), recv(4, 1 - rank, rank, MiB)]
             for rank in range(2)]
    trace = write(tmp_path, nodes)
    summary = replayed(ipupod_main, trace, "--topology", "pod64", "--ranks-to", "64")
    assert summary["ranks"] == 64 and summary["source_ranks"] == 2
    assert summary["groups"]["dp"] == list(range(64))
    assert summary["collectives"]["all-reduce"] == {
        "count": 1, "bytes": 32 * MiB,
        "sim_seconds": bench_seconds(ipupod_main, "pod64", 32 * MiB)}
    assert summary["collectives"]["send"]["count"] == 64
    assert any("re-scaled from 2 ranks to 64" in line for line in summary["assumed"])
    record, _ = replay(read_chakra_trace(trace), load_topology("pod64"),
                       ReplayOptions(ranks_to=64))
    for rank in (2, 3, 63):  # sends stay in their replica: 2 <-> 3, 62 <-> 63
        run = record.runs[rank]
        partner = record.runs[rank ^ 1]
        assert run.end[3] == partner.end[2]


def test_ranks_to_that_is_not_a_multiple_is_one_error_line(tmp_path, ipupod_main) -> None:
    trace = allreduce_trace(tmp_path, 2, MiB)
    run = ipupod_main("replay", trace, "--topology", "pod16", "--ranks-to", "5")
    assert run.returncode == 2
    assert run.stderr.startswith("error: --ranks-to 5: a trace of 2 ranks re-scales to a "
                                 "multiple of 2")
    assert len(run.stderr.strip().splitlines()) == 1 and run.stdout == ""


def test_a_trace_with_more_ranks_than_ipus_is_refused_naming_both(tmp_path, ipupod_main) -> None:
    run = ipupod_main("replay", allreduce_trace(tmp_path, 32, MiB), "--topology", "pod16")
    assert run.returncode == 2
    assert run.stderr.strip() == ("error: the trace has 32 ranks (one IPU each) but pod16 has "
                                  "16 IPUs: replay it on a bigger --topology")


def test_ranks_waiting_for_each_other_are_a_deadlock_naming_rank_and_node(
        tmp_path, ipupod_main) -> None:
    # rank 0 all-reduces on 'a' then 'b'; rank 1 on 'b' then 'a'
    nodes = [[coll(1, et.ALL_REDUCE, MiB, pg_name="a"),
              coll(2, et.ALL_REDUCE, MiB, deps=(1,), pg_name="b")],
             [coll(1, et.ALL_REDUCE, MiB, pg_name="b"),
              coll(2, et.ALL_REDUCE, MiB, deps=(1,), pg_name="a")]]
    run = ipupod_main("replay", write(tmp_path, nodes), "--topology", "pod16")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.strip() == (
        "error: cannot replay: deadlock: rank 0's node 1 ('coll1') cannot finish: collective 0 "
        "of process group 'a' waits for rank 1, which never reaches it (4 nodes never ran)")


def test_an_unpaired_send_is_one_error_line(tmp_path, ipupod_main) -> None:
    nodes = [[send(1, 0, 1, MiB), send(2, 0, 1, MiB)], [recv(1, 0, 1, MiB)]]
    run = ipupod_main("replay", write(tmp_path, nodes), "--topology", "pod16")
    assert run.returncode == 2
    assert run.stderr.strip() == (
        "error: cannot replay: rank 0's node 2 ('send2') sends to rank 1 with tag 0, which has "
        "no receive from rank 0 with tag 0 left to pair it with (2 sends, 1 receives): an "
        "unpaired send")


def test_json_has_every_part_and_trace_writes_a_timeline_per_rank(tmp_path, ipupod_main) -> None:
    timeline = tmp_path / "replay.json"
    summary = replayed(ipupod_main, str(EXAMPLES / "chakra" / "step"), "--topology", "pod16",
                       "--trace", str(timeline))
    assert {"trace", "topology", "mode", "compute", "algorithm", "dtype", "clock", "ranks",
            "source_ranks", "end_seconds", "assumed", "groups", "no_duration_nodes",
            "per_rank", "collectives", "critical_path", "links"} <= set(summary)
    assert set(summary["per_rank"][0]) == {"rank", "ipu", "nodes", "compute_seconds",
                                           "communication_seconds", "memory_seconds",
                                           "idle_seconds", "end_seconds"}
    assert set(summary["critical_path"]) == {"nodes", "end_seconds", "seconds_by_kind",
                                             "waiting_seconds", "steps"}
    assert set(summary["links"][0]) == {"link", "type", "bytes", "busy_fraction"}
    document = json.loads(timeline.read_text())
    names = {e["args"]["name"] for e in document["traceEvents"] if e["name"] == "process_name"}
    assert names == {"rank 0 (r0.m0.ipu0)", "rank 1 (r0.m0.ipu1)"}
    assert document["metadata"]["clock"] == "simulated"


def test_the_example_trace_replays_its_compute_then_its_allreduce(ipupod_main) -> None:
    summary = replayed(ipupod_main, str(EXAMPLES / "chakra" / "step"), "--topology", "pod16")
    allreduce = summary["collectives"]["all-reduce"]["sim_seconds"]
    assert summary["end_seconds"] == pytest.approx(3750e-6 + allreduce)
    assert summary["groups"] == {"dp": [0, 1]}
    text = ipupod_main("replay", str(EXAMPLES / "chakra" / "step"), "--topology", "pod16")
    assert text.returncode == 0
    assert "critical path: 4 nodes" in text.stdout and "busiest links:" in text.stdout


def test_compute_from_the_ipu_prices_num_ops_and_notes_nodes_without_a_time(tmp_path) -> None:
    nodes = [[comp(1, 100, num_ops=10**12), comp(2, 0, deps=(1,))]]
    trace = read_chakra_trace(write(tmp_path, nodes))
    topology = load_topology("pod16")
    _, by_trace = replay(trace, topology)
    _, by_ipu = replay(trace, topology, ReplayOptions(compute=ComputeSource.IPU))
    assert by_trace["end_seconds"] == pytest.approx(100e-6)
    assert by_ipu["end_seconds"] == pytest.approx(10**12 / (250e12 * 0.22))
    assert by_trace["no_duration_nodes"] == by_ipu["no_duration_nodes"] == 1


@pytest.mark.parametrize("topology", ["pod16", "dss8440"])
def test_a_trace_in_chakras_generator_conventions_replays_every_node_kind(
        tmp_path, topology) -> None:
    # the reader's test trace: compute, an all-reduce on the default group, an all-gather
    # on 'tp', metadata, a ring of sends and receives, a load and a store; one rank gzipped
    trace = read_chakra_trace(str(write_reader_trace(tmp_path, ranks=4)))
    record, summary = replay(trace, load_topology(topology))
    kinds = summary["collectives"]
    assert (kinds["all-reduce"]["count"], kinds["all-reduce"]["bytes"]) == (1, 64 * MiB)
    assert (kinds["all-gather"]["count"], kinds["all-gather"]["bytes"]) == (1, 1024)
    assert (kinds["send"]["count"], kinds["send"]["bytes"]) == (4, 4 * 4096)
    assert summary["groups"] == {"": [0, 1, 2, 3], "tp": [0, 1, 2, 3]}
    assert all(rank["memory_seconds"] > 0 for rank in summary["per_rank"])
    assert all(end != -1.0 for run in record.runs for end in run.end)


def test_the_link_table_carries_what_the_cost_model_says_the_allreduce_moves(tmp_path) -> None:
    topology = load_topology("pod16")
    _, summary = replay(read_chakra_trace(allreduce_trace(tmp_path, 16, 16 * MiB)), topology)
    [row] = run_phantom(BenchSpec(ALLREDUCE, SizeRange(16 * MiB, 16 * MiB)).place(topology))
    assert sum(link["bytes"] for link in summary["links"]) == pytest.approx(
        sum(row.link_type_bytes.values()))
    busiest = summary["links"][0]
    assert busiest["busy_fraction"] <= 1.0


def test_a_collective_gcl_refuses_is_one_error_line_naming_the_node(tmp_path, ipupod_main) -> None:
    run = ipupod_main("replay", allreduce_trace(tmp_path, 2, 1 << 40), "--topology", "pod16")
    assert run.returncode == 2 and run.stdout == ""
    [line] = run.stderr.strip().splitlines()
    assert line.startswith("error: cannot replay: rank 1's node 1 ('coll1': all-reduce of "
                           "1,099,511,627,776 bytes on 2 ranks) cannot run: ")
    assert "In-Processor-Memory" in line


def test_allreduces_at_once_on_disjoint_groups_share_the_network_as_bench_groups_do(
        tmp_path, ipupod_main) -> None:
    size = 16 * MiB
    groups = [[coll(1, et.ALL_REDUCE, size, pg_name=f"tp{rank // 4}")] for rank in range(16)]
    summary = replayed(ipupod_main, write(tmp_path / "at-once", groups), "--topology", "pod16")
    together = bench_seconds(ipupod_main, "pod16", size, "--group", "consecutive:4")
    assert summary["end_seconds"] == together
    assert summary["collectives"]["all-reduce"]["count"] == 4
    # the same, but group tp0 starts later than the others: it runs alone on its IPUs
    late = [[comp(1, 1000 if rank < 4 else 0), coll(2, et.ALL_REDUCE, size, deps=(1,),
                                                    pg_name=f"tp{rank // 4}")]
            for rank in range(16)]
    topology = load_topology("pod16")
    _, summary = replay(read_chakra_trace(write(tmp_path / "late", late)), topology)
    [alone] = run_phantom(BenchSpec(ALLREDUCE, SizeRange(size, size)).place(topology,
                                                                            [0, 1, 2, 3]))
    assert summary["end_seconds"] == 1000e-6 + alone.sim_seconds


def test_an_unknown_algorithm_is_one_error_line_and_an_alias_is_taken(ipupod_main) -> None:
    example = str(EXAMPLES / "chakra" / "step")
    run = ipupod_main("replay", example, "--topology", "pod16", "--algorithm", "nope")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith("error: unknown algorithm 'nope': use auto, ")
    assert replayed(ipupod_main, example, "--topology", "pod16", "--algorithm",
                    "ring")["algorithm"] == "ring"
