"""Chakra traces written: nodes built with Chakra's names (``COMP_NODE`` with
``duration_micros``, ``COMM_COLL_NODE`` with ``comm_type``, ``comm_size`` and ``pg_name``,
``COMM_SEND_NODE`` and ``COMM_RECV_NODE`` with ``comm_src``, ``comm_dst``, ``comm_tag`` and
``comm_size``),
each rank's file a ``GlobalMetadata`` then its ``Node`` messages, every message prefixed by
its length as a varint (Chakra's ``encodeMessage``), so Chakra's reader and ours parse it.
A COMP node also carries its exact time as a ``duration_seconds`` double attribute
(``duration_micros`` is whole microseconds; replaying needs the seconds to the float)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from cluster.training.chakra.et_nodes import CommType
from ipupod_proto import chakra_et_pb2 as et

SCHEMA_VERSION = "0.0.4"  # as Chakra's converter writes it
COMM_TYPE_NUMBERS = {CommType.ALL_REDUCE: et.ALL_REDUCE, CommType.REDUCE: et.REDUCE,
                     CommType.ALL_GATHER: et.ALL_GATHER, CommType.BROADCAST: et.BROADCAST,
                     CommType.ALL_TO_ALL: et.ALL_TO_ALL,
                     CommType.REDUCE_SCATTER: et.REDUCE_SCATTER, CommType.BARRIER: et.BARRIER}


def compute_node(node_id: int, name: str, seconds: float, deps: Sequence[int] = ()) -> et.Node:
    """A COMP node of ``seconds`` (rounded to whole microseconds in ``duration_micros``,
    exact in ``duration_seconds``), after ``deps``."""
    node = et.Node(id=node_id, name=name, type=et.COMP_NODE,
                   duration_micros=round(seconds * 1e6), data_deps=list(deps))
    node.attr.extend([et.AttributeProto(name="is_cpu_op", bool_val=False),
                      et.AttributeProto(name="duration_seconds", double_val=seconds)])
    return node


def collective_node(node_id: int, name: str, comm_type: CommType, size_bytes: int,
                    pg_name: str = "", deps: Sequence[int] = ()) -> et.Node:
    """A COMM_COLL node: ``comm_type`` of ``size_bytes`` on process group ``pg_name``
    (``""``: the default group of every rank), after ``deps``."""
    node = et.Node(id=node_id, name=name, type=et.COMM_COLL_NODE, ctrl_deps=list(deps))
    node.attr.extend([et.AttributeProto(name="is_cpu_op", bool_val=False),
                      et.AttributeProto(name="comm_type", int64_val=COMM_TYPE_NUMBERS[comm_type]),
                      et.AttributeProto(name="comm_size", int64_val=size_bytes)])
    if pg_name:
        node.attr.append(et.AttributeProto(name="pg_name", string_val=pg_name))
    return node


def peer_node(node_id: int, name: str, send: bool, src: int, dst: int, tag: int,
              size_bytes: int, deps: Sequence[int] = ()) -> et.Node:
    """A COMM_SEND (``send``) or COMM_RECV node: ``size_bytes`` from rank ``src`` to rank
    ``dst`` with ``comm_tag`` ``tag``, after ``deps``."""
    node = et.Node(id=node_id, name=name, type=et.COMM_SEND_NODE if send else et.COMM_RECV_NODE,
                   ctrl_deps=list(deps))
    node.attr.extend([et.AttributeProto(name="is_cpu_op", bool_val=False),
                      et.AttributeProto(name="comm_src", int64_val=src),
                      et.AttributeProto(name="comm_dst", int64_val=dst),
                      et.AttributeProto(name="comm_tag", int64_val=tag),
                      et.AttributeProto(name="comm_size", int64_val=size_bytes)])
    return node


def varint(value: int) -> bytes:
    """``value`` as a base-128 varint, low 7 bits first."""
    out = bytearray()
    while value > 0x7F:
        out.append(0x80 | (value & 0x7F))
        value >>= 7
    return bytes(out + bytes([value]))


def rank_bytes(nodes: Sequence[et.Node]) -> bytes:
    """One rank's file: the ``GlobalMetadata``, then ``nodes``, each length-prefixed."""
    bodies = [et.GlobalMetadata(version=SCHEMA_VERSION).SerializeToString(),
              *(node.SerializeToString() for node in nodes)]
    return b"".join(varint(len(body)) + body for body in bodies)


def write_chakra_trace(folder: Path, name: str, ranks: Sequence[Sequence[et.Node]]) -> list[Path]:
    """``folder/NAME.RANK.et`` for each rank, every file written beside its place and
    renamed into it, so none is half-written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for rank, nodes in enumerate(ranks):
        target = folder / f"{name}.{rank}.et"
        descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}-", dir=folder)
        try:
            with os.fdopen(descriptor, "wb") as out:
                out.write(rank_bytes(nodes))
            os.chmod(temporary, 0o644)
            os.replace(temporary, target)
        except BaseException:
            Path(temporary).unlink(missing_ok=True)
            raise
        written.append(target)
    return written
