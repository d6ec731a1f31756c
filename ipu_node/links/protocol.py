"""One HTTP/2 connection as a state machine without I/O (python-hyper h2's shape): bytes
in, events (:mod:`ipu_node.links.events`) and bytes to send out. The socket loop that
drives it is :class:`ipu_node.links.h2.Connection`.

Bytes come in without a copy, as asyncio's ``BufferedProtocol`` takes them:
:meth:`H2Protocol.receive_buffer` says where the next bytes go (never past the frame part
in progress, so a gRPC message lands straight in its own buffer), :meth:`H2Protocol.received`
how many arrived; :meth:`H2Protocol.receive_data` takes ``bytes``. Out,
:meth:`H2Protocol.data_to_send` gives frame headers and the caller's own buffers.

Every frame is checked (:mod:`ipu_node.links.frames`) before it is acted on; every size is
bounded by :class:`~ipu_node.links.link_limits.LinkLimits`. One stream at a time (a server says
so with ``SETTINGS_MAX_CONCURRENT_STREAMS = 1`` and refuses a second), no compression, no
push. The stream in progress is over once the server has answered it, the client has its
whole answer, or it was reset; what comes on it afterwards is dropped.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Sequence

import hpack

from ipu_node.links import events as ev
from ipu_node.links import frames as f
from ipu_node.links.frames import ConnectionViolation, ErrorCode, FrameType, ProtocolError, Setting
from ipu_node.links.grpc_messages import MessageReader, grpc_prefix
from ipu_node.links.headers import HeaderBlock
from ipu_node.links.incoming import Incoming
from ipu_node.links.link_limits import ByteBudget, LinkLimits, ResourceExhausted
from ipu_node.links.windows import ReceiveWindow, SendWindows

OUR_TABLE_BYTES = 4096  # the HPACK table we keep for the peer (the default: not sent)
_CREDIT = struct.Struct(">I")
PROTOCOL_ERROR = ErrorCode.PROTOCOL_ERROR


class H2Protocol:
    """The state of one HTTP/2 connection carrying gRPC calls, one stream at a time.
    ``server`` makes it check the ids of the streams a client opens; ``budget`` bounds the
    message bytes a server allocates across its connections."""

    def __init__(self, limits: LinkLimits | None = None, budget: ByteBudget | None = None,
                 server: bool = False) -> None:
        self.limits, self.server = limits or LinkLimits(), server
        self.encoder = hpack.Encoder()
        self.block = HeaderBlock(self.limits.max_header_block_bytes)
        self.send_windows, self.receive_window = SendWindows(), ReceiveWindow()
        self.reader = MessageReader(self.limits, budget)
        self.peer_frame_bytes = f.DEFAULT_FRAME_BYTES
        self.settings_seen = False
        self.closing = False  # the peer sent GOAWAY: finish, then do not reuse
        self.current = 0  # the stream in progress (0: none)
        self.next_stream = 1  # a client's next stream id (odd)
        self.last_peer_stream = 0  # the last stream a client opened (server side)
        self._events: deque[ev.Event] = deque()
        self._outgoing: list = []
        self.incoming = Incoming()  # where the next bytes go (see receive_buffer)
        self._frame = (0, 0, 0, 0)  # the frame being received: (length, type, flags, stream)
        self._data = [0, 0, 0, 0]  # a DATA frame's stream (0: dropped), bytes left, padding,
        # and the size of the part being landed
        if server:
            self.incoming.read(len(f.PREFACE), self._on_preface)
        else:
            self._next_frame()

    # -- bytes in ------------------------------------------------------------------------
    def receive_buffer(self) -> memoryview:
        """Where the next bytes received go (never empty, never past the frame part in
        progress)."""
        return self.incoming.view

    def received(self, count: int) -> None:
        """``count`` bytes were written at the start of :meth:`receive_buffer`; act on
        what they complete. Raises :class:`ConnectionViolation` (answer with GOAWAY) or
        :class:`ProtocolError` (just close)."""
        self.incoming.received(count)

    def receive_data(self, data: bytes | bytearray | memoryview) -> list[ev.Event]:
        """Take ``data`` (a copy into the frame's buffers); every event not yet taken."""
        view = memoryview(data).cast("B")
        while len(view):
            target = self.incoming.view
            take = min(len(target), len(view))
            target[:take] = view[:take]
            self.received(take)
            view = view[take:]
        taken = list(self._events)
        self._events.clear()
        return taken

    def next_event(self) -> ev.Event | None:
        """The oldest event not yet taken, if any."""
        return self._events.popleft() if self._events else None

    # -- bytes out -----------------------------------------------------------------------
    @property
    def pending_output(self) -> bool:
        return bool(self._outgoing)

    def data_to_send(self) -> list:
        """The bytes-like parts to send, in order (frame headers, the caller's buffers)."""
        parts, self._outgoing = self._outgoing, []
        return parts

    def send_frame(self, kind: int, flags: int, stream: int, payload: Sequence = (),
                   length: int | None = None) -> None:
        """Queue one frame; ``length`` is the payload's, if the caller knows it."""
        if length is None:
            length = sum(len(memoryview(part).cast("B")) for part in payload)
        self._outgoing.append(f.frame_header(length, kind, flags, stream))
        self._outgoing.extend(payload)

    def initiate_connection(self) -> None:
        """Our side's opening: the preface (a client's), our SETTINGS, and the connection
        window opened to 2^31-1. A server sends it once the client's preface arrived."""
        if not self.server:
            self._outgoing.append(f.PREFACE)
        limits = self.limits
        pairs = [(Setting.INITIAL_WINDOW_SIZE, f.MAX_WINDOW),
                 (Setting.MAX_FRAME_SIZE, limits.max_frame_bytes),
                 (Setting.MAX_HEADER_LIST_SIZE, 4 * limits.max_header_block_bytes),
                 (Setting.MAX_CONCURRENT_STREAMS, 1) if self.server else (Setting.ENABLE_PUSH, 0)]
        self.send_frame(FrameType.SETTINGS, 0, 0, [f.settings_payload(pairs)])
        self.send_frame(FrameType.WINDOW_UPDATE, 0, 0,
                        [_CREDIT.pack(f.MAX_WINDOW - f.DEFAULT_WINDOW)], 4)

    def send_headers(self, stream: int, headers: list[tuple[str, str]], end: bool) -> None:
        """A header block on ``stream``; a client's new stream (odd, above the last)
        becomes the stream in progress."""
        if not self.server and stream >= self.next_stream and stream & 1:
            self.abandon_stream()
            self.current, self.next_stream = stream, stream + 2
            self.receive_window.new_stream()
        if not end:  # a stream that will carry DATA: its window counts from now
            self.send_windows.open(stream)
        block = self.encoder.encode(headers)
        flags = f.END_HEADERS | (f.END_STREAM if end else 0)
        self.send_frame(FrameType.HEADERS, flags, stream, [block], len(block))
        if end:
            self._ended_here(stream)

    def send_message(self, stream: int, parts: Sequence) -> list[memoryview]:
        """A gRPC message of ``parts`` (bytes-like, sent back to back, not copied) as DATA
        within the peer's frame size and windows; what did not fit is returned, for
        :meth:`send_data` once credit comes (:class:`~ipu_node.links.events.WindowUpdated`)."""
        views = [memoryview(part).cast("B") for part in parts]
        views.insert(0, memoryview(grpc_prefix(sum(len(view) for view in views))))
        return self.send_data(stream, views)

    def send_data(self, stream: int, views: list[memoryview]) -> list[memoryview]:
        """Queue DATA frames of ``views`` while the windows allow; return the rest."""
        windows = self.send_windows
        while views:
            room = min(self.peer_frame_bytes, windows.room(stream))
            if room <= 0:
                return views
            frame, size = [], 0
            while views and size < room:
                take = views[0][:room - size]
                frame.append(take)
                size += len(take)
                views[0] = views[0][len(take):]
                if not len(views[0]):
                    views.pop(0)
            self.send_frame(FrameType.DATA, 0, stream, frame, size)
            windows.spend(stream, size)
        return views

    def end_data(self, stream: int) -> None:
        """End our side of ``stream`` with an empty DATA frame (END_STREAM)."""
        self.send_frame(FrameType.DATA, f.END_STREAM, stream, (), 0)
        self._ended_here(stream)

    def reset_stream(self, stream: int, code: ErrorCode) -> None:
        self.send_frame(FrameType.RST_STREAM, 0, stream, [_CREDIT.pack(code)], 4)
        if stream == self.current:
            self.abandon_stream()

    def close_connection(self, code: ErrorCode, text: str) -> None:
        """GOAWAY with ``code`` and ``text`` (its first KiB)."""
        payload = f.goaway_payload(self.last_peer_stream, code, text.encode())
        self.send_frame(FrameType.GOAWAY, 0, 0, [payload], len(payload))

    def abandon_stream(self) -> None:
        """The stream in progress is over for us: a message begun leaves the budget, and
        what still comes on the stream is dropped."""
        if self.current:
            self.send_windows.close(self.current)
        self.current = 0
        self.reader.release()

    def _ended_here(self, stream: int) -> None:
        """We ended our side of ``stream``: a server's answer ends the stream."""
        self.send_windows.close(stream)
        if self.server and stream == self.current:
            self.abandon_stream()

    # -- frames in -----------------------------------------------------------------------
    def _next_frame(self) -> None:
        self.incoming.header(self._on_header)

    def _on_preface(self) -> None:
        if self.incoming.payload != f.PREFACE:
            raise ProtocolError("not HTTP/2")  # nothing to say to it
        self.initiate_connection()
        self._next_frame()

    def _on_header(self) -> None:
        """A frame header: checked, then its payload routed by type."""
        length, kind, flags, stream = self._frame = f.parse_header(self.incoming.head)
        f.check_header(length, kind, flags, stream, self.limits.max_frame_bytes)
        if not self.settings_seen and (kind != FrameType.SETTINGS or flags & f.ACK):
            raise ConnectionViolation(PROTOCOL_ERROR, f"frame type {kind} before SETTINGS")
        inside = self.block.stream
        if inside and (kind != FrameType.CONTINUATION or stream != inside):
            raise ConnectionViolation(PROTOCOL_ERROR, f"frame type {kind} on stream {stream} "
                                      f"inside a header block of stream {inside}")
        if kind == FrameType.DATA:
            self._on_data_header(length, flags, stream)
        elif kind in (FrameType.HEADERS, FrameType.CONTINUATION):
            self._on_block_header(length, kind, stream)
        elif kind == FrameType.PUSH_PROMISE:
            raise ConnectionViolation(PROTOCOL_ERROR, "PUSH_PROMISE (push is not enabled)")
        elif kind == FrameType.GOAWAY:
            self.incoming.read(min(length, 8 + f.GOAWAY_DEBUG_KEPT), self._on_goaway_head)
        elif kind > FrameType.CONTINUATION:
            self.incoming.skip(length, self._next_frame)  # unknown types are ignored
        else:
            self.incoming.read(length, self._on_control)  # at most 192 bytes: checked

    def _on_control(self) -> None:
        """SETTINGS, PING, WINDOW_UPDATE, RST_STREAM or PRIORITY (ignored), whole."""
        _, kind, flags, stream = self._frame
        payload = self.incoming.payload
        self._next_frame()
        if kind == FrameType.SETTINGS and not flags & f.ACK:
            self._take_settings(payload)
        elif kind == FrameType.PING and not flags & f.ACK:
            self.send_frame(FrameType.PING, f.ACK, 0, [bytes(payload)], 8)
        elif kind == FrameType.WINDOW_UPDATE:
            self.send_windows.credit(stream, payload)
            self._events.append(ev.WindowUpdated(stream))
        elif kind == FrameType.RST_STREAM and stream == self.current:  # others are closed already
            self.abandon_stream()
            self._events.append(ev.ResetReceived(stream, int.from_bytes(payload, "big")))

    def _take_settings(self, payload: bytearray) -> None:
        for key, value in f.settings(payload):
            if key == Setting.MAX_FRAME_SIZE:
                self.peer_frame_bytes = value
            elif key == Setting.INITIAL_WINDOW_SIZE:
                self.send_windows.set_initial(value)
            elif key == Setting.HEADER_TABLE_SIZE:
                self.encoder.header_table_size = min(value, OUR_TABLE_BYTES)
        self.settings_seen = True
        self.send_frame(FrameType.SETTINGS, f.ACK, 0, (), 0)

    def _on_goaway_head(self) -> None:
        self.incoming.skip(self._frame[0] - len(self.incoming.payload), self._on_goaway)

    def _on_goaway(self) -> None:
        payload = self.incoming.payload
        last, code = struct.unpack_from(">II", payload)
        self.closing = True
        self._next_frame()
        debug = payload[8:].decode(errors="replace")
        self._events.append(ev.GoAwayReceived(last & 0x7FFFFFFF, code, debug))

    # -- header blocks -------------------------------------------------------------------
    def _on_block_header(self, length: int, kind: int, stream: int) -> None:
        if kind == FrameType.CONTINUATION:
            self.block.check_continuation(length)
        else:
            self.block.check_headers(length)
            if self.server and stream != self.current:
                self._peer_opens(stream)
        self.incoming.read(length, self._on_block_fragment)

    def _peer_opens(self, stream: int) -> None:
        """A client opens ``stream`` (server side): its id must be odd and new."""
        if not stream & 1 or stream <= self.last_peer_stream:
            raise ConnectionViolation(PROTOCOL_ERROR, f"a client opened stream {stream} after "
                                      f"{self.last_peer_stream}")
        self.last_peer_stream = stream

    def _on_block_fragment(self) -> None:
        _, kind, flags, stream = self._frame
        if kind == FrameType.HEADERS:
            self.block.begin(stream, self.incoming.payload, flags)
        else:
            self.block.extend(self.incoming.payload)
        self._next_frame()
        if flags & f.END_HEADERS:
            ends = self.block.ends_stream
            self._on_headers(stream, self.block.decode(), ends)

    def _on_headers(self, stream: int, headers: dict[str, str], end: bool) -> None:
        """A whole header block: of the stream in progress, a server's next request, or a
        second stream while one is in progress (refused: one at a time). A client drops
        those of streams that are over (HPACK state is kept all the same)."""
        if self.server and not self.current:
            self.current = stream
            self.receive_window.new_stream()
        if stream != self.current:
            if self.server:
                self.reset_stream(stream, ErrorCode.REFUSED_STREAM)
            return
        self._events.append(ev.HeadersReceived(stream, headers, end))
        if end:
            self._peer_ended(stream)

    def _peer_ended(self, stream: int) -> None:
        if self.reader.inside:
            raise ProtocolError("the stream ended inside a message")
        self._events.append(ev.StreamEnded(stream))
        if not self.server:  # the whole answer: the call is over
            self.abandon_stream()

    # -- DATA ----------------------------------------------------------------------------
    def _on_data_header(self, length: int, flags: int, stream: int) -> None:
        """DATA: counted against our window (credit given back in large steps), then
        landed in messages if it is the stream in progress, else dropped."""
        ours = stream == self.current
        connection, on_stream = self.receive_window.received(length, ours)
        if connection:
            self.send_frame(FrameType.WINDOW_UPDATE, 0, 0, [_CREDIT.pack(connection)], 4)
        if on_stream:
            self.send_frame(FrameType.WINDOW_UPDATE, 0, stream, [_CREDIT.pack(on_stream)], 4)
        self._data[:] = stream if ours else 0, length, 0, 0
        if flags & f.PADDED:
            self.incoming.read(1, self._on_pad_length)
        else:
            self._next_data()

    def _on_pad_length(self) -> None:
        padding = self.incoming.payload[0]
        self._data[1] -= 1 + padding
        self._data[2] = padding
        if self._data[1] < 0:
            raise ConnectionViolation(PROTOCOL_ERROR, "a DATA frame's padding exceeds it")
        self._next_data()

    def _next_data(self) -> None:
        stream, left, padding, _ = self._data
        if left and stream and stream == self.current:
            target = self.reader.target(left)
            self._data[3] = len(target)
            self.incoming.expect(target, self._data_landed)
        else:
            self.incoming.skip(left + padding, self._data_done)

    def _data_landed(self) -> None:
        stream, count = self._data[0], self._data[3]
        self._data[1] -= count
        try:
            message = self.reader.landed(count)
        except ResourceExhausted as error:  # the rest of the frame, and stream, dropped
            self.reader.release()
            self._data[0] = 0
            self._events.append(ev.MessageRefused(stream, str(error)))
        else:
            if message is not None:
                self._events.append(ev.MessageReceived(stream, message))
        self._next_data()

    def _data_done(self) -> None:
        _, _, flags, stream = self._frame
        self._next_frame()
        if flags & f.END_STREAM and stream == self.current:
            self._peer_ended(stream)
