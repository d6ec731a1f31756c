"""gRPC's wire protocol (HTTP/2 without TLS, RFC 9113; gRPC's PROTOCOL-HTTP2) over one
socket, written for bulk bytes: no copies in user space, and no trust in the peer.

grpcio's Python layer copies a message five times between two processes (measured in
``benchmarks/link_stream.py``). Here a sender hands the socket its NumPy buffers as they
are (``sendmsg`` of the frame header and views), and a receiver reads each message
straight into a buffer of its own (``recv_into``): one copy into the kernel and one out,
as any socket transport needs. Headers are HPACK (the ``hpack`` package), and the
messages are the standard length-prefixed ones, so grpcio clients and servers talk to
this one (tested both ways).

Every frame is checked (:mod:`ipu_node.links.frames`) before it is acted on, and every
size is bounded by :class:`~ipu_node.links.limits.LinkLimits`: nothing is allocated from a
declared length beyond those limits. Kept simple on purpose: one stream at a time on a
connection (a server says so with ``SETTINGS_MAX_CONCURRENT_STREAMS = 1``; clients open
more connections instead), no compression, no server push. Flow control is honoured both
ways.
"""

from __future__ import annotations

import socket
import ssl
import struct
import time
from collections.abc import Iterable, Iterator, Sequence

import hpack
import numpy as np

from ipu_node.links.frames import (
    ACK,
    COMPRESSION_ERROR,
    CONTINUATION,
    DATA,
    DEFAULT_FRAME_BYTES,
    DEFAULT_WINDOW,
    ENABLE_PUSH,
    END_HEADERS,
    END_STREAM,
    ENHANCE_YOUR_CALM,
    FLOW_CONTROL_ERROR,
    GOAWAY,
    GOAWAY_DEBUG_KEPT,
    HEADER_TABLE_SIZE,
    HEADERS,
    INITIAL_WINDOW_SIZE,
    MAX_CONCURRENT_STREAMS,
    MAX_FRAME_SIZE,
    MAX_HEADER_LIST_SIZE,
    MAX_WINDOW,
    PADDED,
    PING,
    PREFACE,
    PROTOCOL_ERROR,
    PUSH_PROMISE,
    REFUSED_STREAM,
    RST_STREAM,
    SETTINGS,
    WINDOW_UPDATE,
    ConnectionViolation,
    ProtocolError,
    StreamReset,
    check_header,
    frame_header,
    goaway_payload,
    header_block_span,
    settings,
    window_increment,
)
from ipu_node.links.limits import ByteBudget, LinkLimits
from ipu_node.links.messages import MessageReader

__all__ = ["DATA", "END_STREAM", "HEADERS", "PREFACE", "RST_STREAM", "Connection",
           "ConnectionViolation", "ProtocolError", "StreamReset", "grpc_prefix"]
WINDOW_TOP_UP = 64 << 20  # a receiver gives credit back once this much has arrived
OUR_TABLE_BYTES = 4096  # the HPACK table we keep for the peer (the default: not sent)
_SKIP_PIECE = 64 << 10  # bytes skipped are read in pieces this large at most


def grpc_prefix(length: int) -> bytes:
    """gRPC's message prefix: not compressed, then the length (big-endian, 4 bytes)."""
    return struct.pack(">BI", 0, length)


class Connection:
    """One HTTP/2 connection: frames in and out, HPACK state, both directions' windows.
    Not thread-safe: one thread drives it (a server's connection thread, or the client
    that took it from its pool). ``budget`` bounds the message bytes a server allocates
    across its connections; ``server`` makes it check the ids of the streams a client
    opens."""

    def __init__(self, sock: socket.socket, limits: LinkLimits | None = None,
                 budget: ByteBudget | None = None, server: bool = False) -> None:
        self.sock, self.limits, self.budget, self.server = sock, limits or LinkLimits(), \
            budget, server
        self.encoder = hpack.Encoder()
        self.decoder = hpack.Decoder(max_header_list_size=4 * self.limits.max_header_block_bytes)
        self.peer_frame_bytes = DEFAULT_FRAME_BYTES
        self.peer_initial_window = DEFAULT_WINDOW
        self.send_window = DEFAULT_WINDOW  # connection level
        self.recv_window = MAX_WINDOW  # what we let the peer send (send_settings opens it)
        self.stream_windows: dict[int, int] = {}
        self.unacknowledged = 0  # bytes received since credit was last given back
        self.settings_seen = False
        self.trailers: dict[str, str] = {}  # of the stream :meth:`messages` read last
        self.next_stream = 1  # a client's next stream id (odd)
        self.last_peer_stream = 0  # the last stream a client opened (server side)
        self.current = 0  # the stream in progress: resets of others are old news
        self.stream_unacknowledged = 0  # the same as unacknowledged, for the current stream
        self.closing = False  # the peer sent GOAWAY: finish, then do not reuse
        self.deadline: float | None = None  # time.monotonic() by which every wait must end
        self._head = bytearray(9)

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
        """Read and forget ``length`` bytes, in bounded pieces."""
        while length:
            length -= len(self.read(min(length, _SKIP_PIECE)))

    def read(self, length: int) -> bytes:
        """``length`` bytes: only for lengths already checked against a limit."""
        buffer = bytearray(length)
        self.read_into(memoryview(buffer))
        return bytes(buffer)

    def write(self, parts: Sequence) -> None:
        """Send ``parts`` (bytes-like) in order, whole: ``sendmsg`` until all are gone."""
        views = [memoryview(part).cast("B") for part in parts if len(part)]
        if isinstance(self.sock, ssl.SSLSocket):  # no sendmsg in TLS: it copies anyway
            self._wait_limit()
            self.sock.sendall(b"".join(views))
            return
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
        """The next frame's (length, type, flags, stream), checked (:func:`check_header`)."""
        raw = self._head
        self.read_into(memoryview(raw))
        length, kind, flags = int.from_bytes(raw[:3], "big"), raw[3], raw[4]
        stream = int.from_bytes(raw[5:9], "big") & 0x7FFFFFFF
        check_header(length, kind, flags, stream, self.limits.max_frame_bytes)
        if not self.settings_seen and (kind != SETTINGS or flags & ACK):
            raise ConnectionViolation(PROTOCOL_ERROR, f"frame type {kind} before SETTINGS")
        return length, kind, flags, stream

    def send_settings(self, server: bool) -> None:
        pairs = [(INITIAL_WINDOW_SIZE, MAX_WINDOW), (MAX_FRAME_SIZE, self.limits.max_frame_bytes),
                 (MAX_HEADER_LIST_SIZE, 4 * self.limits.max_header_block_bytes)]
        pairs.append((MAX_CONCURRENT_STREAMS, 1) if server else (ENABLE_PUSH, 0))
        self.send_frame(SETTINGS, 0, 0, [b"".join(struct.pack(">HI", *p) for p in pairs)])
        self.send_frame(WINDOW_UPDATE, 0, 0, [struct.pack(">I", MAX_WINDOW - DEFAULT_WINDOW)])

    def goaway(self, code: int, text: str) -> None:
        """Tell the peer why the connection ends (best effort, within a second)."""
        try:
            self.deadline = time.monotonic() + 1.0
            self.send_frame(GOAWAY, 0, 0, [goaway_payload(self.last_peer_stream, code,
                                                          text.encode())])
        except OSError:
            pass

    def handle_control(self, length: int, kind: int, flags: int, stream: int) -> None:
        """A frame no stream in progress takes: settle it here. Header blocks are decoded
        all the same (HPACK state is per connection); DATA is dropped, its credit given back."""
        if kind == HEADERS:
            self.read_headers(length, flags, stream)
        elif kind == DATA:
            self._skip_data(length, flags)
        elif kind == CONTINUATION:
            raise ConnectionViolation(PROTOCOL_ERROR, "CONTINUATION without HEADERS before it")
        elif kind == PUSH_PROMISE:
            raise ConnectionViolation(PROTOCOL_ERROR, "PUSH_PROMISE (push is not enabled)")
        elif kind == GOAWAY:
            self._goaway_received(length)
        elif kind > CONTINUATION:
            self.skip(length)  # unknown types are ignored
        else:
            self._settle(kind, flags, stream, self.read(length))  # at most 192 bytes: checked

    def _settle(self, kind: int, flags: int, stream: int, payload: bytes) -> None:
        if kind == SETTINGS and not flags & ACK:
            self._take_settings(payload)
        elif kind == PING and not flags & ACK:
            self.send_frame(PING, ACK, 0, [payload])
        elif kind == WINDOW_UPDATE:
            if stream == 0:
                self.send_window += window_increment(payload, self.send_window)
            elif stream in self.stream_windows:
                self.stream_windows[stream] += window_increment(payload,
                                                                self.stream_windows[stream])
            else:
                window_increment(payload, 0)  # a closed stream's: checked, then dropped
        elif kind == RST_STREAM and stream == self.current:  # others are closed already
            raise StreamReset(f"the peer reset stream {stream} (HTTP/2 error code "
                              f"{int.from_bytes(payload, 'big')})")
        # PRIORITY: ignored

    def _take_settings(self, payload: bytes) -> None:
        for key, value in settings(payload):
            if key == MAX_FRAME_SIZE:
                self.peer_frame_bytes = value
            elif key == INITIAL_WINDOW_SIZE:
                delta = value - self.peer_initial_window
                if any(window + delta > MAX_WINDOW for window in self.stream_windows.values()):
                    raise ConnectionViolation(FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE "
                                              "takes a stream's window past 2^31-1")
                self.peer_initial_window = value
                for open_stream in self.stream_windows:
                    self.stream_windows[open_stream] += delta
            elif key == HEADER_TABLE_SIZE:
                self.encoder.header_table_size = min(value, OUR_TABLE_BYTES)
        self.settings_seen = True
        self.send_frame(SETTINGS, ACK, 0)

    def _goaway_received(self, length: int) -> None:
        fixed = self.read(8)
        debug = self.read(min(length - 8, GOAWAY_DEBUG_KEPT))
        self.skip(length - 8 - len(debug))
        self.closing = True
        last, code = struct.unpack(">II", fixed)
        if self.current > last & 0x7FFFFFFF:  # the stream in progress will not be processed
            raise StreamReset(f"the peer is closing the connection (GOAWAY, code {code}): "
                              f"{debug.decode(errors='replace')}")

    def _skip_data(self, length: int, flags: int) -> None:
        """A DATA frame of no stream in progress: checked, counted, dropped."""
        self.count_received(0, length)
        if flags & PADDED and self.read(1)[0] > length - 1:
            raise ConnectionViolation(PROTOCOL_ERROR, "a DATA frame's padding exceeds it")
        self.skip(length - (1 if flags & PADDED else 0))

    def open_stream(self, stream: int) -> None:
        """A client opens ``stream`` (server side): its id must be odd and new."""
        if self.server and (not stream & 1 or stream <= self.last_peer_stream):
            raise ConnectionViolation(PROTOCOL_ERROR, f"a client opened stream {stream} after "
                                      f"{self.last_peer_stream}")
        self.last_peer_stream = max(self.last_peer_stream, stream)

    def read_headers(self, length: int, flags: int, stream: int) -> dict[str, str]:
        """A header block (HEADERS plus any CONTINUATION frames), bounded and decoded."""
        limit = self.limits.max_header_block_bytes
        if length > limit + 256:  # the block, its padding and priority fields
            raise ConnectionViolation(ENHANCE_YOUR_CALM, f"a header block beyond {limit:,} bytes")
        payload = self.read(length)
        start, end = header_block_span(payload, flags)
        block = bytearray(payload[start:end])
        while not flags & END_HEADERS:
            length, kind, flags, on = self.read_header()
            if kind != CONTINUATION or on != stream:
                raise ConnectionViolation(PROTOCOL_ERROR, f"frame type {kind} on stream {on} "
                                          f"inside a header block of stream {stream}")
            if len(block) + length > limit:
                raise ConnectionViolation(ENHANCE_YOUR_CALM,
                                          f"a header block beyond {limit:,} bytes")
            block += self.read(length)
        try:
            return {name if isinstance(name, str) else name.decode():
                    value if isinstance(value, str) else value.decode()
                    for name, value in self.decoder.decode(bytes(block))}
        except Exception as error:  # noqa: BLE001 - hpack's errors, or headers not text
            raise ConnectionViolation(COMPRESSION_ERROR,
                                      f"a header block did not decode: {error}") from None

    def send_headers(self, stream: int, headers: list[tuple[str, str]], end: bool) -> None:
        if not end:  # a stream that will carry DATA: its window counts from now
            self.stream_windows.setdefault(stream, self.peer_initial_window)
        block = self.encoder.encode(headers)
        self.send_frame(HEADERS, END_HEADERS | (END_STREAM if end else 0), stream, [block])
        if end:
            self.stream_windows.pop(stream, None)

    def count_received(self, stream: int, received: int) -> None:
        """Take ``received`` DATA bytes off our window (more than it is a flow-control
        error), and give credit back (:meth:`give_credit`)."""
        self.recv_window -= received
        if self.recv_window < 0:
            raise ConnectionViolation(FLOW_CONTROL_ERROR, "DATA beyond the window we gave")
        self.give_credit(stream, received)

    def give_credit(self, stream: int, received: int) -> None:
        """Count ``received`` DATA bytes (of ``stream``, or 0 for none); give the
        connection's and the stream's windows back in large steps, each its own count."""
        self.unacknowledged += received
        if self.unacknowledged >= WINDOW_TOP_UP:
            self.send_frame(WINDOW_UPDATE, 0, 0, [struct.pack(">I", self.unacknowledged)])
            self.recv_window += self.unacknowledged
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
        flags) already announced. A message beyond the limits raises
        :class:`ResourceExhausted` once its frame is read (the rest of the stream is
        dropped as it comes)."""
        self.trailers, self.stream_unacknowledged = {}, 0
        reader = MessageReader(self)
        try:
            pending = first
            while True:
                if pending is None:
                    pending = self._next_data(stream)
                    if pending is None:
                        return
                length, flags = pending
                pending = None
                yield from reader.frame(stream, length, flags)
                if flags & END_STREAM:
                    if reader.message is not None or reader.have:
                        raise ProtocolError("the stream ended inside a message")
                    return
        finally:
            reader.release()

    def _next_data(self, stream: int) -> tuple[int, int] | None:
        """The (length, flags) of ``stream``'s next DATA frame, settling other frames on
        the way; None once its trailers end it."""
        while True:
            length, kind, flags, on = self.read_header()
            if kind == HEADERS and on == stream:
                self.trailers = self.read_headers(length, flags, on)
                if flags & END_STREAM:
                    return None
                continue
            if kind == HEADERS:  # a second stream: one at a time, the client retries
                self.open_stream(on)
                self.read_headers(length, flags, on)
                self.send_frame(RST_STREAM, 0, on, [struct.pack(">I", REFUSED_STREAM)])
                continue
            if kind == DATA and on == stream:
                return length, flags
            self.handle_control(length, kind, flags, on)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
