"""One Chakra protobuf ``Node`` decoded into a :class:`~.et_nodes.ChakraNode`: its type
and the attributes its kind needs (Chakra's names: ``num_ops``, ``comm_type``,
``comm_size``, ``pg_name``, ``comm_src``, ``comm_dst``, ``comm_tag``, ``tensor_size``;
and ``duration_seconds``, a COMP node's exact time as ipupod's export writes it), checked;
the attributes and fields it does not use are counted by name."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from cluster.training.chakra.et_nodes import (
    ChakraNode,
    Collective,
    CommType,
    Compute,
    Detail,
    Memory,
    NodeKind,
    PeerToPeer,
)
from ipupod_proto import chakra_et_pb2 as et

KINDS: dict[int, NodeKind] = {
    et.METADATA_NODE: NodeKind.METADATA, et.MEM_LOAD_NODE: NodeKind.MEM_LOAD,
    et.MEM_STORE_NODE: NodeKind.MEM_STORE, et.COMP_NODE: NodeKind.COMP,
    et.COMM_SEND_NODE: NodeKind.COMM_SEND, et.COMM_RECV_NODE: NodeKind.COMM_RECV,
    et.COMM_COLL_NODE: NodeKind.COMM_COLL}
COMM_TYPES: dict[int, CommType] = {
    et.ALL_REDUCE: CommType.ALL_REDUCE, et.REDUCE: CommType.REDUCE,
    et.ALL_GATHER: CommType.ALL_GATHER, et.BROADCAST: CommType.BROADCAST,
    et.ALL_TO_ALL: CommType.ALL_TO_ALL, et.REDUCE_SCATTER: CommType.REDUCE_SCATTER,
    et.BARRIER: CommType.BARRIER}
INTEGER_VALUES = {"int32_val", "int64_val", "uint32_val", "uint64_val", "sint32_val",
                  "sint64_val", "fixed32_val", "fixed64_val", "sfixed32_val", "sfixed64_val"}
USED = {NodeKind.METADATA: set(), NodeKind.COMP: {"num_ops", "duration_seconds"},
        NodeKind.COMM_COLL: {"comm_type", "comm_size", "pg_name"},
        NodeKind.COMM_SEND: {"comm_src", "comm_dst", "comm_tag", "comm_size", "tensor_size",
                             "pg_name"},
        NodeKind.MEM_LOAD: {"tensor_size"}}
USED[NodeKind.COMM_RECV] = USED[NodeKind.COMM_SEND]
USED[NodeKind.MEM_STORE] = USED[NodeKind.MEM_LOAD]
UNUSED_FIELDS = ("inputs", "outputs")  # Node fields kept by Chakra, not used here


class NodeProblem(ValueError):
    """What is wrong with one node; the reader adds the file and the node's place."""


def decode_node(message: Any, ignored: Counter[str]) -> ChakraNode:
    """``message`` (a parsed ``ChakraProtoMsg.Node``) as a typed node; what it gives that
    is not used is counted in ``ignored``. A NodeProblem says what is wrong."""
    kind = KINDS.get(message.type)
    if kind is None:
        raise NodeProblem(f"its type {_enum_name(et.NodeType, message.type)} is not one the "
                          f"reader knows ({', '.join(k.value for k in NodeKind)})")
    attributes = _attributes(message)
    used = USED[kind]
    for name in attributes:  # a loop, not Counter.update: this runs once a node
        if name not in used:
            ignored[name] += 1
    for name in UNUSED_FIELDS:
        if message.HasField(name):
            ignored[name] += 1
    return ChakraNode(id=message.id, name=message.name, kind=kind,
                      data_deps=tuple(message.data_deps), ctrl_deps=tuple(message.ctrl_deps),
                      duration_micros=message.duration_micros,
                      detail=_detail(kind, attributes))


def _attributes(message: Any) -> dict[str, Any]:
    """The node's attributes by name; one given twice is refused."""
    attributes: dict[str, Any] = {}
    for attribute in message.attr:
        if attribute.name in attributes:
            raise NodeProblem(f"it gives the attribute {attribute.name!r} twice")
        attributes[attribute.name] = attribute
    return attributes


def _detail(kind: NodeKind, attributes: dict[str, Any]) -> Detail:
    """What a node of ``kind`` carries, from its attributes."""
    if kind is NodeKind.COMP:
        return Compute(num_ops=_integer(attributes, "num_ops"),
                       duration_seconds=_seconds(attributes, "duration_seconds"))
    if kind is NodeKind.COMM_COLL:
        return _collective(attributes)
    if kind in (NodeKind.COMM_SEND, NodeKind.COMM_RECV):
        size = _integer(attributes, "comm_size")
        size = _integer(attributes, "tensor_size") if size is None else size
        if size is None:
            raise NodeProblem("it gives neither a comm_size nor a tensor_size attribute")
        return PeerToPeer(src=_integer(attributes, "comm_src"),
                          dst=_integer(attributes, "comm_dst"),
                          tag=_integer(attributes, "comm_tag"), size_bytes=size,
                          pg_name=_text(attributes, "pg_name"))
    if kind in (NodeKind.MEM_LOAD, NodeKind.MEM_STORE):
        return Memory(size_bytes=_required(attributes, "tensor_size"))
    return None


def _collective(attributes: dict[str, Any]) -> Collective:
    """A COMM_COLL node's collective; a barrier may leave its comm_size out (0 bytes)."""
    number = _required(attributes, "comm_type")
    comm_type = COMM_TYPES.get(number)
    if comm_type is None:
        raise NodeProblem(f"its comm_type {_enum_name(et.CollectiveCommType, number)} is not "
                          f"supported (supported: {', '.join(c.value for c in CommType)})")
    size = _integer(attributes, "comm_size")
    if size is None and comm_type is not CommType.BARRIER:
        raise NodeProblem("it gives no comm_size attribute (bytes)")
    return Collective(comm_type=comm_type, size_bytes=size or 0,
                      pg_name=_text(attributes, "pg_name"))


def _required(attributes: dict[str, Any], name: str) -> int:
    value = _integer(attributes, name)
    if value is None:
        raise NodeProblem(f"it gives no {name} attribute")
    return value


def _integer(attributes: dict[str, Any], name: str) -> int | None:
    """The attribute ``name`` as an integer of 0 or more (any of protobuf's integer
    kinds, as Chakra's writers differ), ``None`` when absent."""
    attribute = attributes.get(name)
    if attribute is None:
        return None
    which = attribute.WhichOneof("value")
    if which not in INTEGER_VALUES:
        raise NodeProblem(f"its attribute {name} holds {which or 'no value'}, not an integer")
    value = int(getattr(attribute, which))
    if value < 0:
        raise NodeProblem(f"its attribute {name} is negative ({value})")
    return value


def _seconds(attributes: dict[str, Any], name: str) -> float | None:
    """The ``double_val`` attribute ``name``: finite seconds of 0 or more, ``None`` when
    absent."""
    attribute = attributes.get(name)
    if attribute is None:
        return None
    if attribute.WhichOneof("value") != "double_val":
        raise NodeProblem(f"its attribute {name} is not a double_val (seconds)")
    value = float(attribute.double_val)
    if not math.isfinite(value) or value < 0:
        raise NodeProblem(f"its attribute {name} is not a finite number of seconds of 0 or "
                          f"more ({value})")
    return value


def _text(attributes: dict[str, Any], name: str) -> str:
    """The string attribute ``name``, ``""`` when absent."""
    attribute = attributes.get(name)
    if attribute is None:
        return ""
    if attribute.WhichOneof("value") != "string_val":
        raise NodeProblem(f"its attribute {name} is not a string_val")
    return str(attribute.string_val)


def _enum_name(enum: Any, number: int) -> str:
    """``GATHER (3)``, or the bare number for a value the schema does not name."""
    try:
        return f"{enum.Name(number)} ({number})"
    except ValueError:
        return str(number)
