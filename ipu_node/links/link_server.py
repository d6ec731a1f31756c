"""The receiving end of a device's links: the ``ipupod.link.v1.Link`` gRPC service on a
port of its own (and a Unix socket on loopback), one thread per connection.

A connection must say HTTP/2's preface and SETTINGS within the handshake timeout, then
carry the POD's link secret on every call (:mod:`ipu_node.links.link_secret`); it is closed when
it breaks the protocol (GOAWAY with RFC 9113's code), goes quiet past the idle timeout, or
comes beyond the cap on connections. Limits: :class:`~ipu_node.links.link_limits.LinkLimits`.
"""

from __future__ import annotations

import os
import secrets
import socket
import tempfile
import threading
import time
from pathlib import Path

from ipu_node.device_errors import DeviceError
from ipu_node.links import h2, link_secret
from ipu_node.links.events import HeadersReceived
from ipu_node.links.frames import (
    ConnectionViolation,
    ErrorCode,
    FrameType,
    frame_header,
    goaway_payload,
)
from ipu_node.links.link_limits import RESOURCE_EXHAUSTED, ByteBudget, LinkLimits, ResourceExhausted
from ipu_node.links.link_tls import ALPN, LinkTLS
from ipu_node.links.mailbox import Deliver, Mailbox
from ipu_node.links.shared_link import Relay, receiving_layer
from ipupod_proto import link_pb2

SERVICE = "ipupod.link.v1.Link"
PUSH, PING = f"/{SERVICE}/Push", f"/{SERVICE}/Ping"
LOOPBACK = ("127.0.0.1", "localhost", "::1")
_DRAIN_BYTES = 1 << 20  # read (and dropped) before closing, so our last words arrive


def sweep_stale_sockets(folder: Path) -> None:
    """Remove the Unix sockets of link servers whose process is gone (killed devices
    cannot clean up after themselves); files we may not remove are left alone."""
    for path in folder.glob("ipupod-link-*-*.sock"):
        try:
            os.kill(int(path.name.split("-")[2]), 0)
        except ProcessLookupError:
            try:
                path.unlink(missing_ok=True)
            except OSError:
                continue  # another user's: not ours to remove
        except (ValueError, OSError):
            continue  # not ours to judge


def grpc_message(text: str) -> str:
    """``grpc-message`` is percent-encoded outside printable ASCII."""
    return "".join(c if " " <= c <= "~" and c != "%" else "".join(f"%{b:02X}" for b in c.encode())
                   for c in text)


def _unix_listener(port: int) -> tuple[socket.socket, str] | None:
    """A Unix socket for a loopback server: at its usual path, or at a random one if a file
    there cannot be replaced; None where Unix sockets do not work (TCP it is)."""
    folder = Path(tempfile.gettempdir())
    sweep_stale_sockets(folder)
    names = [f"ipupod-link-{os.getpid()}-{port}.sock",
             f"ipupod-link-{os.getpid()}-{port}-{secrets.token_hex(4)}.sock"]
    for name in names:
        unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            unix.bind(str(folder / name))
            return unix, str(folder / name)
        except OSError:  # taken, or no Unix sockets here
            unix.close()
    return None


def _drain_and_close(sock: socket.socket) -> None:
    """Close after our last frames: stop sending, read what the peer had in flight (a
    bounded amount, briefly), so the close does not reset what we said."""
    try:
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(0.2)
        left = _DRAIN_BYTES
        while left > 0:
            got = sock.recv(min(left, 1 << 16))
            if not got:
                break
            left -= len(got)
    except OSError:
        pass
    sock.close()


class LinkServer:
    """The ``Link`` gRPC service of one device, on an ephemeral port of ``host``.
    ``receive`` is a :class:`Mailbox` (cards, machines), a
    :class:`~ipu_node.links.shared_link.Relay` (relaying hosts), or a function that takes a
    stream of chunk messages and returns (payload bytes, chunks). Calls must
    carry ``secret`` (this process's :func:`~ipu_node.links.link_secret.local_secret` if
    None). With ``tls`` connections are TLS (ALPN h2) and there is no Unix socket; with
    ``local_socket`` there is one even when ``host`` is not loopback (peers on this
    machine use it, others the TCP port)."""

    def __init__(self, device: str, receive: Mailbox | Relay | Deliver, host: str = "127.0.0.1",
                 secret: str | None = None, limits: LinkLimits | None = None,
                 tls: LinkTLS | None = None, local_socket: bool = False) -> None:
        self.device, self.host = device, host
        self._tls = tls.server_context() if tls is not None else None
        self._secret = secret or link_secret.local_secret()
        self.limits = limits or LinkLimits()
        self._budget = ByteBudget(self.limits.max_pending_message_bytes)
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
        self.unix_path: str | None = None
        if (host in LOOPBACK or local_socket) and hasattr(socket, "AF_UNIX") and tls is None:
            unix = _unix_listener(self.port)
            if unix is not None:
                self._listeners.append(unix[0])
                self.unix_path = unix[1]
        # peers on this machine may send chunks through shared memory
        self.slots, self._deliver = receiving_layer(device, receive, self.link_address,
                                                    tls is not None, self.limits)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def link_address(self) -> str:
        """Where peers connect: the Unix socket of a loopback server, else :attr:`address`."""
        return f"unix:{self.unix_path}" if self.unix_path else self.address

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._connections)

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
        if self.slots is not None:
            self.slots.close()
        if self.unix_path:
            try:
                Path(self.unix_path).unlink(missing_ok=True)
            except OSError:
                pass

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
                full = len(self._connections) >= self.limits.max_connections
                if not full:
                    self._connections.add(sock)
            if full:
                self._turn_away(sock)
                continue
            threading.Thread(target=self._serve, args=(sock,), daemon=True,
                             name=f"{self.device}-link").start()

    def _turn_away(self, sock: socket.socket) -> None:
        """A connection beyond the cap: SETTINGS, GOAWAY (ENHANCE_YOUR_CALM), close. Never
        blocks the accepting thread on the peer."""
        debug = f"{self.device}: more than {self.limits.max_connections} connections".encode()
        payload = goaway_payload(0, ErrorCode.ENHANCE_YOUR_CALM, debug)
        try:
            sock.setblocking(False)
            sock.send(frame_header(0, FrameType.SETTINGS, 0, 0)
                      + frame_header(len(payload), FrameType.GOAWAY, 0, 0) + payload)
            sock.recv(1 << 16)  # what the peer sent already, so the close sends no reset
        except OSError:
            pass
        sock.close()

    def _secure(self, sock: socket.socket) -> socket.socket:
        """``sock`` in TLS (ALPN h2), within the handshake timeout, if the server has TLS."""
        if self._tls is None:
            return sock
        sock.settimeout(self.limits.handshake_timeout_seconds)
        secure = self._tls.wrap_socket(sock, server_side=True)
        with self._lock:
            self._connections.discard(sock)
            self._connections.add(secure)
        if secure.selected_alpn_protocol() != ALPN:
            raise h2.ProtocolError("the peer did not choose h2 (ALPN)")
        return secure

    def _serve(self, sock: socket.socket) -> None:
        connection = h2.Connection(sock, self.limits, self._budget, server=True)
        polite = False
        try:
            sock = connection.sock = self._secure(sock)
            self._handshake(connection)
            polite = self._calls(connection)
        except ConnectionViolation as error:
            connection.goaway(error.code, f"{self.device}: {error}")
            polite = True
        except (h2.ProtocolError, OSError):
            pass  # the peer went away, or went quiet: drop the connection
        finally:
            connection.protocol.abandon_stream()  # a message begun leaves the budget
            with self._lock:
                self._connections.discard(sock)
                self._connections.discard(connection.sock)
            if polite:
                _drain_and_close(sock)
            else:
                connection.close()

    def _handshake(self, connection: h2.Connection) -> None:
        """The preface and the client's SETTINGS, within the handshake timeout in all."""
        connection.deadline = time.monotonic() + self.limits.handshake_timeout_seconds
        connection.handshake()
        connection.deadline = None
        connection.sock.settimeout(self.limits.idle_timeout_seconds)

    def _calls(self, connection: h2.Connection) -> bool:
        """Serve calls one after another; True once a call was refused for want of the
        secret (the connection is to be closed politely)."""
        while True:
            event = connection.next_event()
            if not (isinstance(event, HeadersReceived)
                    and event.stream == connection.protocol.current):
                continue  # a request opens a stream; the rest is news of old ones
            stream, headers = event.stream, event.headers
            if not link_secret.authorized(headers, self._secret):
                self._answer(connection, stream, link_secret.UNAUTHENTICATED,
                             f"{self.device}: this link needs the POD's link secret")
                connection.goaway(ErrorCode.NO_ERROR, "unauthenticated")
                return True
            messages = iter(()) if event.end_stream else connection.messages(stream)
            try:
                self._call(connection, stream, headers.get(":path", ""), messages)
            except h2.StreamReset:
                pass  # the client gave up on this stream: ready for the next
            connection.protocol.abandon_stream()  # what comes about it now is old news

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
        except ResourceExhausted as error:
            status, detail = RESOURCE_EXHAUSTED, f"{self.device}: {error}"
        except Exception as error:  # noqa: BLE001 - the handler's failure: tell the client
            status, detail = 13, f"{self.device}: {error}"  # INTERNAL
        for _ in messages:  # whatever the handler left unread
            pass
        self._answer(connection, stream, status, detail, reply)

    @staticmethod
    def _answer(connection: h2.Connection, stream: int, status: int, detail: str,
                reply: bytes = b"") -> None:
        response = [(":status", "200"), ("content-type", "application/grpc")]
        if status:
            connection.send_headers(stream, [*response, ("grpc-status", str(status)),
                                             ("grpc-message", grpc_message(detail))], end=True)
            return
        connection.send_headers(stream, response, end=False)
        connection.send_messages(stream, [reply], end=False)
        connection.send_headers(stream, [("grpc-status", "0")], end=True)
