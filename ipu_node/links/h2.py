"""gRPC's wire protocol (HTTP/2 without TLS, RFC 9113; gRPC's PROTOCOL-HTTP2) over one
socket, written for bulk bytes: no copies in user space.

grpcio's Python layer copies a message five times between two processes (measured in
``benchmarks/link_stream.py``). Here a sender hands the socket its NumPy buffers as they
are (``sendmsg`` of the frame header and views), and a receiver reads each message
straight into a buffer of its own (``recv_into``): one copy into the kernel and one out,
as any socket transport needs. Headers are HPACK (the ``hpack`` package), and the
messages are the standard length-prefixed ones, so grpcio clients and servers talk to
this one (tested both ways).

Kept simple on purpose: one stream at a time on a connection (a server says so with
``SETTINGS_MAX_CONCURRENT_STREAMS = 1``; clients open more connections instead), no
compression, no TLS, no server push. Flow control is honoured both ways.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterable, Iterator, Sequence

import hpack
import numpy as np

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, \
    WINDOW_UPDATE, CONTINUATION = range(10)
END_STREAM = ACK = 0x1
END_HEADERS, PADDED, PRIORITY_FLAG = 0x4, 0x8, 0x20
ENABLE_PUSH, MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE, MAX_FRAME_SIZE = 0x2, 0x3, 0x4, 0x5
REFUSED_STREAM = 0x7  # RST_STREAM code: not processed, safe to retry
MAX_WINDOW = (1 << 31) - 1
OUR_FRAME_BYTES = (1 << 24) - 1  # the largest frame HTTP/2 allows
DEFAULT_WINDOW, DEFAULT_FRAME_BYTES = 65535, 16384
WINDOW_TOP_UP = 64 << 20  # a receiver gives credit back once this much has arrived
_HEADER = struct.Struct(">I B I")  # frame length (24 bits) + type, flags, stream id


class ProtocolError(Exception):
    """The peer broke HTTP/2 or gRPC framing, or closed the connection."""


class StreamReset(ProtocolError):
    """The peer reset the stream (RST_STREAM) or is going away (GOAWAY)."""


def frame_header(length: int, kind: int, flags: int, stream: int) -> bytes:
    return _HEADER.pack((length << 8) | kind, flags, stream)


def grpc_prefix(length: int) -> bytes:
    """gRPC's message prefix: not compressed, then the length (big-endian, 4 bytes)."""
    return struct.pack(">BI", 0, length)


class Connection:
    """One HTTP/2 connection: frames in and out, HPACK state, both directions' windows.
    Not thread-safe: one thread drives it (a server's connection thread, or the client
    that took it from its pool)."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.encoder, self.decoder = hpack.Encoder(), hpack.Decoder()
        self.peer_frame_bytes = DEFAULT_FRAME_BYTES
        self.peer_initial_window = DEFAULT_WINDOW
        self.send_window = DEFAULT_WINDOW  # connection level
        self.stream_windows: dict[int, int] = {}
        self.unacknowledged = 0  # bytes received since credit was last given back
        self.settings_seen = False
        self.trailers: dict[str, str] = {}  # of the stream :meth:`messages` read last
        self.next_stream = 1  # a client's next stream id (odd)
        self.current = 0  # the stream in progress: resets of others are old news
        self.stream_unacknowledged = 0  # the same as unacknowledged, for the current stream
        self.closing = False  # the peer sent GOAWAY: finish, then do not reuse
        self.deadline: float | None = None  # time.monotonic() by which every wait must end

    def _wait_limit(self) -> None:
        """Bound the next socket operation by :attr:`deadline` (a whole call's deadline,
        not each operation's)."""
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("deadline passed")
            self.sock.settimeout(left)

    # -- bytes -----------------------------------------------------------------------------
    def read_into(self, view: memoryview) -> None:
        while len(view):
            self._wait_limit()
            got = self.sock.recv_into(view)
            if not got:
                raise ProtocolError("the peer closed the connection")
            view = view[got:]

    def skip(self, length: int) -> None:
        while length:
            length -= len(self.read(min(length, 1 << 20)))

    def read(self, length: int) -> bytes:
        buffer = bytearray(length)
        self.read_into(memoryview(buffer))
        return bytes(buffer)

    def write(self, parts: Sequence) -> None:
        """Send ``parts`` (bytes-like) in order, whole: ``sendmsg`` until all are gone."""
        views = [memoryview(part).cast("B") for part in parts if len(part)]
        while views:
            self._wait_limit()
            sent = self.sock.sendmsg(views[:512])
            while sent and views:
                if sent >= len(views[0]):
                    sent -= len(views[0])
                    views.pop(0)
                else:
                    views[0] = views[0][sent:]
                    sent = 0

    # -- frames ----------------------------------------------------------------------------
    def send_frame(self, kind: int, flags: int, stream: int, payload: Sequence = ()) -> None:
        length = sum(len(memoryview(part).cast("B")) for part in payload)
        self.write([frame_header(length, kind, flags, stream), *payload])

    def read_header(self) -> tuple[int, int, int, int]:
        """The next frame's (length, type, flags, stream)."""
        raw = self.read(9)
        length = int.from_bytes(raw[:3], "big")
        return length, raw[3], raw[4], int.from_bytes(raw[5:9], "big") & 0x7FFFFFFF

    def send_settings(self, server: bool) -> None:
        settings = [(INITIAL_WINDOW_SIZE, MAX_WINDOW), (MAX_FRAME_SIZE, OUR_FRAME_BYTES)]
        settings.append((MAX_CONCURRENT_STREAMS, 1) if server else (ENABLE_PUSH, 0))
        payload = b"".join(struct.pack(">HI", key, value) for key, value in settings)
        self.send_frame(SETTINGS, 0, 0, [payload])
        self.send_frame(WINDOW_UPDATE, 0, 0, [struct.pack(">I", MAX_WINDOW - DEFAULT_WINDOW)])

    def handle_control(self, length: int, kind: int, flags: int, stream: int) -> None:
        """A frame no stream in progress takes: settle it here. Header blocks are decoded
        all the same (HPACK state is per connection); DATA is dropped, its credit given back."""
        if kind == HEADERS:
            self.read_headers(length, flags, stream)
            return
        if kind == DATA:
            self.skip(length)
            self.give_credit(0, length)
            return
        payload = self.read(length)
        if kind == SETTINGS and not flags & ACK:
            for at in range(0, len(payload) - 5, 6):
                key, value = struct.unpack_from(">HI", payload, at)
                if key == MAX_FRAME_SIZE:
                    self.peer_frame_bytes = value
                elif key == INITIAL_WINDOW_SIZE:
                    delta = value - self.peer_initial_window
                    self.peer_initial_window = value
                    for open_stream in self.stream_windows:
                        self.stream_windows[open_stream] += delta
            self.settings_seen = True
            self.send_frame(SETTINGS, ACK, 0)
        elif kind == PING and not flags & ACK:
            self.send_frame(PING, ACK, 0, [payload])
        elif kind == WINDOW_UPDATE:
            increment = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF
            if stream == 0:
                self.send_window += increment
            elif stream in self.stream_windows:
                self.stream_windows[stream] += increment
        elif kind == RST_STREAM and stream == self.current:  # others are closed already
            code = int.from_bytes(payload[:4], "big") if len(payload) >= 4 else 0
            raise StreamReset(f"the peer reset stream {stream} (HTTP/2 error code {code})")
        elif kind == GOAWAY:
            self.closing = True
            last = int.from_bytes(payload[:4], "big") & 0x7FFFFFFF if len(payload) >= 4 else 0
            if self.current > last:  # the stream in progress will not be processed
                code = int.from_bytes(payload[4:8], "big") if len(payload) >= 8 else 0
                raise StreamReset(f"the peer is closing the connection (GOAWAY, code {code}): "
                                  f"{payload[8:].decode(errors='replace')}")
        # PRIORITY, PUSH_PROMISE (never sent to a server) and unknown types: ignored

    def read_headers(self, length: int, flags: int, stream: int) -> dict[str, str]:
        """A header block (HEADERS plus any CONTINUATION frames), decoded."""
        block = bytearray(self.read(length))
        skip_front = skip_back = 0
        if flags & PADDED:
            skip_back, skip_front = block[0], 1
        if flags & PRIORITY_FLAG:
            skip_front += 5
        block = block[skip_front:len(block) - skip_back]
        while not flags & END_HEADERS:
            length, kind, flags, _ = self.read_header()
            if kind != CONTINUATION:
                raise ProtocolError("a header block was interrupted by another frame")
            block += self.read(length)
        try:
            return {name if isinstance(name, str) else name.decode():
                    value if isinstance(value, str) else value.decode()
                    for name, value in self.decoder.decode(bytes(block))}
        except Exception as error:  # noqa: BLE001 - hpack's errors, or headers not text
            raise ProtocolError(f"a header block did not decode: {error}") from None

    def send_headers(self, stream: int, headers: list[tuple[str, str]], end: bool) -> None:
        if not end:  # a stream that will carry DATA: its window counts from now
            self.stream_windows.setdefault(stream, self.peer_initial_window)
        block = self.encoder.encode(headers)
        self.send_frame(HEADERS, END_HEADERS | (END_STREAM if end else 0), stream, [block])
        if end:
            self.stream_windows.pop(stream, None)

    def give_credit(self, stream: int, received: int) -> None:
        """Count ``received`` DATA bytes (of ``stream``, or 0 for none); give the
        connection's and the stream's windows back in large steps, each its own count."""
        self.unacknowledged += received
        if self.unacknowledged >= WINDOW_TOP_UP:
            self.send_frame(WINDOW_UPDATE, 0, 0, [struct.pack(">I", self.unacknowledged)])
            self.unacknowledged = 0
        if stream:
            self.stream_unacknowledged += received
            if self.stream_unacknowledged >= WINDOW_TOP_UP:
                self.send_frame(WINDOW_UPDATE, 0, stream,
                                [struct.pack(">I", self.stream_unacknowledged)])
                self.stream_unacknowledged = 0

    # -- gRPC messages -----------------------------------------------------------------------
    def send_messages(self, stream: int, messages: Iterable, end: bool) -> None:
        """Send each message (bytes-like, or a tuple of bytes-like parts sent back to back)
        as gRPC length-prefixed messages in DATA frames, within the peer's frame size and
        windows (waiting for WINDOW_UPDATE when they are spent)."""
        self.stream_windows.setdefault(stream, self.peer_initial_window)
        for message in messages:
            parts = message if isinstance(message, tuple) else (message,)
            views = [memoryview(part).cast("B") for part in parts]
            body = sum(len(view) for view in views)
            self._send_data(stream, [memoryview(grpc_prefix(body)), *views])
        if end:
            self.send_frame(DATA, END_STREAM, stream)
            self.stream_windows.pop(stream, None)

    def _send_data(self, stream: int, views: list[memoryview]) -> None:
        while views:
            room = min(self.peer_frame_bytes, self.send_window, self.stream_windows[stream])
            if room <= 0:  # wait for credit
                length, kind, flags, on = self.read_header()
                if kind == HEADERS and on == stream:  # an answer before the request ended
                    self.trailers = self.read_headers(length, flags, on)
                    raise StreamReset(f"the peer ended the call early: gRPC status "
                                      f"{self.trailers.get('grpc-status', '?')} "
                                      f"{self.trailers.get('grpc-message', '')}")
                self.handle_control(length, kind, flags, on)
                continue
            frame, size = [], 0
            while views and size < room:
                take = views[0][:room - size]
                frame.append(take)
                size += len(take)
                views[0] = views[0][len(take):]
                if not len(views[0]):
                    views.pop(0)
            self.send_frame(DATA, 0, stream, frame)
            self.send_window -= size
            self.stream_windows[stream] -= size

    def messages(self, stream: int, first: tuple[int, int] | None = None) -> Iterator[np.ndarray]:
        """The gRPC messages of ``stream``'s DATA frames, each read straight into a buffer of
        its own (a NumPy byte array), until the stream ends. Control frames are settled on
        the way; trailers end up in :attr:`trailers`. ``first`` is a DATA frame's (length,
        flags) already announced."""
        pending, self.trailers, self.stream_unacknowledged = first, {}, 0
        prefix, have = bytearray(5), 0
        message, filled = None, 0
        while True:
            if pending is None:
                length, kind, flags, on = self.read_header()
                if kind == HEADERS and on == stream:
                    self.trailers = self.read_headers(length, flags, on)
                    if flags & END_STREAM:
                        return
                    continue
                if kind == HEADERS:  # a second stream: one at a time, the client retries
                    self.read_headers(length, flags, on)
                    self.send_frame(RST_STREAM, 0, on, [struct.pack(">I", REFUSED_STREAM)])
                    continue
                if kind != DATA or on != stream:
                    self.handle_control(length, kind, flags, on)
                    continue
                pending = (length, flags)
            length, flags = pending
            pending = None
            remaining, padding = length, 0
            if flags & PADDED:
                padding = self.read(1)[0]
                remaining -= 1 + padding
            self.give_credit(stream, length)
            while remaining:
                if message is None:
                    take = min(5 - have, remaining)
                    self.read_into(memoryview(prefix)[have:have + take])
                    have, remaining = have + take, remaining - take
                    if have == 5:
                        if prefix[0]:
                            raise ProtocolError("compressed gRPC messages are not supported")
                        message = np.empty(int.from_bytes(prefix[1:5], "big"), dtype=np.uint8)
                        filled = 0
                else:
                    take = min(len(message) - filled, remaining)
                    self.read_into(message.data[filled:filled + take])
                    filled, remaining = filled + take, remaining - take
                if message is not None and filled == len(message):
                    yield message
                    message, have = None, 0
            if padding:
                self.read(padding)
            if flags & END_STREAM:
                if message is not None or have:
                    raise ProtocolError("the stream ended inside a message")
                return

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
