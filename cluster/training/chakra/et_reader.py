"""``read_chakra_trace(source)``: a Chakra execution trace, every rank's file read,
framed, decoded and checked, as a :class:`~.et_nodes.ChakraTrace`, or one
:class:`~.et_errors.ChakraTraceError` naming the file and what is wrong."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from google.protobuf.message import DecodeError

from cluster.errors import quoted
from cluster.training.chakra.et_checks import (
    check_collectives_agree,
    check_dependencies,
    check_peers,
)
from cluster.training.chakra.et_decode import NodeProblem, decode_node
from cluster.training.chakra.et_errors import ChakraTraceError
from cluster.training.chakra.et_files import rank_files
from cluster.training.chakra.et_framing import file_bytes, messages
from cluster.training.chakra.et_limits import DEFAULT_LIMITS, TraceLimits
from cluster.training.chakra.et_nodes import ChakraNode, ChakraRank, ChakraTrace
from ipupod_proto import chakra_et_pb2 as et


def read_chakra_trace(source: str, limits: TraceLimits = DEFAULT_LIMITS) -> ChakraTrace:
    """The trace ``source`` names (a folder, a file pattern, a prefix or one file; see
    :func:`~.et_files.rank_files`), read within ``limits``."""
    ranks: list[ChakraRank] = []
    total = 0
    for rank, path in enumerate(rank_files(source, limits)):
        ranks.append(read_rank(rank, path, limits))
        total += len(ranks[-1].nodes)
        if total > limits.max_total_nodes:
            raise ChakraTraceError(source, f"holds more than the limit of "
                                   f"{limits.max_total_nodes:,} nodes in all ranks")
    check_peers(ranks, source)
    check_collectives_agree(ranks, source)
    return ChakraTrace(source=source, ranks=tuple(ranks))


def read_rank(rank: int, path: Path, limits: TraceLimits = DEFAULT_LIMITS) -> ChakraRank:
    """One rank's file: a ``GlobalMetadata`` message, then ``Node`` messages."""
    where = str(path)
    framed = messages(path, file_bytes(path, limits), limits)
    header = next(framed, None)
    if header is None:
        raise ChakraTraceError(where, "is empty: a rank file starts with a GlobalMetadata "
                               "message")
    metadata = et.GlobalMetadata()
    _parse(metadata, header, where, "message 0 (the GlobalMetadata)")
    ignored: Counter[str] = Counter(f"metadata {a.name}" for a in metadata.attr)
    nodes: list[ChakraNode] = []
    for index, body in enumerate(framed, start=1):
        if len(nodes) == limits.max_nodes_per_rank:
            raise ChakraTraceError(where, f"holds more than the limit of "
                                   f"{limits.max_nodes_per_rank:,} nodes a rank may have")
        message = et.Node()
        _parse(message, body, where, f"message {index}")
        try:
            nodes.append(decode_node(message, ignored))
        except NodeProblem as problem:
            raise ChakraTraceError(where, f"node {message.id} ({quoted(message.name)}, message "
                                   f"{index}) cannot be read: {problem}") from None
    check_dependencies(where, nodes)
    return ChakraRank(rank=rank, path=where, version=metadata.version, nodes=tuple(nodes),
                      ignored=dict(ignored))


def _parse(message: et.GlobalMetadata | et.Node, body: memoryview, where: str,
           what: str) -> None:
    """Parse ``body`` into ``message``, or refuse it naming ``what`` it was to be."""
    try:
        message.ParseFromString(body)
    except (DecodeError, RuntimeError, ValueError) as error:
        raise ChakraTraceError(where, f"{what} is not a Chakra "
                               f"{type(message).__name__} ({error})") from None
