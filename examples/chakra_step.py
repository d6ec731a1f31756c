"""Write a small Chakra execution trace: one data-parallel training step on 2 ranks, as
Chakra's tools lay one out (``docs/chakra.md``). Each rank computes a forward and a
backward pass (durations in microseconds, FLOPs as ``num_ops``), all-reduces 100 MiB of
gradients on the process group ``dp`` and runs the optimiser step.

    .venv/bin/python examples/chakra_step.py [FOLDER]   # default: examples/chakra
    .venv/bin/ipupod chakra show examples/chakra/step

Each file is a ``GlobalMetadata`` message then ``Node`` messages, every one prefixed by its
length as a varint (Chakra's ``encodeMessage``); the files in ``examples/chakra/`` are what
this script writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    from ipupod_proto import chakra_et_pb2 as et
except ModuleNotFoundError as missing:  # not the Python the package is installed in
    print(f"error: cannot import {missing.name!r}: run the examples with the Python of the "
          "virtualenv the package is installed in (pip install -e .), e.g. "
          ".venv/bin/python examples/chakra_step.py", file=sys.stderr)
    sys.exit(2)

RANKS = 2
GRADIENT_BYTES = 100 << 20


def varint(value: int) -> bytes:
    """``value`` as a base-128 varint, low 7 bits first."""
    out = bytearray()
    while value > 0x7F:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    return bytes(out + bytes([value]))


def comp(node_id: int, name: str, micros: int, num_ops: int, deps: list[int]) -> et.Node:
    node = et.Node(id=node_id, name=name, type=et.COMP_NODE, duration_micros=micros,
                   data_deps=deps)
    node.attr.extend([et.AttributeProto(name="is_cpu_op", bool_val=False),
                      et.AttributeProto(name="num_ops", int64_val=num_ops)])
    return node


def step_nodes() -> list[et.Node]:
    """One rank's step: forward, backward, the gradients' all-reduce, the optimiser."""
    allreduce = et.Node(id=3, name="all_reduce(gradients)", type=et.COMM_COLL_NODE,
                        ctrl_deps=[2])
    allreduce.attr.extend([et.AttributeProto(name="is_cpu_op", bool_val=False),
                           et.AttributeProto(name="comm_type", int64_val=et.ALL_REDUCE),
                           et.AttributeProto(name="comm_size", int64_val=GRADIENT_BYTES),
                           et.AttributeProto(name="pg_name", string_val="dp")])
    return [comp(1, "forward", 1200, 3_000_000_000, []),
            comp(2, "backward", 2400, 6_000_000_000, [1]), allreduce,
            comp(4, "optimizer.step", 150, 100_000_000, [3])]


def main(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(RANKS):
        bodies = [et.GlobalMetadata(version="0.0.4").SerializeToString(),
                  *(node.SerializeToString() for node in step_nodes())]
        data = b"".join(varint(len(body)) + body for body in bodies)
        (folder / f"step.{rank}.et").write_bytes(data)
        print(folder / f"step.{rank}.et")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "examples/chakra"))
