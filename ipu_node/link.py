"""The emulated links between devices: a gRPC ``Link`` service per device, chunked streams.

A sender pushes, per superstep and peer, one client stream carrying the chunks of every
transfer it has for that peer (:data:`CHUNK_BYTES` each). The receiving device's
:class:`Mailbox` files chunks by ``(collective, phase, step, transfer)`` until a transfer is
whole; its executor waits on it with a deadline. Servers bind to 127.0.0.1 unless told
otherwise.
"""

from __future__ import annotations

import threading
from concurrent import futures
from typing import Iterable, Iterator, NamedTuple

import grpc
import numpy as np

from ipu_node.errors import DeviceError, LinkTimeout
from ipupod_proto import link_pb2, link_pb2_grpc

CHUNK_BYTES = 1 << 20
_MESSAGE_LIMIT = 16 * CHUNK_BYTES
_OPTIONS = [("grpc.max_send_message_length", _MESSAGE_LIMIT), ("grpc.http2.bdp_probe", 1),
            ("grpc.max_receive_message_length", _MESSAGE_LIMIT)]


class TransferKey(NamedTuple):
    collective: str
    phase: int
    step: int
    transfer: int


class Mailbox:
    """Incoming transfers, kept as their chunks until whole; thread-safe."""

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._chunks: dict[TransferKey, list[tuple[int, bytes]]] = {}
        self._received: dict[TransferKey, int] = {}
        self._complete: set[TransferKey] = set()
        self.bytes_received = 0

    def deposit(self, key: TransferKey, offset: int, total: int, data: bytes) -> None:
        with self._ready:
            self._chunks.setdefault(key, []).append((offset, data))
            self._received[key] = self._received.get(key, 0) + len(data)
            self.bytes_received += len(data)
            if self._received[key] >= total:
                self._complete.add(key)
                self._ready.notify_all()

    def take(self, key: TransferKey, deadline_s: float, sender: str) -> list[tuple[int, bytes]]:
        """The chunks ``(byte offset, data)`` of ``key``, waiting at most ``deadline_s``."""
        with self._ready:
            if not self._ready.wait_for(lambda: key in self._complete, timeout=deadline_s):
                raise LinkTimeout(
                    f"no data from {sender} for step {key.step} of phase {key.phase} within "
                    f"{deadline_s:g} s (collective {key.collective}): is {sender} alive?")
            self._complete.discard(key)
            del self._received[key]
            return self._chunks.pop(key)

    def discard(self, collective: str) -> None:
        """Drop everything of a collective (after a failure), so nothing stale is left."""
        with self._ready:
            for key in [k for k in self._chunks if k.collective == collective]:
                self._chunks.pop(key)
                self._received.pop(key, None)
                self._complete.discard(key)


class _LinkServicer(link_pb2_grpc.LinkServicer):
    def __init__(self, device: str, mailbox: Mailbox) -> None:
        self.device, self.mailbox = device, mailbox

    def Push(self, request_iterator, context):  # noqa: N802 (gRPC's name)
        total = chunks = 0
        for chunk in request_iterator:
            key = TransferKey(chunk.collective, chunk.phase, chunk.step, chunk.transfer)
            self.mailbox.deposit(key, chunk.offset, chunk.total, chunk.data)
            total += len(chunk.data)
            chunks += 1
        return link_pb2.PushReply(bytes=total, chunks=chunks)

    def Ping(self, request, context):  # noqa: N802
        return link_pb2.PingReply(device=self.device)


class LinkServer:
    """The ``Link`` gRPC service of one device, on an ephemeral port of ``host``."""

    def __init__(self, device: str, mailbox: Mailbox, host: str = "127.0.0.1") -> None:
        self.device, self.host = device, host
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=16), options=_OPTIONS)
        link_pb2_grpc.add_LinkServicer_to_server(_LinkServicer(device, mailbox), self._server)
        self.port = self._server.add_insecure_port(f"{host}:0")
        if self.port == 0:
            raise DeviceError(f"{device}: could not bind a link port on {host}")

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self) -> str:
        self._server.start()
        return self.address

    def stop(self, grace_s: float = 0.5) -> None:
        self._server.stop(grace_s).wait(grace_s + 1)


class Transfer(NamedTuple):
    """One outgoing transfer: its index in the superstep, endpoints, and payload (a NumPy
    array, a snapshot taken when the superstep began)."""

    index: int
    src_ipu: int
    dst_ipu: int
    payload: "np.ndarray"


def chunks(collective: str, phase: int, step: int,
           transfers: Iterable[Transfer]) -> Iterator[link_pb2.Chunk]:
    """The stream of chunks for ``transfers``, :data:`CHUNK_BYTES` at a time."""
    for transfer in transfers:
        flat = transfer.payload.view(np.uint8)
        total = flat.nbytes
        for offset in range(0, max(total, 1), CHUNK_BYTES):
            yield link_pb2.Chunk(collective=collective, phase=phase, step=step,
                                 transfer=transfer.index, src_ipu=transfer.src_ipu,
                                 dst_ipu=transfer.dst_ipu, offset=offset, total=total,
                                 data=flat[offset:offset + CHUNK_BYTES].tobytes())


class LinkClient:
    """The sending end of the links from one device to one peer device."""

    def __init__(self, peer: str, address: str) -> None:
        self.peer, self.address = peer, address
        self._channel = grpc.insecure_channel(address, options=_OPTIONS)
        self._stub = link_pb2_grpc.LinkStub(self._channel)

    def ping(self, deadline_s: float = 10.0) -> str:
        try:
            return self._stub.Ping(link_pb2.PingRequest(), timeout=deadline_s).device
        except grpc.RpcError as error:
            raise self._error(error) from None

    def push(self, stream: Iterator[link_pb2.Chunk], deadline_s: float) -> int:
        """Send a stream of chunks; return the bytes the peer acknowledged."""
        try:
            return self._stub.Push(stream, timeout=deadline_s).bytes
        except grpc.RpcError as error:
            raise self._error(error) from None

    def _error(self, error: grpc.RpcError) -> DeviceError:
        code = error.code() if hasattr(error, "code") else None
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return LinkTimeout(f"the link to {self.peer} ({self.address}) did not take the data "
                               "in time")
        return DeviceError(f"the link to {self.peer} ({self.address}) failed: "
                           f"{code.name if code else ''} {error.details() if hasattr(error, 'details') else error}")

    def close(self) -> None:
        self._channel.close()
