"""Replay speed: a 64-rank Chakra trace of 10,000 nodes a rank replayed on pod1024 (issue
40's figure), wall seconds of this machine for reading the trace and for replaying it.

The trace is written here: per rank, 1,000 blocks of 10 nodes: a chain of five COMP nodes,
an all-reduce of 4 MiB on the default group (all 64 ranks), an all-reduce of 1 MiB on the
rank's tensor-parallel group of 8 (``tp0`` ... ``tp7``), a send of 256 KiB to the rank's
neighbour (``r ^ 1``) and the receive of the neighbour's, and a MEM_LOAD of 1 MiB.

    python benchmarks/chakra_replay.py              # a 64 x 10,000 trace in a temporary folder
    python benchmarks/chakra_replay.py --ranks 8 --blocks 100 --json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from cluster.training.chakra.et_writer import rank_bytes  # noqa: E402
from ipupod_proto import chakra_et_pb2 as et  # noqa: E402

TP = 8  # ranks per tensor-parallel group
NODES_PER_BLOCK = 10


def _attrs(node: et.Node, **values: int | str) -> et.Node:
    for name, value in values.items():
        if isinstance(value, str):
            node.attr.append(et.AttributeProto(name=name, string_val=value))
        else:
            node.attr.append(et.AttributeProto(name=name, int64_val=value))
    return node


def block(rank: int, first: int, after: int | None) -> list[et.Node]:
    """One block of :data:`NODES_PER_BLOCK` nodes with ids from ``first``, after node
    ``after`` (None: the first block); its all-reduce on the default group is node
    ``first + 5``."""
    nodes = []
    for k in range(5):
        deps = [first + k - 1] if k else ([] if after is None else [after])
        nodes.append(et.Node(id=first + k, name=f"comp{first + k}", type=et.COMP_NODE,
                             duration_micros=50 + 10 * k, data_deps=deps))
    dp = _attrs(et.Node(id=first + 5, name="allreduce.dp", type=et.COMM_COLL_NODE,
                        data_deps=[first + 4]), comm_type=et.ALL_REDUCE, comm_size=4 << 20)
    tp = _attrs(et.Node(id=first + 6, name="allreduce.tp", type=et.COMM_COLL_NODE,
                        data_deps=[first + 1]), comm_type=et.ALL_REDUCE, comm_size=1 << 20,
                pg_name=f"tp{rank // TP}")
    send = _attrs(et.Node(id=first + 7, name="send", type=et.COMM_SEND_NODE,
                          data_deps=[first + 2]),
                  comm_src=rank, comm_dst=rank ^ 1, comm_tag=1, comm_size=256 << 10)
    recv = _attrs(et.Node(id=first + 8, name="recv", type=et.COMM_RECV_NODE,
                          data_deps=[first + 2]),
                  comm_src=rank ^ 1, comm_dst=rank, comm_tag=1, comm_size=256 << 10)
    load = _attrs(et.Node(id=first + 9, name="load", type=et.MEM_LOAD_NODE,
                          data_deps=[first]), tensor_size=1 << 20)
    # the last compute waits for the block's communication too
    nodes[-1].ctrl_deps.extend([first + 6, first + 8])
    return [*nodes, dp, tp, send, recv, load]


def write_trace(folder: Path, ranks: int, blocks: int) -> str:
    """The trace's files, ``bench.RANK.et``; its prefix."""
    for rank in range(ranks):
        nodes: list[et.Node] = []
        after = None
        for b in range(blocks):
            nodes += block(rank, b * NODES_PER_BLOCK, after)
            after = b * NODES_PER_BLOCK + 5  # the default group's all-reduce
        (folder / f"bench.{rank}.et").write_bytes(rank_bytes(nodes))
    return str(folder / "bench")


def measure(ranks: int, blocks: int, topology_name: str) -> dict[str, Any]:
    """Write, read and replay the trace: wall and CPU seconds of reading and of replaying
(CPU: this process's, which a machine shared with other work does not inflate), and the
simulated end of the replay."""
    from cluster.model.spec import load_topology
    from cluster.training.chakra.et_reader import read_chakra_trace
    from cluster.training.chakra.replay_run import replay

    with tempfile.TemporaryDirectory() as folder:
        prefix = write_trace(Path(folder), ranks, blocks)
        wall, cpu = time.perf_counter(), time.process_time()
        trace = read_chakra_trace(prefix)
        read_wall, read_cpu = time.perf_counter() - wall, time.process_time() - cpu
    topology = load_topology(topology_name)
    wall, cpu = time.perf_counter(), time.process_time()
    _, summary = replay(trace, topology)
    replay_wall, replay_cpu = time.perf_counter() - wall, time.process_time() - cpu
    nodes = sum(len(rank.nodes) for rank in trace.ranks)
    return {"ranks": ranks, "nodes_per_rank": nodes // ranks, "topology": topology_name,
            "read_wall_seconds": read_wall, "read_cpu_seconds": read_cpu,
            "replay_wall_seconds": replay_wall, "replay_cpu_seconds": replay_cpu,
            "replay_cpu_micros_per_node": replay_cpu / nodes * 1e6,
            "sim_end_seconds": summary["end_seconds"]}

def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", type=int, default=64)
    parser.add_argument("--blocks", type=int, default=1000, help="blocks of 10 nodes a rank")
    parser.add_argument("--topology", default="pod1024")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = measure(args.ranks, args.blocks, args.topology)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for key, value in result.items():
        print(f"{key:30} {value:,.3f}" if isinstance(value, float) else f"{key:30} {value}")


if __name__ == "__main__":
    main()
