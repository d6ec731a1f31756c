"""The ``Chunk`` message of ``link.proto``, encoded and decoded by hand on the hot path.

The bytes are standard protobuf (any client may send ``link_pb2.Chunk`` messages, and these
parse as one), but the payload is never copied: on the way out the header fields and
:func:`payload_prefix` go to the socket followed by a view of the NumPy buffer, and on the
way in the payload is a view into the received message. Protobuf's own Python classes
would copy it twice each way.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ipu_node.device_errors import DeviceError

_VARINT, _LENGTH = 0, 2
_PAYLOAD_TAG = bytes([(9 << 3) | _LENGTH])
_PAD_TAG = bytes([(10 << 3) | _LENGTH])
ALIGN = 16  # payloads start at a multiple of this in the message (NumPy reads them in place)


class ChunkHeader(NamedTuple):
    collective: str
    phase: int
    step: int
    transfer: int
    src_ipu: int
    dst_ipu: int
    offset: int
    total: int


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_header(collective: str, phase: int, step: int, transfer: int, src_ipu: int,
                  dst_ipu: int, offset: int, total: int) -> bytes:
    """Fields 1 to 8 of a ``Chunk``."""
    name = collective.encode()
    parts = [bytes([(1 << 3) | _LENGTH]), _varint(len(name)), name]
    for number, value in ((2, phase), (3, step), (4, transfer), (5, src_ipu), (6, dst_ipu),
                          (7, offset), (8, total)):
        if value:
            parts += [bytes([number << 3 | _VARINT]), _varint(value)]
    return b"".join(parts)


def payload_prefix(header: bytes, length: int) -> bytes:
    """``header`` and what follows it before a payload of ``length`` bytes: a ``pad`` field
    that makes the payload start at a multiple of :data:`ALIGN`, then field 9's tag and
    length. That, then the payload, is a whole ``Chunk``."""
    tail = _PAYLOAD_TAG + _varint(length)
    fill = -(len(header) + 2 + len(tail)) % ALIGN  # the pad field is 2 bytes with no filler
    return b"".join((header, _PAD_TAG, bytes([fill]), bytes(fill), tail))


def encode_chunk(header: bytes, payload: memoryview) -> bytes:
    """A whole ``Chunk`` as one ``bytes`` (a copy; for clients that need one, like
    grpcio's): :func:`payload_prefix`, then the payload."""
    return b"".join((payload_prefix(header, len(payload)), payload))


def decode_chunk(message: bytes) -> tuple[ChunkHeader, memoryview]:
    """The header fields and a view of the payload of a serialized ``Chunk``."""
    view, position, end = memoryview(message), 0, len(message)
    fields: dict[int, Any] = {}
    payload = view[0:0]
    try:
        while position < end:
            tag, position = _read_varint(view, position)
            number, kind = tag >> 3, tag & 7
            if kind == _VARINT:
                fields[number], position = _read_varint(view, position)
            elif kind == _LENGTH:
                length, position = _read_varint(view, position)
                value = view[position:position + length]
                position += length
                if number == 9:
                    payload = value
                elif number != 10:  # 10 is filler
                    fields[number] = bytes(value).decode()
            elif kind == 1:
                position += 8  # a 64-bit field from a newer sender: skip it
            elif kind == 5:
                position += 4
            else:
                raise ValueError(f"wire type {kind}")
    except (ValueError, IndexError, UnicodeDecodeError) as error:
        raise DeviceError(f"a malformed chunk arrived on a link: {error}") from None
    get = fields.get
    header = ChunkHeader(str(get(1, "")), int(get(2, 0)), int(get(3, 0)), int(get(4, 0)),
                         int(get(5, 0)), int(get(6, 0)), int(get(7, 0)), int(get(8, 0)))
    return header, payload


def _read_varint(view: memoryview, position: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        byte = view[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, position
        shift += 7
        if shift > 63:
            raise ValueError("varint too long")
