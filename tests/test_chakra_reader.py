"""Reading MLCommons Chakra execution traces: per-rank files written here with the
generated schema module and Chakra's framing (a varint length before each message), read
back exactly; every damaged or hostile file refused with one ChakraTraceError naming it;
random bytes never raise anything else; ``ipupod chakra show`` prints the totals."""

from __future__ import annotations

import gzip
import json
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.training.chakra.et_errors import ChakraTraceError
from cluster.training.chakra.et_limits import TraceLimits
from cluster.training.chakra.et_nodes import (
    Collective,
    CommType,
    Compute,
    Memory,
    NodeKind,
    PeerToPeer,
)
from cluster.training.chakra.et_reader import read_chakra_trace, read_rank
from ipupod_proto import chakra_et_pb2 as et

MiB = 1 << 20
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def varint(value: int) -> bytes:
    """``value`` as protobuf's base-128 varint (Chakra's ``_EncodeVarint32``)."""
    out = bytearray()
    while True:
        bits, value = value & 0x7F, value >> 7
        if not value:
            return bytes(out + bytes([bits]))
        out.append(0x80 | bits)


def framed(*messages: et.GlobalMetadata | et.Node) -> bytes:
    """``messages`` as Chakra's ``encodeMessage`` writes them, one after another."""
    return b"".join(varint(len(body)) + body
                    for body in (m.SerializeToString() for m in messages))


def attr(name: str, **value: object) -> et.AttributeProto:
    return et.AttributeProto(name=name, **value)  # type: ignore[arg-type]


def comp(node_id: int, micros: int, deps: tuple[int, ...] = (), num_ops: int | None = None,
         ) -> et.Node:
    node = et.Node(id=node_id, name=f"comp{node_id}", type=et.COMP_NODE,
                   duration_micros=micros, data_deps=deps)
    node.attr.append(attr("is_cpu_op", bool_val=False))  # as Chakra's generator writes
    if num_ops is not None:
        node.attr.append(attr("num_ops", int64_val=num_ops))
    return node


def coll(node_id: int, comm_type: int, size: int, deps: tuple[int, ...] = (),
         pg_name: str | None = None) -> et.Node:
    node = et.Node(id=node_id, name=f"coll{node_id}", type=et.COMM_COLL_NODE, ctrl_deps=deps)
    node.attr.extend([attr("comm_type", int64_val=comm_type), attr("comm_size", int64_val=size)])
    if pg_name is not None:
        node.attr.append(attr("pg_name", string_val=pg_name))
    return node


def rank_nodes(rank: int, ranks: int) -> list[et.Node]:
    """A step of one rank: forward, backward, all-reduce of the gradients on the default
    group, an all-gather on 'tp', a send to the next rank and a receive from the previous,
    a load and a store."""
    send = et.Node(id=6, name="send", type=et.COMM_SEND_NODE, data_deps=[2])
    send.attr.extend([attr("comm_src", int32_val=rank),
                      attr("comm_dst", int32_val=(rank + 1) % ranks),
                      attr("comm_tag", int32_val=7), attr("comm_size", int64_val=4096)])
    recv = et.Node(id=7, name="recv", type=et.COMM_RECV_NODE)
    recv.attr.extend([attr("comm_src", int32_val=(rank - 1) % ranks),
                      attr("comm_dst", int32_val=rank), attr("tensor_size", uint64_val=4096)])
    load = et.Node(id=8, name="load", type=et.MEM_LOAD_NODE)
    load.attr.append(attr("tensor_size", uint64_val=512))
    store = et.Node(id=9, name="store", type=et.MEM_STORE_NODE, ctrl_deps=[8])
    store.attr.append(attr("tensor_size", uint64_val=256))
    return [comp(1, 100, num_ops=2_000_000), comp(2, 250, deps=(1,)),
            coll(3, et.ALL_REDUCE, 64 * MiB, deps=(2,)),
            coll(4, et.ALL_GATHER, 1024, deps=(3,), pg_name="tp"),
            et.Node(id=5, name="meta", type=et.METADATA_NODE), send, recv, load, store]


def write_trace(folder: Path, ranks: int = 4, gzip_ranks: tuple[int, ...] = (1,)) -> Path:
    """A trace of ``ranks`` files ``step.RANK.et`` (``.et.gz`` for ``gzip_ranks``)."""
    for rank in range(ranks):
        data = framed(et.GlobalMetadata(version="0.0.4"), *rank_nodes(rank, ranks))
        name = f"step.{rank}.et" + (".gz" if rank in gzip_ranks else "")
        (folder / name).write_bytes(gzip.compress(data) if rank in gzip_ranks else data)
    return folder


def write_rank(path: Path, *nodes: et.Node, header: bytes | None = None) -> Path:
    path.write_bytes((header if header is not None else framed(et.GlobalMetadata(version="1")))
                     + framed(*nodes))
    return path


@pytest.fixture
def trace_folder(tmp_path: Path) -> Path:
    return write_trace(tmp_path)


def test_a_folder_of_rank_files_reads_back_every_node_exactly(trace_folder: Path) -> None:
    trace = read_chakra_trace(str(trace_folder))
    assert [r.rank for r in trace.ranks] == [0, 1, 2, 3]
    assert trace.ranks[1].path.endswith("step.1.et.gz")
    rank = trace.ranks[2]
    assert rank.version == "0.0.4"
    assert [n.kind for n in rank.nodes] == [
        NodeKind.COMP, NodeKind.COMP, NodeKind.COMM_COLL, NodeKind.COMM_COLL, NodeKind.METADATA,
        NodeKind.COMM_SEND, NodeKind.COMM_RECV, NodeKind.MEM_LOAD, NodeKind.MEM_STORE]
    nodes = {n.id: n for n in rank.nodes}
    assert nodes[1].detail == Compute(num_ops=2_000_000) and nodes[1].duration_micros == 100
    assert nodes[2].detail == Compute(num_ops=None) and nodes[2].data_deps == (1,)
    assert nodes[3].detail == Collective(CommType.ALL_REDUCE, 64 * MiB, "")
    assert nodes[3].ctrl_deps == (2,)
    assert nodes[4].detail == Collective(CommType.ALL_GATHER, 1024, "tp")
    assert nodes[5].detail is None
    assert nodes[6].detail == PeerToPeer(src=2, dst=3, tag=7, size_bytes=4096, pg_name="")
    assert nodes[7].detail == PeerToPeer(src=1, dst=2, tag=None, size_bytes=4096, pg_name="")
    assert nodes[8].detail == Memory(512) and nodes[9].detail == Memory(256)
    assert rank.ignored == {"is_cpu_op": 2}


def test_a_pattern_a_prefix_and_a_single_file_name_the_same_files(trace_folder: Path) -> None:
    by_folder = read_chakra_trace(str(trace_folder))
    by_pattern = read_chakra_trace(str(trace_folder / "step.*"))
    by_prefix = read_chakra_trace(str(trace_folder / "step"))
    assert by_folder.ranks == by_pattern.ranks == by_prefix.ranks
    solo = write_rank(trace_folder.parent / "solo.et", comp(1, 5))
    single = read_chakra_trace(str(solo))
    assert [(r.rank, len(r.nodes)) for r in single.ranks] == [(0, 1)]


def test_every_collective_type_and_every_integer_attribute_kind_is_read(tmp_path: Path) -> None:
    kinds = [("int32_val", et.ALL_REDUCE), ("uint32_val", et.REDUCE),
             ("uint64_val", et.ALL_GATHER), ("sint64_val", et.BROADCAST),
             ("fixed64_val", et.ALL_TO_ALL), ("sfixed32_val", et.REDUCE_SCATTER),
             ("int64_val", et.BARRIER)]
    nodes = []
    for index, (kind, comm_type) in enumerate(kinds):
        node = et.Node(id=index, name="c", type=et.COMM_COLL_NODE)
        node.attr.extend([attr("comm_type", **{kind: comm_type}), attr("comm_size", **{kind: 8})])
        nodes.append(node)
    rank = read_rank(0, write_rank(tmp_path / "t.0.et", *nodes))
    assert [n.detail.comm_type for n in rank.nodes] == list(CommType)  # type: ignore[union-attr]


def test_a_barrier_may_leave_its_size_out(tmp_path: Path) -> None:
    node = et.Node(id=1, name="b", type=et.COMM_COLL_NODE)
    node.attr.append(attr("comm_type", int64_val=et.BARRIER))
    rank = read_rank(0, write_rank(tmp_path / "t.0.et", node))
    assert rank.nodes[0].detail == Collective(CommType.BARRIER, 0, "")


def refusal(tmp_path: Path, data: bytes, limits: TraceLimits | None = None) -> str:
    """The message reading ``data`` as a one-rank trace is refused with."""
    path = tmp_path / "t.0.et"
    path.write_bytes(data)
    with pytest.raises(ChakraTraceError) as caught:
        read_chakra_trace(str(path), *(limits,) if limits else ())
    assert str(path) in str(caught.value)
    return str(caught.value)


HEADER = framed(et.GlobalMetadata(version="1"))


@pytest.mark.parametrize(("data", "expected"), [
    (b"", "is empty"),
    (HEADER + b"\x80\x80", "bad varint: the file ends inside it"),
    (HEADER + b"\xff" * 11, "bad varint: longer than 10 bytes"),
    (HEADER + varint(50) + b"\x08\x01", "truncated: it declares 50 bytes but only 2 remain"),
    (HEADER + varint(2) + b"\xff\xff", "message 1 is not a Chakra Node"),
    (b"\x1f\x8b\x08\x00" + bytes(6) + b"\xff\xff garbage", "damaged gzip (Error -3"),
    (gzip.compress(HEADER)[:-6], "truncated gzip"),
    (gzip.compress(HEADER) + b"tail", "not another gzip member"),
])
def test_damaged_framing_is_refused_naming_what_is_wrong(tmp_path: Path, data: bytes,
                                                         expected: str) -> None:
    assert expected in refusal(tmp_path, data)


def test_lengths_past_a_bound_are_refused_before_they_are_read(tmp_path: Path) -> None:
    limits = TraceLimits(max_message_bytes=100, max_file_bytes=10_000, max_nodes_per_rank=2)
    assert "declares 4,294,967,296 bytes, more than the limit of 100" in refusal(
        tmp_path, HEADER + varint(1 << 32), limits)
    assert "larger than the limit" in refusal(tmp_path, b"\x00" * 10_001, limits)
    bomb = gzip.compress(HEADER + b"\x00" * 1_000_000)
    assert len(bomb) < 10_000
    assert "decompresses to larger than the limit" in refusal(tmp_path, bomb, limits)
    three = HEADER + framed(comp(1, 1), comp(2, 1), comp(3, 1))
    assert "more than the limit of 2 nodes" in refusal(tmp_path, three, limits)


def test_too_many_ranks_or_nodes_in_all_are_refused(trace_folder: Path) -> None:
    with pytest.raises(ChakraTraceError, match="4 files, more than the limit of 3 ranks"):
        read_chakra_trace(str(trace_folder), TraceLimits(max_ranks=3))
    with pytest.raises(ChakraTraceError, match="more than the limit of 20 nodes in all"):
        read_chakra_trace(str(trace_folder), TraceLimits(max_total_nodes=20))


def nodes_refusal(tmp_path: Path, *nodes: et.Node) -> str:
    return refusal(tmp_path, HEADER + framed(*nodes))


def test_a_dependency_cycle_is_refused_naming_its_nodes(tmp_path: Path) -> None:
    message = nodes_refusal(tmp_path, comp(1, 1, deps=(3,)), comp(2, 1, deps=(1,)),
                            comp(3, 1, deps=(2,)), comp(4, 1))
    assert "dependencies form a cycle (1 -> 3 -> 2 -> 1)" in message
    assert "cycle (5 -> 5)" in nodes_refusal(tmp_path, comp(5, 1, deps=(5,)))


def test_a_missing_dependency_and_a_repeated_id_are_refused(tmp_path: Path) -> None:
    assert "node 2 ('comp2') depends on node 9, which is not in this rank's file" in \
        nodes_refusal(tmp_path, comp(1, 1), comp(2, 1, deps=(9,)))
    assert "two nodes have the id 1" in nodes_refusal(tmp_path, comp(1, 1), comp(1, 2))


def bad_node(node_type: int, *attributes: et.AttributeProto) -> et.Node:
    node = et.Node(id=3, name="bad", type=node_type)  # type: ignore[arg-type]
    node.attr.extend(attributes)
    return node


@pytest.mark.parametrize(("node", "expected"), [
    (bad_node(et.INVALID_NODE), "its type INVALID_NODE (0) is not one the reader knows"),
    (bad_node(42), "its type 42 is not one the reader knows"),
    (bad_node(et.COMM_COLL_NODE, attr("comm_type", int64_val=et.GATHER),
              attr("comm_size", int64_val=8)), "comm_type GATHER (3) is not supported"),
    (bad_node(et.COMM_COLL_NODE, attr("comm_size", int64_val=8)), "no comm_type attribute"),
    (bad_node(et.COMM_COLL_NODE, attr("comm_type", int64_val=0)), "no comm_size attribute"),
    (bad_node(et.COMM_COLL_NODE, attr("comm_type", int64_val=0),
              attr("comm_size", int64_val=-8)), "comm_size is negative (-8)"),
    (bad_node(et.COMM_COLL_NODE, attr("comm_type", string_val="allreduce")),
     "comm_type holds string_val, not an integer"),
    (bad_node(et.COMP_NODE, attr("num_ops", int64_val=1), attr("num_ops", int64_val=2)),
     "gives the attribute 'num_ops' twice"),
    (bad_node(et.COMM_SEND_NODE, attr("comm_dst", int32_val=0)),
     "neither a comm_size nor a tensor_size"),
    (bad_node(et.MEM_LOAD_NODE), "no tensor_size attribute"),
])
def test_a_node_that_is_not_what_its_type_says_is_refused(tmp_path: Path, node: et.Node,
                                                          expected: str) -> None:
    message = nodes_refusal(tmp_path, comp(1, 1), node)
    assert "node 3 ('bad', message 2) cannot be read" in message
    assert expected in message


def write_two_ranks(folder: Path, nodes0: list[et.Node], nodes1: list[et.Node]) -> str:
    for rank, nodes in enumerate((nodes0, nodes1)):
        write_rank(folder / f"x.{rank}.et", *nodes)
    return str(folder)


def test_ranks_that_disagree_on_a_collective_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ChakraTraceError, match="ranks disagree on collective 1 of process "
                       "group 'dp': rank 0 has all-reduce of 8 bytes, rank 1 all-gather of 8"):
        read_chakra_trace(write_two_ranks(
            tmp_path,
            [coll(1, et.ALL_REDUCE, 4, pg_name="dp"), coll(2, et.ALL_REDUCE, 8, pg_name="dp")],
            [coll(1, et.ALL_REDUCE, 4, pg_name="dp"), coll(2, et.ALL_GATHER, 8, pg_name="dp")]))
    with pytest.raises(ChakraTraceError, match="collective 0 of the default process group: "
                       "rank 0 has all-reduce of 4 bytes, rank 1 all-reduce of 5 bytes"):
        read_chakra_trace(write_two_ranks(tmp_path, [coll(1, et.ALL_REDUCE, 4)],
                                          [coll(1, et.ALL_REDUCE, 5)]))
    with pytest.raises(ChakraTraceError, match="rank 0 calls 2 collectives on it, rank 1 1"):
        read_chakra_trace(write_two_ranks(
            tmp_path, [coll(1, et.BARRIER, 0), coll(2, et.BARRIER, 0)], [coll(1, et.BARRIER, 0)]))


def test_collectives_on_different_groups_do_not_have_to_agree(tmp_path: Path) -> None:
    trace = read_chakra_trace(write_two_ranks(
        tmp_path, [coll(1, et.ALL_REDUCE, 4, pg_name="a")],
        [coll(1, et.ALL_GATHER, 9, pg_name="b")]))
    assert len(trace.ranks) == 2


def test_a_peer_that_is_not_a_rank_is_refused(tmp_path: Path) -> None:
    send = bad_node(et.COMM_SEND_NODE, attr("comm_dst", int32_val=2),
                    attr("comm_size", int64_val=4))
    with pytest.raises(ChakraTraceError, match="has comm_dst 2, but the trace .* has 2 ranks"):
        read_chakra_trace(write_two_ranks(tmp_path, [send], []))


@pytest.mark.parametrize(("names", "expected"), [
    ((), "holds no rank files"),
    (("s.0.et", "s.2.et"), "rank 1 has no file: the files hold ranks 0,2"),
    (("s.0.et", "t.0.et.gz"), "two files hold rank 0"),
])
def test_a_folder_whose_ranks_are_not_0_to_n_is_refused(tmp_path: Path, names: tuple[str, ...],
                                                        expected: str) -> None:
    for name in names:
        write_rank(tmp_path / name)
    with pytest.raises(ChakraTraceError, match=expected):
        read_chakra_trace(str(tmp_path))


def test_a_missing_trace_and_a_rank_file_that_fails_are_named(tmp_path: Path) -> None:
    with pytest.raises(ChakraTraceError, match="no such file or folder"):
        read_chakra_trace(str(tmp_path / "nothing"))
    with pytest.raises(ChakraTraceError, match="matches no rank files"):
        read_chakra_trace(str(tmp_path / "*.et"))
    write_trace(tmp_path, ranks=3, gzip_ranks=())
    (tmp_path / "step.2.et").write_bytes(b"\x05\x08")
    with pytest.raises(ChakraTraceError, match=r"step\.2\.et'?: message 0 \(at byte 0\) is "
                                               "truncated"):
        read_chakra_trace(str(tmp_path))


STEP = framed(et.GlobalMetadata(version="1"), *rank_nodes(0, 1)[:6])


def mutated(changes: list[tuple[int, int]]) -> bytes:
    """A valid one-rank trace with a few bytes changed."""
    data = bytearray(STEP)
    for place, byte in changes:
        data[place] = byte
    return bytes(data)


@settings(max_examples=400, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.one_of(st.binary(max_size=300),
                      st.binary(max_size=200).map(lambda b: HEADER + b),
                      st.binary(max_size=200).map(lambda b: gzip.compress(HEADER + b)),
                      st.lists(st.tuples(st.integers(0, len(STEP) - 1), st.integers(0, 255)),
                               min_size=1, max_size=4).map(mutated)))
def test_random_bytes_raise_only_the_readers_error(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "f.0.et"
    path.write_bytes(data)
    try:
        read_chakra_trace(str(path))
    except ChakraTraceError:
        pass


def test_chakra_show_prints_counts_compute_and_collectives_per_rank(
        trace_folder: Path, ipupod_main) -> None:
    shown = ipupod_main("chakra", "show", str(trace_folder))
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"Chakra trace {trace_folder}: 4 ranks, schema version '0.0.4'"
    assert lines[1].split() == ["rank", "nodes", "METADATA", "MEM_LOAD", "MEM_STORE", "COMP",
                                "COMM_SEND", "COMM_RECV", "COMM_COLL", "compute", "(us)",
                                "collectives", "(count,", "bytes)"]
    assert lines[2].split() == ["0", "9", "1", "1", "1", "2", "1", "1", "2", "350",
                                "all-reduce", "1", "(67,108,864", "B),", "all-gather", "1",
                                "(1,024", "B)"]
    assert lines[-1] == "note: not used by the reader (fields and attributes, times given): " \
                        "is_cpu_op (8)"


def test_chakra_show_json_gives_the_same_totals(trace_folder: Path, ipupod_main) -> None:
    shown = ipupod_main("chakra", "show", str(trace_folder / "step"), "--json")
    assert shown.returncode == 0, shown.stderr
    summary = json.loads(shown.stdout)
    assert [r["nodes"] for r in summary["ranks"]] == [9] * 4
    assert summary["ranks"][3] == {
        "rank": 3, "file": str(trace_folder / "step.3.et"), "version": "0.0.4", "nodes": 9,
        "nodes_by_kind": {"METADATA": 1, "MEM_LOAD": 1, "MEM_STORE": 1, "COMP": 2,
                          "COMM_SEND": 1, "COMM_RECV": 1, "COMM_COLL": 2},
        "compute_micros": 350, "compute_num_ops": 2_000_000,
        "collectives": {"all-reduce": {"count": 1, "bytes": 64 * MiB},
                        "all-gather": {"count": 1, "bytes": 1024}}}
    assert summary["ignored"] == {"is_cpu_op": 8}


def test_the_example_trace_is_what_its_script_writes_and_reads_back(tmp_path: Path) -> None:
    root = EXAMPLES.parent  # the example run as a user runs it, with this Python
    run = subprocess.run([sys.executable, str(root / "examples" / "chakra_step.py"),
                          str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    for rank in (0, 1):
        name = f"step.{rank}.et"
        assert (tmp_path / name).read_bytes() == (EXAMPLES / "chakra" / name).read_bytes()
    trace = read_chakra_trace(str(EXAMPLES / "chakra" / "step"))
    assert [[n.kind for n in r.nodes] for r in trace.ranks] == [
        [NodeKind.COMP, NodeKind.COMP, NodeKind.COMM_COLL, NodeKind.COMP]] * 2
    assert trace.ranks[1].nodes[2].detail == Collective(CommType.ALL_REDUCE, 100 * MiB, "dp")


def test_chakra_show_refuses_a_damaged_trace_in_one_line(tmp_path: Path, ipupod_main) -> None:
    (tmp_path / "t.0.et").write_bytes(HEADER + b"\xff" * 11)
    shown = ipupod_main("chakra", "show", str(tmp_path))
    assert shown.returncode == 2 and shown.stdout == ""
    assert shown.stderr.startswith("error: Chakra trace ")
    assert "bad varint" in shown.stderr and len(shown.stderr.splitlines()) == 1
