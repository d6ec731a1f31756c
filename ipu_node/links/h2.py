"""gRPC's wire protocol (HTTP/2 without TLS, RFC 9113; gRPC's PROTOCOL-HTTP2) over one
socket, written for bulk bytes: no copies in user space, and no trust in the peer.

grpcio's Python layer copies a message five times between two processes (measured in
``benchmarks/link_stream.py``). Here a sender hands the socket its NumPy buffers as they
are (``sendmsg`` of the frame header and views), and a receiver reads each message
straight into a buffer of its own (``recv_into``): one copy into the kernel and one out,
as any socket transport needs. Headers are HPACK (the ``hpack`` package), and the
messages are the standard length-prefixed ones, so grpcio clients and servers talk to
this one (tested both ways).

This module is the socket loop only: :class:`Connection` moves bytes between a socket
and the connection's state machine (:class:`~ipu_node.links.protocol.H2Protocol`, which
checks every frame and keeps streams, settings and windows), and turns its events into
what a call needs: messages, trailers, a wait for credit, an error for a reset stream.
"""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Iterable, Iterator, Sequence

import numpy as np

from ipu_node.links import events as ev
from ipu_node.links.frames import ErrorCode, ProtocolError, StreamReset
from ipu_node.links.link_limits import ByteBudget, LinkLimits, ResourceExhausted
from ipu_node.links.protocol import H2Protocol

__all__ = ["Connection", "ProtocolError", "StreamReset"]


class Connection:
    """One HTTP/2 connection on ``sock``, driven by one thread (a server's connection
    thread, or the client that took it from its pool); the arguments but ``sock`` are
    :class:`~ipu_node.links.protocol.H2Protocol`'s. Every socket operation ends by
    :attr:`deadline` (``time.monotonic()``, a whole call's), if set."""

    def __init__(self, sock: socket.socket, limits: LinkLimits | None = None,
                 budget: ByteBudget | None = None, server: bool = False) -> None:
        self.sock = sock
        self.protocol = H2Protocol(limits, budget, server)
        self.deadline: float | None = None
        self.trailers: dict[str, str] = {}  # the header fields of the stream read last

    def _wait_limit(self) -> None:
        """Bound the next socket operation by :attr:`deadline`."""
        if self.deadline is not None:
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("deadline passed")
            self.sock.settimeout(left)

    # -- bytes -----------------------------------------------------------------------------
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

    def flush(self) -> None:
        """Send what the protocol has queued."""
        if self.protocol.pending_output:
            self.write(self.protocol.data_to_send())

    def _receive(self) -> None:
        """Read what the protocol asks for next (a frame's part: all of it is due),
        straight into place, and hand it over whole: one call of the protocol per part,
        however many reads the socket takes."""
        protocol = self.protocol
        view = protocol.receive_buffer()
        size = len(view)
        while len(view):
            self._wait_limit()
            got = self.sock.recv_into(view)
            if not got:
                raise ProtocolError("the peer closed the connection")
            view = view[got:]
        protocol.received(size)
        if protocol.pending_output:  # acknowledgements, credit, refusals
            self.flush()

    def next_event(self) -> ev.Event:
        """The protocol's next event, reading as needed. A reset of the stream in
        progress, or a GOAWAY that leaves it unprocessed, raises :class:`StreamReset`."""
        protocol = self.protocol
        while True:
            event = protocol.next_event()
            if event is None:
                self._receive()
            elif isinstance(event, ev.ResetReceived):
                raise StreamReset(f"the peer reset stream {event.stream} (HTTP/2 error code "
                                  f"{event.code})")
            elif isinstance(event, ev.GoAwayReceived) and protocol.current > event.last_stream:
                raise StreamReset(f"the peer is closing the connection (GOAWAY, code "
                                  f"{event.code}): {event.debug}")
            else:
                return event

    # -- the connection --------------------------------------------------------------------
    def handshake(self) -> None:
        """Both prefaces and SETTINGS: ours sent, the peer's taken (a client sends first)."""
        if not self.protocol.server:
            self.protocol.initiate_connection()
            self.flush()
        while not self.protocol.settings_seen:
            self._receive()

    def goaway(self, code: ErrorCode, text: str) -> None:
        """Tell the peer why the connection ends (best effort, within a second)."""
        try:
            self.deadline = time.monotonic() + 1.0
            self.protocol.close_connection(code, text)
            self.flush()
        except OSError:
            pass

    def close(self) -> None:
        self.protocol.abandon_stream()  # a message begun leaves the budget
        try:
            self.sock.close()
        except OSError:
            pass

    # -- calls -----------------------------------------------------------------------------
    def send_headers(self, stream: int, headers: list[tuple[str, str]], end: bool) -> None:
        self.protocol.send_headers(stream, headers, end)
        self.flush()

    def send_messages(self, stream: int, messages: Iterable, end: bool) -> None:
        """Send each message (bytes-like, or a tuple of bytes-like parts sent back to back)
        as a gRPC message, waiting for credit when the peer's windows are spent."""
        protocol = self.protocol
        for message in messages:
            left = protocol.send_message(stream, message if isinstance(message, tuple)
                                         else (message,))
            self.flush()
            while left:
                self._await_credit(stream)
                left = protocol.send_data(stream, left)
                self.flush()
        if end:
            protocol.end_data(stream)
            self.flush()

    def _await_credit(self, stream: int) -> None:
        """Until the peer gives credit; an answer before our request ended ends the call."""
        while True:
            event = self.next_event()
            if isinstance(event, ev.WindowUpdated):
                return
            if isinstance(event, ev.HeadersReceived) and event.stream == stream:
                self.trailers = event.headers
                raise StreamReset(f"the peer ended the call early: gRPC status "
                                  f"{self.trailers.get('grpc-status', '?')} "
                                  f"{self.trailers.get('grpc-message', '')}")

    def messages(self, stream: int) -> Iterator[np.ndarray]:
        """The gRPC messages of ``stream`` as they arrive, each in a buffer of its own,
        until the peer ends it; its header fields (a response's headers, then trailers)
        end up in :attr:`trailers`. A message beyond the limits raises
        :class:`ResourceExhausted` (the rest of the stream is dropped as it comes)."""
        self.trailers = {}
        while True:
            event = self.next_event()
            if getattr(event, "stream", None) != stream:
                continue
            if isinstance(event, ev.MessageReceived):
                yield event.message
            elif isinstance(event, ev.HeadersReceived):
                self.trailers.update(event.headers)
            elif isinstance(event, ev.StreamEnded):
                return
            elif isinstance(event, ev.MessageRefused):
                raise ResourceExhausted(event.reason)
