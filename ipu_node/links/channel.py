"""The emulated links between devices: a gRPC ``Link`` service per device, chunked streams.

A sender pushes, per superstep and peer, one client stream carrying the chunks of every
transfer it has for that peer (:data:`CHUNK_BYTES` each). The receiving device's
:class:`Mailbox` files chunks by ``(collective, phase, step, transfer)``; its executor takes
and lands them as they arrive, in transfer order, waiting with a deadline. Servers bind
to 127.0.0.1 unless told otherwise; a server on loopback also listens on a Unix socket and
gives that as its link address (same gRPC; fewer page faults than TCP loopback).

Incoming chunks go to a :class:`ipu_node.links.mailbox.Mailbox`. The service is
``ipupod.link.v1.Link`` of ``proto/``, spoken by :mod:`ipu_node.links.h2` (gRPC's
HTTP/2 protocol without grpcio's copies; grpcio clients and servers interoperate). The
server is :class:`ipu_node.links.link_server.LinkServer`; here are the client, the chunking,
and the ``grpc-h2`` transport that puts them together. Every call carries the POD's link
secret (:mod:`ipu_node.links.link_secret`). To a peer on this machine (a Unix socket, no
TLS) the chunks' bytes go through shared-memory slots, a layer of its own beside the
socket (:mod:`ipu_node.links.shared_link`), and the stream carries references to them.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterable, Iterator
from typing import NamedTuple
from urllib.parse import unquote

import numpy as np

from ipu_node.device_errors import DeviceError, LinkTimeout
from ipu_node.links import h2, link_secret
from ipu_node.links.link_limits import LinkLimits
from ipu_node.links.link_server import PING, PUSH, LinkServer
from ipu_node.links.link_tls import ALPN, LinkTLS
from ipu_node.links.shared_link import sending_layer
from ipu_node.links.wire import ChunkParts, encode_header
from ipupod_proto import link_pb2

__all__ = ["CHUNK_BYTES", "ChunkParts", "LinkClient", "LinkServer", "Transfer",
           "encode_transfers"]
CHUNK_BYTES = 4 << 20


class Transfer(NamedTuple):
    """One outgoing transfer: its index in the superstep, endpoints, and payload (a view of
    the sender's buffer, sent from there: it must not change until the push returns)."""

    number: int  # its index among the superstep's transfers
    src_ipu: int
    dst_ipu: int
    payload: np.ndarray


def encode_transfers(collective: str, phase: int, step: int,
                     transfers: Iterable[Transfer]) -> Iterator[ChunkParts]:
    """The chunks of ``transfers``, :data:`CHUNK_BYTES` each, as (serialized header fields,
    payload view) pairs: sent back to back they are one ``Chunk`` message. Nothing is
    copied."""
    for transfer in transfers:
        flat = transfer.payload.view(np.uint8).reshape(-1).data
        total = flat.nbytes
        for offset in range(0, max(total, 1), CHUNK_BYTES):
            piece = flat[offset:offset + CHUNK_BYTES]
            header = encode_header(collective, phase, step, transfer.number, transfer.src_ipu,
                                   transfer.dst_ipu, offset, total)
            yield ChunkParts(header, piece)


class LinkClient:
    """The sending end of the links from one device to one peer device: a few HTTP/2
    connections (one per stream in flight), reused while the server would keep them. Every
    call carries ``secret`` (this process's :func:`~ipu_node.links.link_secret.local_secret` if
    None). With ``tls`` connections are TLS (ALPN h2), the server's certificate checked.
    Thread-safe."""

    def __init__(self, peer: str, address: str, secret: str | None = None,
                 limits: LinkLimits | None = None, tls: LinkTLS | None = None) -> None:
        self.peer, self.address = peer, address
        self._tls = tls.client_context() if tls is not None else None
        self._server_name = tls.server_name if tls is not None else ""
        self._authorization = link_secret.bearer(secret or link_secret.local_secret())
        self.limits = limits or LinkLimits()
        self._idle: list[tuple[h2.Connection, float]] = []  # and when it was last used
        self._lock = threading.Lock()
        self._closed = False
        self._layer = sending_layer(peer, address, tls is not None, self.limits,
                                    CHUNK_BYTES)  # through shared memory to a peer here

    def ping(self, deadline_seconds: float = 10.0) -> str:
        return link_pb2.PingReply.FromString(self._call(PING, [b""], deadline_seconds)).device

    def push(self, messages: Iterable, deadline_seconds: float) -> int:
        """Send chunks (:func:`encode_transfers`, or serialized ``Chunk`` messages) in one
        stream; return the payload bytes the peer acknowledged."""
        if self._layer is None:
            return self._push(messages, deadline_seconds)
        return self._layer.push(messages, deadline_seconds, self._push)

    def _push(self, messages: Iterable, deadline_seconds: float) -> int:
        """:meth:`push` on the socket alone."""
        return link_pb2.PushReply.FromString(self._call(PUSH, messages, deadline_seconds)).bytes

    def _connect(self, limit: float) -> h2.Connection:
        if self.address.startswith("unix:"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            target: str | tuple[str, int] = self.address[len("unix:"):]
        else:
            host, _, port = self.address.rpartition(":")
            sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                                 socket.SOCK_STREAM)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            target = (host.strip("[]"), int(port))
        connection = h2.Connection(sock, self.limits)
        connection.deadline = limit
        try:
            sock.settimeout(max(0.001, limit - time.monotonic()))
            sock.connect(target)
            if self._tls is not None:
                sock = connection.sock = self._tls.wrap_socket(
                    sock, server_hostname=self._server_name)
                if sock.selected_alpn_protocol() != ALPN:
                    raise h2.ProtocolError("the server did not choose h2 (ALPN)")
            connection.handshake()
        except BaseException:
            connection.close()
            raise
        return connection

    def _call(self, path: str, messages: Iterable, deadline_seconds: float) -> bytes:
        limit = time.monotonic() + deadline_seconds
        connection = self._reuse()
        try:
            if connection is None:
                connection = self._connect(limit)
            connection.deadline = limit  # for the whole call, every wait included
            stream = connection.protocol.next_stream  # a new stream, the one in progress
            connection.send_headers(stream, [
                (":method", "POST"), (":scheme", "http"), (":path", path),
                (":authority", "localhost"), ("content-type", "application/grpc"),
                ("te", "trailers"), ("grpc-timeout", f"{max(1, int(deadline_seconds * 1000))}m"),
                self._authorization], end=False)
            connection.send_messages(stream, messages, end=True)
            reply, trailers = self._response(connection, stream)
        except BaseException as error:  # the connection is in an unknown state: drop it
            if connection is not None:
                connection.close()
            if isinstance(error, socket.timeout):
                raise LinkTimeout(f"the link to {self.peer} ({self.address}) did not take the "
                                  "data in time") from None
            if isinstance(error, (h2.ProtocolError, OSError)):
                raise DeviceError(f"the link to {self.peer} ({self.address}) failed: "
                                  f"{error}") from None
            raise
        status = trailers.get("grpc-status", "2")
        connection.deadline = None
        protocol = connection.protocol
        with self._lock:
            if self._closed or protocol.closing or protocol.next_stream > 1 << 30:
                connection.close()
            else:
                self._idle.append((connection, time.monotonic()))
        if status != "0":
            raise DeviceError(f"the link to {self.peer} ({self.address}) failed: gRPC status "
                              f"{status} {unquote(trailers.get('grpc-message', ''))}")
        return bytes(reply) if reply is not None else b""

    def _reuse(self) -> h2.Connection | None:
        """An idle connection the server has not closed for idleness yet, if any."""
        stale = []
        with self._lock:
            while self._idle:
                connection, used = self._idle.pop()
                if time.monotonic() - used < self.limits.client_reuse_seconds:
                    break
                stale.append(connection)
            else:
                connection = None
        for old in stale:
            old.close()
        return connection

    @staticmethod
    def _response(connection: h2.Connection,
                  stream: int) -> tuple[np.ndarray | None, dict[str, str]]:
        """The reply message of ``stream`` (its last), and its headers and trailers."""
        reply = None
        for message in connection.messages(stream):
            reply = message
        return reply, connection.trailers

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection, _ in idle:
            connection.close()

