"""HTTP/2 flow control (RFC 9113 §5.2, §6.9) of one connection, apart from frames and
sockets: what we may still send (:class:`SendWindows`, the connection's window and each
open stream's) and what the peer may still send us (:class:`ReceiveWindow`, given back in
large steps). Checked: a WINDOW_UPDATE or SETTINGS that would take a window past 2^31-1,
or DATA beyond what we gave, is a :class:`~ipu_node.links.frames.ConnectionViolation`."""

from __future__ import annotations

from ipu_node.links.frames import (
    DEFAULT_WINDOW,
    FLOW_CONTROL_ERROR,
    MAX_WINDOW,
    ConnectionViolation,
    window_increment,
)

WINDOW_TOP_UP = 64 << 20  # a receiver gives credit back once this much has arrived (bytes)


class SendWindows:
    """Bytes we may still send: on the connection, and on each stream that carries DATA
    (its window counts from the peer's SETTINGS_INITIAL_WINDOW_SIZE when it opens)."""

    def __init__(self) -> None:
        self.connection = DEFAULT_WINDOW
        self.initial = DEFAULT_WINDOW  # the peer's SETTINGS_INITIAL_WINDOW_SIZE
        self.streams: dict[int, int] = {}

    def open(self, stream: int) -> None:
        self.streams.setdefault(stream, self.initial)

    def close(self, stream: int) -> None:
        self.streams.pop(stream, None)

    def room(self, stream: int) -> int:
        """Bytes of DATA ``stream`` may carry now (0 when a window is spent)."""
        return min(self.connection, self.streams[stream])

    def spend(self, stream: int, count: int) -> None:
        self.connection -= count
        self.streams[stream] -= count

    def credit(self, stream: int, payload: bytes | bytearray) -> None:
        """A WINDOW_UPDATE for ``stream`` (0: the connection), checked; one for a closed
        stream is checked, then dropped."""
        if stream == 0:
            self.connection += window_increment(payload, self.connection)
        elif stream in self.streams:
            self.streams[stream] += window_increment(payload, self.streams[stream])
        else:
            window_increment(payload, 0)

    def set_initial(self, value: int) -> None:
        """The peer's new SETTINGS_INITIAL_WINDOW_SIZE: open streams' windows move by the
        difference (RFC 9113 §6.9.2), none past 2^31-1."""
        delta = value - self.initial
        if any(window + delta > MAX_WINDOW for window in self.streams.values()):
            raise ConnectionViolation(FLOW_CONTROL_ERROR, "SETTINGS_INITIAL_WINDOW_SIZE "
                                      "takes a stream's window past 2^31-1")
        self.initial = value
        for stream in self.streams:
            self.streams[stream] += delta


class ReceiveWindow:
    """Bytes the peer may still send us on the connection (we open it to 2^31-1 at once),
    and the credit owed back: given once :data:`WINDOW_TOP_UP` bytes have arrived, for
    the connection and for the stream in progress, each its own count. Streams' own
    receive windows are not enforced: one stream at a time, the connection's bounds it."""

    def __init__(self) -> None:
        self.window = MAX_WINDOW
        self.unacknowledged = 0  # bytes received since the connection's credit was given
        self.stream_unacknowledged = 0  # the same, for the stream in progress

    def new_stream(self) -> None:
        self.stream_unacknowledged = 0

    def received(self, count: int, on_stream: bool) -> tuple[int, int]:
        """Take ``count`` DATA bytes off the window (beyond it is a flow-control error);
        return the credit to give back now: (connection, stream), 0 for none.
        ``on_stream``: the bytes belong to the stream in progress."""
        self.window -= count
        if self.window < 0:
            raise ConnectionViolation(FLOW_CONTROL_ERROR, "DATA beyond the window we gave")
        connection = stream = 0
        self.unacknowledged += count
        if self.unacknowledged >= WINDOW_TOP_UP:
            connection, self.unacknowledged = self.unacknowledged, 0
            self.window += connection
        if on_stream:
            self.stream_unacknowledged += count
            if self.stream_unacknowledged >= WINDOW_TOP_UP:
                stream, self.stream_unacknowledged = self.stream_unacknowledged, 0
        return connection, stream
