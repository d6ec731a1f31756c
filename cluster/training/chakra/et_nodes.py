"""A Chakra trace as typed, frozen values: its ranks, each rank's nodes in file order, and
what each kind of node carries (units in the names: bytes, microseconds)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cluster.model.text_enum import TextEnum


class NodeKind(TextEnum):
    """A node's type, as Chakra's ``NodeType`` names it without ``_NODE``."""

    METADATA = "METADATA"
    MEM_LOAD = "MEM_LOAD"
    MEM_STORE = "MEM_STORE"
    COMP = "COMP"
    COMM_SEND = "COMM_SEND"
    COMM_RECV = "COMM_RECV"
    COMM_COLL = "COMM_COLL"


class CommType(TextEnum):
    """The collectives a ``COMM_COLL`` node may be (Chakra's ``CollectiveCommType``; its
    GATHER, SCATTER and REDUCE_SCATTER_BLOCK are refused by name)."""

    ALL_REDUCE = "all-reduce"
    REDUCE = "reduce"
    ALL_GATHER = "all-gather"
    BROADCAST = "broadcast"
    ALL_TO_ALL = "all-to-all"
    REDUCE_SCATTER = "reduce-scatter"
    BARRIER = "barrier"


@dataclass(frozen=True, slots=True)
class Compute:
    """A COMP node's work: its FLOPs when the trace gives a ``num_ops`` attribute (its
    time is then the node's ``duration_micros`` as recorded, or to be priced), and its
    time in seconds to the float when it gives a ``duration_seconds`` attribute (as
    ``ipupod train --chakra-out`` writes beside ``duration_micros``)."""

    num_ops: int | None
    duration_seconds: float | None = None


@dataclass(frozen=True, slots=True)
class Collective:
    """A COMM_COLL node: the collective, its ``comm_size`` in bytes and its process group
    (``pg_name``; ``""`` for the default group of every rank)."""

    comm_type: CommType
    size_bytes: int
    pg_name: str


@dataclass(frozen=True, slots=True)
class PeerToPeer:
    """A COMM_SEND or COMM_RECV node: the ranks at each end and the tag where the trace
    gives them (``None`` where not), and the bytes moved (``comm_size``, else
    ``tensor_size``)."""

    src: int | None
    dst: int | None
    tag: int | None
    size_bytes: int
    pg_name: str


@dataclass(frozen=True, slots=True)
class Memory:
    """A MEM_LOAD or MEM_STORE node: the bytes moved (``tensor_size``)."""

    size_bytes: int


Detail = Compute | Collective | PeerToPeer | Memory | None


@dataclass(frozen=True, slots=True)
class ChakraNode:
    """One node: its id (unique in its rank), name, kind, the ids it waits for
    (``data_deps`` then ``ctrl_deps``, both only order), its recorded duration in
    microseconds and what its kind carries (``None`` for METADATA)."""

    id: int
    name: str
    kind: NodeKind
    data_deps: tuple[int, ...]
    ctrl_deps: tuple[int, ...]
    duration_micros: int
    detail: Detail


@dataclass(frozen=True)
class ChakraRank:
    """One rank's file: its rank, path, the schema version its ``GlobalMetadata`` names,
    its nodes in file order, and how many times it gave each field or attribute that the
    reader does not use (named, not dropped silently)."""

    rank: int
    path: str
    version: str
    nodes: tuple[ChakraNode, ...]
    ignored: Mapping[str, int]


@dataclass(frozen=True)
class ChakraTrace:
    """A whole trace: its ranks, 0 to N-1 in order, as given by ``source`` (a folder, a
    file pattern, a prefix or one file)."""

    source: str
    ranks: tuple[ChakraRank, ...]
