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


class ChunkParts(tuple):
    """One chunk to send: (the bytes before its payload, a view of the payload), sent back
    to back as one ``Chunk``. ``header`` (fields 1 to 8) lets a link that has shared memory
    send a reference to a slot holding the payload instead."""

    header: bytes

    def __new__(cls, header: bytes, payload: memoryview) -> ChunkParts:
        parts = super().__new__(cls, (payload_prefix(header, len(payload)), payload))
        parts.header = header
        return parts


def encode_chunk(header: bytes, payload: memoryview) -> bytes:
    """A whole ``Chunk`` as one ``bytes`` (a copy; for clients that need one, like
    grpcio's): :func:`payload_prefix`, then the payload."""
    return b"".join((payload_prefix(header, len(payload)), payload))


class SlotFields(NamedTuple):
    """A chunk's shared-memory fields (:mod:`ipu_node.links.shared_slots`): a reference
    (``segment``, ``slot``, ``length``) in place of the payload, or, with ``slots``, the
    announcement of a segment of ``slots`` slots of ``slot_bytes`` (replacing ``retired``).
    With ``buffer`` (:mod:`ipu_node.links.shared_buffers`): the payload is ``length`` bytes
    at ``buffer_offset`` of the sender's shared buffer, ``slot`` the ticket that holds them
    in flight; or, with ``buffer_bytes``, the announcement of that buffer, or with
    ``forget``, the news that it is gone."""

    segment: str
    slot: int
    length: int
    slots: int
    slot_bytes: int
    retired: str
    buffer: str = ""
    buffer_offset: int = 0
    buffer_bytes: int = 0
    forget: bool = False


def slot_reference(header: bytes, segment: str, slot: int, length: int) -> bytes:
    """A whole ``Chunk`` whose payload is ``length`` bytes in ``slot`` of ``segment``."""
    name = segment.encode()
    return b"".join((header, bytes([(11 << 3) | _LENGTH]), _varint(len(name)), name,
                     bytes([12 << 3 | _VARINT]), _varint(slot),
                     bytes([13 << 3 | _VARINT]), _varint(length)))


def announcement(segment: str, slots: int, slot_bytes: int, retired: str = "") -> bytes:
    """The ``Chunk`` that names a new segment to its receiver (no collective, no payload)."""
    parts = [bytes([(11 << 3) | _LENGTH]), _varint(len(segment.encode())), segment.encode(),
             bytes([14 << 3 | _VARINT]), _varint(slots),
             bytes([15 << 3 | _VARINT]), _varint(slot_bytes)]
    if retired:
        parts += [_varint((16 << 3) | _LENGTH), _varint(len(retired.encode())), retired.encode()]
    return b"".join(parts)


def _text_field(number: int, text: str) -> bytes:
    data = text.encode()
    return b"".join((_varint((number << 3) | _LENGTH), _varint(len(data)), data))


def _number_field(number: int, value: int) -> bytes:
    return _varint(number << 3 | _VARINT) + _varint(value)


def buffer_reference(header: bytes, segment: str, ticket: int, buffer: str, offset: int,
                     length: int) -> bytes:
    """A whole ``Chunk`` whose payload is ``length`` bytes at ``offset`` of the shared
    ``buffer``, held in flight by ``ticket`` of the link's ``segment``."""
    return b"".join((header, _text_field(11, segment), _number_field(12, ticket),
                     _number_field(13, length), _text_field(17, buffer),
                     _number_field(18, offset)))


def buffer_announcement(buffer: str, size: int) -> bytes:
    """The ``Chunk`` that names a shared buffer of ``size`` bytes to its receiver."""
    return _text_field(17, buffer) + _number_field(19, size)


def buffer_forgotten(buffer: str) -> bytes:
    """The ``Chunk`` that tells a receiver a shared buffer is gone (to unmap it)."""
    return _text_field(17, buffer) + _number_field(20, 1)


def decode_chunk(message: bytes) -> tuple[ChunkHeader, memoryview]:
    """The header fields and a view of the payload of a serialized ``Chunk`` (one that
    refers to shared memory is malformed here: this receiver has none)."""
    header, payload, slot = parse_chunk(message)
    if slot is not None:
        raise DeviceError("a malformed chunk arrived on a link: it refers to shared memory, "
                          "which this link does not take")
    return header, payload


def parse_chunk(message: bytes) -> tuple[ChunkHeader, memoryview, SlotFields | None]:
    """The header fields, a view of the inline payload, and the shared-memory fields (None
    if there are none) of a serialized ``Chunk``."""
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
        get = fields.get
        header = ChunkHeader(str(get(1, "")), int(get(2, 0)), int(get(3, 0)), int(get(4, 0)),
                             int(get(5, 0)), int(get(6, 0)), int(get(7, 0)), int(get(8, 0)))
        slot = None if 11 not in fields and 17 not in fields else SlotFields(
            str(get(11, "")), int(get(12, 0)), int(get(13, 0)), int(get(14, 0)),
            int(get(15, 0)), str(get(16, "")), str(get(17, "")), int(get(18, 0)),
            int(get(19, 0)), bool(get(20, 0)))
    except (ValueError, IndexError, UnicodeDecodeError) as error:
        raise DeviceError(f"a malformed chunk arrived on a link: {error}") from None
    return header, payload, slot


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
