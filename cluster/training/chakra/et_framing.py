"""Chakra's framing of a rank's file (its ``protolib``'s ``encodeMessage``): messages one
after another, each prefixed by its length in bytes as a base-128 varint; the whole file
optionally gzip-compressed (known by its magic bytes, not its name). Every length is
bounded before anything is allocated for it (:class:`~.et_limits.TraceLimits`)."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

from cluster.model.files import open_regular
from cluster.model.units import format_size
from cluster.training.chakra.et_errors import ChakraTraceError
from cluster.training.chakra.et_limits import TraceLimits

GZIP_MAGIC = b"\x1f\x8b"
MAX_VARINT_BYTES = 10  # a 64-bit value; a longer varint is damage
CHUNK_BYTES = 1 << 20  # decompressed per step, so a gzip bomb stops at the bound


def file_bytes(path: Path, limits: TraceLimits) -> bytes:
    """The bytes of the rank file at ``path``, decompressed if it is gzip; refused past
    ``limits.max_file_bytes`` either way, or when it cannot be read."""
    try:
        with open_regular(path) as handle:
            raw = handle.read(limits.max_file_bytes + 1)
    except OSError as error:
        raise ChakraTraceError(str(path), f"cannot be read: {error.strerror or error}") from None
    _check_size(path, len(raw), limits, "is")
    return _gunzip(path, raw, limits) if raw.startswith(GZIP_MAGIC) else raw


def _check_size(path: Path, size: int, limits: TraceLimits, verb: str) -> None:
    if size > limits.max_file_bytes:
        raise ChakraTraceError(str(path), f"{verb} larger than the limit of "
                               f"{format_size(limits.max_file_bytes)}B a rank file may be")


def _gunzip(path: Path, raw: bytes, limits: TraceLimits) -> bytes:
    """``raw`` as gzip, every member of it, decompressed a chunk at a time and refused as
    soon as the output passes the bound."""
    out = bytearray()
    data = raw
    while data:
        inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        try:
            while data and not inflater.eof:
                out += inflater.decompress(data, CHUNK_BYTES)
                data = inflater.unconsumed_tail
                _check_size(path, len(out), limits, "decompresses to")
        except zlib.error as error:
            raise ChakraTraceError(str(path), f"is damaged gzip ({error})") from None
        if not inflater.eof:
            raise ChakraTraceError(str(path), "is truncated gzip (its stream ends early)")
        data = inflater.unused_data
        if data and not data.startswith(GZIP_MAGIC):
            raise ChakraTraceError(str(path), "holds bytes after its gzip stream that are "
                                   "not another gzip member")
    return bytes(out)


def messages(path: Path, data: bytes, limits: TraceLimits) -> Iterator[memoryview]:
    """The messages of ``data`` in order, each as a view of its bytes (its length prefix
    read and checked: a bad varint, a length past the bound or past the end is refused,
    naming the message's place)."""
    view = memoryview(data)
    offset = 0
    index = 0
    while offset < len(data):
        length, start = _varint(path, data, offset, index)
        if length > limits.max_message_bytes:
            raise ChakraTraceError(str(path), f"message {index} (at byte {offset:,}) declares "
                                   f"{length:,} bytes, more than the limit of "
                                   f"{limits.max_message_bytes:,}")
        if start + length > len(data):
            raise ChakraTraceError(str(path), f"message {index} (at byte {offset:,}) is "
                                   f"truncated: it declares {length:,} bytes but only "
                                   f"{len(data) - start:,} remain")
        yield view[start:start + length]
        offset = start + length
        index += 1


def _varint(path: Path, data: bytes, offset: int, index: int) -> tuple[int, int]:
    """The varint at ``offset`` and the offset after it."""
    value = 0
    for position in range(MAX_VARINT_BYTES):
        if offset + position >= len(data):
            raise ChakraTraceError(str(path), f"message {index}'s length prefix (at byte "
                                   f"{offset:,}) is a bad varint: the file ends inside it")
        byte = data[offset + position]
        value |= (byte & 0x7F) << (7 * position)
        if not byte & 0x80:
            return value, offset + position + 1
    raise ChakraTraceError(str(path), f"message {index}'s length prefix (at byte {offset:,}) "
                           f"is a bad varint: longer than {MAX_VARINT_BYTES} bytes")
