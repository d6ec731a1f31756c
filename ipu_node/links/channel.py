"""The emulated links between devices: a gRPC ``Link`` service per device, chunked streams.

A sender pushes, per superstep and peer, one client stream carrying the chunks of every
transfer it has for that peer (:data:`CHUNK_BYTES` each). The receiving device's
:class:`Mailbox` files chunks by ``(collective, phase, step, transfer)``; its executor takes
and lands them as they arrive, in transfer order, waiting with a deadline. Servers bind
to 127.0.0.1 unless told otherwise; a server on loopback also listens on a Unix socket and
gives that as its link address (same gRPC; fewer page faults than TCP loopback).

Incoming chunks go to a :class:`ipu_node.links.mailbox.Mailbox`. The service is
``ipupod.link.v1.Link`` of ``proto/``, spoken by :mod:`ipu_node.links.h2` (gRPC's
HTTP/2 protocol without grpcio's copies; grpcio clients and servers interoperate).
"""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import NamedTuple
from urllib.parse import unquote

import numpy as np

from ipu_node.errors import DeviceError, LinkTimeout
from ipu_node.links import h2
from ipu_node.links.mailbox import Mailbox, deliver_to
from ipu_node.links.transport import DEFAULT_TRANSPORT, Transport, register
from ipu_node.links.wire import encode_header, payload_prefix
from ipupod_proto import link_pb2

CHUNK_BYTES = 4 << 20
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


SERVICE = "ipupod.link.v1.Link"
PUSH, PING = f"/{SERVICE}/Push", f"/{SERVICE}/Ping"


def _sweep_stale_sockets() -> None:
    """Remove the Unix sockets of link servers whose process is gone (killed devices
    cannot clean up after themselves)."""
    folder = Path(tempfile.gettempdir())
    for path in folder.glob("ipupod-link-*-*.sock"):
        try:
            os.kill(int(path.name.split("-")[2]), 0)
        except ProcessLookupError:
            path.unlink(missing_ok=True)
        except (ValueError, PermissionError, OSError):
            continue  # not ours to judge


def _grpc_message(text: str) -> str:
    """``grpc-message`` is percent-encoded outside printable ASCII."""
    return "".join(c if " " <= c <= "~" and c != "%" else "".join(f"%{b:02X}" for b in c.encode())
                   for c in text)


class LinkServer:
    """The ``Link`` gRPC service of one device, on an ephemeral port of ``host``.
    ``receive`` is a :class:`Mailbox` (cards, machines) or a function that takes a stream
    of chunk messages and returns (payload bytes, chunks) (relaying hosts). Each
    connection is served by a thread of its own, one stream at a time."""

    def __init__(self, device: str, receive: Mailbox | Callable,
                 host: str = "127.0.0.1") -> None:
        self.device, self.host = device, host
        self._deliver = deliver_to(receive) if isinstance(receive, Mailbox) else receive
        self._listeners: list[socket.socket] = []
        self._connections: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._stopped = False
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        tcp = socket.socket(family, socket.SOCK_STREAM)
        tcp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            tcp.bind((host, 0))
        except OSError as error:
            tcp.close()
            raise DeviceError(f"{device}: could not bind a link port on {host}: {error}") from None
        self.port = tcp.getsockname()[1]
        self._listeners.append(tcp)
        self.unix_path = None
        if host in _LOOPBACK and hasattr(socket, "AF_UNIX"):  # only this machine: cheaper
            _sweep_stale_sockets()
            path = os.path.join(tempfile.gettempdir(),
                                f"ipupod-link-{os.getpid()}-{self.port}.sock")
            unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                unix.bind(path)
                self._listeners.append(unix)
                self.unix_path = path
            except OSError:  # no Unix sockets here: TCP it is
                unix.close()

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def link_address(self) -> str:
        """Where peers connect: the Unix socket of a loopback server, else :attr:`address`."""
        return f"unix:{self.unix_path}" if self.unix_path else self.address

    def start(self) -> str:
        for listener in self._listeners:
            listener.listen(64)
            threading.Thread(target=self._accept, args=(listener,), daemon=True,
                             name=f"{self.device}-link-accept").start()
        return self.address

    def stop(self) -> None:
        """Stop listening and close every connection (streams in flight fail)."""
        self._stopped = True
        with self._lock:
            sockets = [*self._listeners, *self._connections]
            self._connections.clear()
        for sock in sockets:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        if self.unix_path:
            Path(self.unix_path).unlink(missing_ok=True)

    def _accept(self, listener: socket.socket) -> None:
        while not self._stopped:
            try:
                sock, _ = listener.accept()
            except OSError:
                return  # closed by stop()
            if sock.family != getattr(socket, "AF_UNIX", None):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                if self._stopped:
                    sock.close()
                    return
                self._connections.add(sock)
            threading.Thread(target=self._serve, args=(sock,), daemon=True,
                             name=f"{self.device}-link").start()

    def _serve(self, sock: socket.socket) -> None:
        connection = h2.Connection(sock)
        try:
            if connection.read(len(h2.PREFACE)) != h2.PREFACE:
                return  # not HTTP/2: nothing to say to it
            connection.send_settings(server=True)
            while True:
                length, kind, flags, stream = connection.read_header()
                if kind != h2.HEADERS:
                    connection.handle_control(length, kind, flags, stream)
                    continue
                headers = connection.read_headers(length, flags, stream)
                connection.current = stream
                messages = iter(()) if flags & h2.END_STREAM else connection.messages(stream)
                try:
                    self._call(connection, stream, headers.get(":path", ""), messages)
                except h2.StreamReset:
                    pass  # the client gave up on this stream: ready for the next
                connection.current = 0  # what comes about it from now on is old news
        except (h2.ProtocolError, OSError):
            pass  # the peer went away or broke the protocol: drop the connection
        finally:
            with self._lock:
                self._connections.discard(sock)
            connection.close()

    def _call(self, connection: h2.Connection, stream: int, path: str, messages) -> None:
        """Run one RPC and answer it; a failing handler becomes a gRPC status."""
        status, detail, reply = 0, "", b""
        try:
            if path == PUSH:
                total, count = self._deliver(messages)
                reply = link_pb2.PushReply(bytes=total, chunks=count).SerializeToString()
            elif path == PING:
                reply = link_pb2.PingReply(device=self.device).SerializeToString()
            else:
                status, detail = 12, f"{path} is not a method of {SERVICE}"  # UNIMPLEMENTED
        except (h2.ProtocolError, OSError):
            raise
        except Exception as error:  # noqa: BLE001 - the handler's failure: tell the client
            status, detail = 13, f"{self.device}: {error}"  # INTERNAL
        for _ in messages:  # whatever the handler left unread
            pass
        response = [(":status", "200"), ("content-type", "application/grpc")]
        if status:
            connection.send_headers(stream, [*response, ("grpc-status", str(status)),
                                             ("grpc-message", _grpc_message(detail))], end=True)
            return
        connection.send_headers(stream, response, end=False)
        connection.send_messages(stream, [reply], end=False)
        connection.send_headers(stream, [("grpc-status", "0")], end=True)


class Transfer(NamedTuple):
    """One outgoing transfer: its index in the superstep, endpoints, and payload (a view of
    the sender's buffer, sent from there: it must not change until the push returns)."""

    number: int  # its index among the superstep's transfers
    src_ipu: int
    dst_ipu: int
    payload: np.ndarray


def encode_transfers(collective: str, phase: int, step: int,
                     transfers: Iterable[Transfer]) -> Iterator[tuple[bytes, memoryview]]:
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
            yield payload_prefix(header, len(piece)), piece


class LinkClient:
    """The sending end of the links from one device to one peer device: a few HTTP/2
    connections (one per stream in flight), reused. Thread-safe."""

    def __init__(self, peer: str, address: str) -> None:
        self.peer, self.address = peer, address
        self._idle: list[h2.Connection] = []
        self._lock = threading.Lock()
        self._closed = False

    def ping(self, deadline_s: float = 10.0) -> str:
        return link_pb2.PingReply.FromString(self._call(PING, [b""], deadline_s)).device

    def push(self, messages: Iterable, deadline_s: float) -> int:
        """Send chunks (:func:`encode_transfers`, or serialized ``Chunk`` messages) in one
        stream; return the payload bytes the peer acknowledged."""
        return link_pb2.PushReply.FromString(self._call(PUSH, messages, deadline_s)).bytes

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
        connection = h2.Connection(sock)
        connection.deadline = limit
        try:
            sock.settimeout(max(0.001, limit - time.monotonic()))
            sock.connect(target)
            connection.write([h2.PREFACE])
            connection.send_settings(server=False)
            while not connection.settings_seen:
                length, kind, flags, stream = connection.read_header()
                connection.handle_control(length, kind, flags, stream)
        except BaseException:
            connection.close()
            raise
        return connection

    def _call(self, path: str, messages: Iterable, deadline_s: float) -> bytes:
        limit = time.monotonic() + deadline_s
        with self._lock:
            connection = self._idle.pop() if self._idle else None
        try:
            if connection is None:
                connection = self._connect(limit)
            connection.deadline = limit  # for the whole call, every wait included
            stream = connection.current = connection.next_stream
            connection.next_stream += 2
            connection.send_headers(stream, [
                (":method", "POST"), (":scheme", "http"), (":path", path),
                (":authority", "localhost"), ("content-type", "application/grpc"),
                ("te", "trailers"), ("grpc-timeout", f"{max(1, int(deadline_s * 1000))}m")],
                end=False)
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
        connection.current, connection.deadline = 0, None
        with self._lock:
            if self._closed or connection.closing or connection.next_stream > 1 << 30:
                connection.close()
            else:
                self._idle.append(connection)
        if status != "0":
            raise DeviceError(f"the link to {self.peer} ({self.address}) failed: gRPC status "
                              f"{status} {unquote(trailers.get('grpc-message', ''))}")
        return bytes(reply) if reply is not None else b""

    @staticmethod
    def _response(connection: h2.Connection,
                  stream: int) -> tuple[np.ndarray | None, dict[str, str]]:
        """The reply message and trailers of ``stream``."""
        reply, headers = None, {}
        while True:
            length, kind, flags, on = connection.read_header()
            if on == stream and kind == h2.HEADERS:
                headers.update(connection.read_headers(length, flags, on))
                if flags & h2.END_STREAM:
                    return reply, headers
            elif on == stream and kind == h2.DATA:
                for message in connection.messages(stream, first=(length, flags)):
                    reply = message
                headers.update(connection.trailers)
                return reply, headers
            else:
                connection.handle_control(length, kind, flags, on)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()


register(Transport(DEFAULT_TRANSPORT, LinkServer, LinkClient))
