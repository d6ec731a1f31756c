"""A raw HTTP/2 peer for the link tests: it writes whatever frames it is told to at a real
LinkServer on 127.0.0.1 and reads back what the server says, frame by frame."""

from __future__ import annotations

import socket
import struct
import time

import hpack

from ipu_node.links import link_secret
from ipu_node.links.frames import (
    DATA,
    END_HEADERS,
    END_STREAM,
    GOAWAY,
    HEADERS,
    PREFACE,
    SETTINGS,
    frame_header,
)
from ipu_node.links.link_server import PING, PUSH

CALL = [(":method", "POST"), (":scheme", "http"), (":authority", "localhost"),
        ("content-type", "application/grpc"), ("te", "trailers")]


class Peer:
    """One connection to ``port``; with ``handshake`` it says the preface and SETTINGS."""

    def __init__(self, port: int, handshake: bool = True, timeout_seconds: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout_seconds)
        self.encoder, self.decoder = hpack.Encoder(), hpack.Decoder()
        if handshake:
            self.sock.sendall(PREFACE + frame_header(0, SETTINGS, 0, 0))

    def send(self, kind: int, flags: int, stream: int, payload: bytes = b"",
             length: int | None = None) -> None:
        """A frame; ``length`` declares another length than the payload's."""
        header = frame_header(len(payload) if length is None else length, kind, flags, stream)
        try:
            self.sock.sendall(header + payload)
        except OSError:
            pass  # the server closed on us: what it said is still to be read

    def headers(self, stream: int, path: str = PING, secret: str | None = None,
                end: bool = False) -> None:
        """A call's HEADERS, carrying ``secret`` (this process's link secret by default)."""
        fields = [*CALL, (":path", path)]
        if secret != "":
            fields.append(link_secret.bearer(secret or link_secret.local_secret()))
        self.send(HEADERS, END_HEADERS | (END_STREAM if end else 0), stream,
                  self.encoder.encode(fields))

    def frame(self) -> tuple[int, int, int, bytes] | None:
        """The server's next frame (type, flags, stream, payload); None once it closed."""
        head = self._exactly(9)
        if head is None:
            return None
        length = int.from_bytes(head[:3], "big")
        payload = self._exactly(length) if length else b""
        if payload is None:
            return None
        return head[3], head[4], int.from_bytes(head[5:9], "big") & 0x7FFFFFFF, payload

    def _exactly(self, count: int) -> bytes | None:
        data = b""
        while len(data) < count:
            try:
                got = self.sock.recv(count - len(data))
            except (TimeoutError, ConnectionResetError):
                return None
            if not got:
                return None
            data += got
        return data

    def goaway_code(self) -> int | None:
        """The error code of the server's GOAWAY (frames before it are skipped), or None
        if it closed or went quiet without one."""
        while (frame := self.frame()) is not None:
            kind, _, _, payload = frame
            if kind == GOAWAY:
                return struct.unpack(">II", payload[:8])[1]
        return None

    def closed(self, within_seconds: float = 10.0) -> bool:
        """Whether the server closes the connection within ``within_seconds``."""
        self.sock.settimeout(within_seconds)
        limit = time.monotonic() + within_seconds
        while time.monotonic() < limit:
            try:
                if not self.sock.recv(1 << 16):
                    return True
            except ConnectionResetError:
                return True
            except TimeoutError:
                return False
        return False

    def grpc_status(self, stream: int) -> str | None:
        """The ``grpc-status`` the server answers ``stream`` with."""
        while (frame := self.frame()) is not None:
            kind, flags, on, payload = frame
            if kind == HEADERS and on == stream:
                fields = dict(self.decoder.decode(payload))
                if "grpc-status" in fields:
                    return fields["grpc-status"]
        return None

    def close(self) -> None:
        self.sock.close()


def push_data(peer: Peer, stream: int, message: bytes, declared: int | None = None,
              end: bool = True) -> None:
    """A Push call whose one message is ``message`` (its prefix declaring ``declared``)."""
    peer.headers(stream, PUSH)
    prefix = struct.pack(">BI", 0, len(message) if declared is None else declared)
    peer.send(DATA, END_STREAM if end else 0, stream, prefix + message)




def answers(server, device: str = "victim") -> bool:
    """Whether ``server`` still answers a legitimate Ping and Push (this process's secret)."""
    import numpy as np

    from ipu_node.links.channel import LinkClient, Transfer, encode_transfers

    client = LinkClient(device, server.address)
    try:
        payload = np.arange(1000, dtype=np.float32)
        pushed = client.push(encode_transfers("ok", 0, 0, [Transfer(0, 0, 1, payload)]), 10)
        return client.ping() == device and pushed == payload.nbytes
    finally:
        client.close()


def wait_until(condition, within_seconds: float = 10.0) -> bool:
    """Whether ``condition()`` holds within ``within_seconds`` (a generous deadline, polled)."""
    limit = time.monotonic() + within_seconds
    while not condition():
        if time.monotonic() > limit:
            return False
        time.sleep(0.02)
    return True


def unread_bytes(server_port: int, peer: Peer) -> int | None:
    """Bytes ``peer`` sent that the server on ``server_port`` has not read yet (its socket's
    receive queue, from /proc/net/tcp), or None if the connection is not listed."""
    peer_port = peer.sock.getsockname()[1]
    with open("/proc/net/tcp") as table:
        lines = table.read().splitlines()[1:]
    for line in lines:
        fields = line.split()
        local, remote, queues = fields[1], fields[2], fields[4]
        if (int(local.split(":")[1], 16) == server_port
                and int(remote.split(":")[1], 16) == peer_port):
            return int(queues.split(":")[1], 16)
    return None
