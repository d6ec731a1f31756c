"""HTTP/2 frames as RFC 9113 defines them: frame types, settings and error codes as
``IntEnum``s, and the checks a frame passes before anything acts on it. Pure functions of
a frame's header and payload, no state and no socket: the connection's state machine
(:mod:`ipu_node.links.protocol`) parses, these judge (as python-hyper's hyperframe and h2
split framing from state). A violation is a :class:`ConnectionViolation` carrying the
RFC's error code, which the connection answers with GOAWAY before it closes."""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from enum import IntEnum


class FrameType(IntEnum):
    """Frame types (RFC 9113 §6); any other type is unknown and ignored."""

    DATA = 0x0
    HEADERS = 0x1
    PRIORITY = 0x2
    RST_STREAM = 0x3
    SETTINGS = 0x4
    PUSH_PROMISE = 0x5
    PING = 0x6
    GOAWAY = 0x7
    WINDOW_UPDATE = 0x8
    CONTINUATION = 0x9


class Setting(IntEnum):
    """SETTINGS parameters (RFC 9113 §6.5.2)."""

    HEADER_TABLE_SIZE = 0x1
    ENABLE_PUSH = 0x2
    MAX_CONCURRENT_STREAMS = 0x3
    INITIAL_WINDOW_SIZE = 0x4
    MAX_FRAME_SIZE = 0x5
    MAX_HEADER_LIST_SIZE = 0x6


class ErrorCode(IntEnum):
    """The error codes of RST_STREAM and GOAWAY (RFC 9113 §7), those the links use."""

    NO_ERROR = 0x0
    PROTOCOL_ERROR = 0x1
    INTERNAL_ERROR = 0x2
    FLOW_CONTROL_ERROR = 0x3
    FRAME_SIZE_ERROR = 0x6
    REFUSED_STREAM = 0x7
    CANCEL = 0x8
    COMPRESSION_ERROR = 0x9
    ENHANCE_YOUR_CALM = 0xB


# Short names, as the RFC spells them, for the members that frame checks and raw peers
# (tests) use most; the enums above are the definitions.
DATA, HEADERS, PRIORITY, RST_STREAM = (FrameType.DATA, FrameType.HEADERS, FrameType.PRIORITY,
                                       FrameType.RST_STREAM)
SETTINGS, PUSH_PROMISE, PING, GOAWAY = (FrameType.SETTINGS, FrameType.PUSH_PROMISE,
                                        FrameType.PING, FrameType.GOAWAY)
WINDOW_UPDATE, CONTINUATION = FrameType.WINDOW_UPDATE, FrameType.CONTINUATION
ENABLE_PUSH, INITIAL_WINDOW_SIZE = Setting.ENABLE_PUSH, Setting.INITIAL_WINDOW_SIZE
MAX_FRAME_SIZE = Setting.MAX_FRAME_SIZE
NO_ERROR, PROTOCOL_ERROR = ErrorCode.NO_ERROR, ErrorCode.PROTOCOL_ERROR
FLOW_CONTROL_ERROR, FRAME_SIZE_ERROR = ErrorCode.FLOW_CONTROL_ERROR, ErrorCode.FRAME_SIZE_ERROR
ENHANCE_YOUR_CALM = ErrorCode.ENHANCE_YOUR_CALM

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
END_STREAM = ACK = 0x1  # flags (a bit each; ACK on SETTINGS and PING)
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
MAX_WINDOW = (1 << 31) - 1
DEFAULT_WINDOW, DEFAULT_FRAME_BYTES = 65535, 16384
MAX_SETTINGS = 32  # settings in one SETTINGS frame (RFC 9113 defines 6; a few new ones)
GOAWAY_DEBUG_KEPT = 1024  # bytes of a GOAWAY's debug data kept for the error message
FRAME_HEADER_BYTES = 9
_FIXED_LENGTH: dict[int, int] = {PRIORITY: 5, RST_STREAM: 4, PING: 8, WINDOW_UPDATE: 4}
_ON_STREAM_ONLY = (DATA, HEADERS, PRIORITY, RST_STREAM, PUSH_PROMISE, CONTINUATION)
_ON_CONNECTION_ONLY = (SETTINGS, PING, GOAWAY)
_HEADER = struct.Struct(">I B I")  # frame length (24 bits) + type, flags, stream id


class ProtocolError(Exception):
    """The peer broke HTTP/2 or gRPC framing, or closed the connection."""


class StreamReset(ProtocolError):
    """The peer reset the stream (RST_STREAM) or is going away (GOAWAY)."""


class ConnectionViolation(ProtocolError):
    """The peer broke RFC 9113: a connection error with ``code`` (answered by GOAWAY)."""

    def __init__(self, code: ErrorCode, text: str) -> None:
        super().__init__(text)
        self.code = code


def frame_header(length: int, kind: int, flags: int, stream: int) -> bytes:
    return _HEADER.pack((length << 8) | kind, flags, stream)


def parse_header(raw: bytes | bytearray | memoryview) -> tuple[int, int, int, int]:
    """A frame header's (length, type, flags, stream), the stream's reserved bit dropped."""
    return (int.from_bytes(raw[:3], "big"), raw[3], raw[4],
            int.from_bytes(raw[5:9], "big") & 0x7FFFFFFF)


def check_header(length: int, kind: int, flags: int, stream: int, max_frame: int) -> None:
    """Raise :class:`ConnectionViolation` if a frame with this header is never valid:
    longer than we advertised, on the wrong stream, of the wrong fixed length."""
    if length > max_frame:
        raise ConnectionViolation(FRAME_SIZE_ERROR, f"a frame of {length:,} bytes, more than "
                                  f"the {max_frame:,} advertised (SETTINGS_MAX_FRAME_SIZE)")
    if kind > CONTINUATION:
        return  # unknown types are ignored (RFC 9113 §4.1), whatever their stream
    if stream == 0 and kind in _ON_STREAM_ONLY:
        raise ConnectionViolation(PROTOCOL_ERROR, f"frame type {kind} on stream 0")
    if stream != 0 and kind in _ON_CONNECTION_ONLY:
        raise ConnectionViolation(PROTOCOL_ERROR, f"frame type {kind} on stream {stream}")
    fixed = _FIXED_LENGTH.get(kind)
    if fixed is not None and length != fixed:
        raise ConnectionViolation(FRAME_SIZE_ERROR,
                                  f"frame type {kind} of {length} bytes, not {fixed}")
    if kind == SETTINGS and (length % 6 or (flags & ACK and length)
                             or length > 6 * MAX_SETTINGS):
        raise ConnectionViolation(FRAME_SIZE_ERROR, f"a SETTINGS frame of {length} bytes")
    if kind == GOAWAY and length < 8:
        raise ConnectionViolation(FRAME_SIZE_ERROR, f"a GOAWAY frame of {length} bytes")
    if kind in (DATA, HEADERS) and flags & PADDED and length < 1:
        raise ConnectionViolation(FRAME_SIZE_ERROR, "a PADDED frame without its pad length")


def header_block_span(payload: bytes | bytearray, flags: int) -> tuple[int, int]:
    """Where the header block fragment lies in a HEADERS payload: (start, end), past the
    pad length and priority fields and before the padding; checked."""
    start, padding = 0, 0
    if flags & PADDED:
        padding, start = payload[0], 1
    if flags & PRIORITY_FLAG:
        start += 5
    end = len(payload) - padding
    if end < start:
        raise ConnectionViolation(PROTOCOL_ERROR, f"a HEADERS frame of {len(payload)} bytes "
                                  f"cannot hold its fields and {padding} bytes of padding")
    return start, end


def settings(payload: bytes | bytearray) -> Iterator[tuple[int, int]]:
    """The (key, value) pairs of a SETTINGS payload, each value within RFC 9113's range."""
    for at in range(0, len(payload), 6):
        key, value = struct.unpack_from(">HI", payload, at)
        if key == ENABLE_PUSH and value > 1:
            raise ConnectionViolation(PROTOCOL_ERROR, f"SETTINGS_ENABLE_PUSH {value}")
        if key == INITIAL_WINDOW_SIZE and value > MAX_WINDOW:
            raise ConnectionViolation(FLOW_CONTROL_ERROR, f"SETTINGS_INITIAL_WINDOW_SIZE {value}")
        if key == MAX_FRAME_SIZE and not DEFAULT_FRAME_BYTES <= value <= (1 << 24) - 1:
            raise ConnectionViolation(PROTOCOL_ERROR, f"SETTINGS_MAX_FRAME_SIZE {value}")
        yield key, value


def window_increment(payload: bytes | bytearray, window: int) -> int:
    """A WINDOW_UPDATE's increment, checked: not zero, and ``window`` plus it within
    2^31-1."""
    increment = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
    if not increment:
        raise ConnectionViolation(PROTOCOL_ERROR, "a WINDOW_UPDATE of 0")
    if window + increment > MAX_WINDOW:
        raise ConnectionViolation(FLOW_CONTROL_ERROR, f"a WINDOW_UPDATE of {increment:,} takes "
                                  "the window past 2^31-1")
    return increment


def goaway_payload(last_stream: int, code: int, debug: bytes = b"") -> bytes:
    return struct.pack(">II", last_stream, code) + debug[:GOAWAY_DEBUG_KEPT]


def settings_payload(pairs: Sequence[tuple[int, int]]) -> bytes:
    return b"".join(struct.pack(">HI", key, value) for key, value in pairs)
