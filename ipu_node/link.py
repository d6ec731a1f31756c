"""The emulated links between devices: a gRPC ``Link`` service per device, chunked streams.

A sender pushes, per superstep and peer, one client stream carrying the chunks of every
transfer it has for that peer (:data:`CHUNK_BYTES` each). The receiving device's
:class:`Mailbox` files chunks by ``(collective, phase, step, transfer)``; its executor takes
and lands them as they arrive, in transfer order, waiting with a deadline. Servers bind
to 127.0.0.1 unless told otherwise; a server on loopback also listens on a Unix socket and
gives that as its link address (same gRPC; measured: fewer page faults than TCP loopback).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections import OrderedDict
from pathlib import Path
from concurrent import futures
from typing import Callable, Iterable, Iterator, NamedTuple

import grpc
import numpy as np

from ipu_node.errors import DeviceError, LinkTimeout
from ipu_node.wire import decode_chunk, encode_chunk, encode_header
from ipupod_proto import link_pb2, link_pb2_grpc

CHUNK_BYTES = 4 << 20
_MESSAGE_LIMIT = 16 * CHUNK_BYTES
_ABORTED_KEPT = 1024  # aborted collectives remembered, so their late chunks are dropped
_OPTIONS = [("grpc.max_send_message_length", _MESSAGE_LIMIT), ("grpc.http2.bdp_probe", 1),
            ("grpc.max_receive_message_length", _MESSAGE_LIMIT)]
_LOOPBACK = ("127.0.0.1", "localhost", "::1")


class TransferKey(NamedTuple):
    collective: str
    phase: int
    step: int
    transfer: int


class Mailbox:
    """Incoming transfers, handed out chunk by chunk as they arrive; thread-safe. A
    collective can be aborted (a peer died): its waits end at once with the reason, its
    chunks are dropped, and late ones are ignored."""

    def __init__(self) -> None:
        self._ready = threading.Condition()
        self._chunks: dict[TransferKey, list[tuple[int, bytes]]] = {}
        self._received: dict[TransferKey, int] = {}
        self._total: dict[TransferKey, int] = {}
        self._aborted: OrderedDict[str, str] = OrderedDict()  # collective -> reason
        self.bytes_received = 0

    def deposit(self, key: TransferKey, offset: int, total: int, data: bytes) -> None:
        with self._ready:
            if key.collective in self._aborted:
                return
            self._chunks.setdefault(key, []).append((offset, data))
            self._received[key] = self._received.get(key, 0) + len(data)
            self._total[key] = total
            self.bytes_received += len(data)
            self._ready.notify_all()

    def chunks(self, key: TransferKey, deadline_s: float,
               sender: str) -> Iterator[tuple[int, bytes]]:
        """The chunks ``(byte offset, data)`` of ``key`` as they arrive, until the transfer
        is whole, waiting at most ``deadline_s`` in all."""
        limit = time.monotonic() + deadline_s
        while True:
            with self._ready:
                arrived = self._ready.wait_for(
                    lambda: self._chunks.get(key) or key.collective in self._aborted,
                    timeout=max(0.0, limit - time.monotonic()))
                if key.collective in self._aborted:
                    raise DeviceError(f"collective {key.collective} aborted: "
                                      f"{self._aborted[key.collective]}")
                if not arrived:
                    raise LinkTimeout(
                        f"no data from {sender} for step {key.step} of phase {key.phase} "
                        f"within {deadline_s:g} s (collective {key.collective}): is {sender} "
                        "alive?")
                batch = self._chunks[key]
                self._chunks[key] = []
                whole = self._received[key] >= self._total[key]
                if whole:
                    del self._chunks[key], self._received[key], self._total[key]
            yield from batch
            if whole:
                return

    def take(self, key: TransferKey, deadline_s: float, sender: str) -> list[tuple[int, bytes]]:
        """The chunks ``(byte offset, data)`` of ``key``, waiting at most ``deadline_s``."""
        return list(self.chunks(key, deadline_s, sender))

    def discard(self, collective: str) -> None:
        """Drop everything of a collective (after a failure), so nothing stale is left."""
        with self._ready:
            for key in [k for k in self._received if k.collective == collective]:
                self._chunks.pop(key, None)
                self._received.pop(key, None)
                self._total.pop(key, None)

    def abort(self, collective: str, reason: str) -> None:
        """End every wait of ``collective`` now with ``reason``; drop its chunks."""
        with self._ready:
            self._aborted[collective] = reason
            while len(self._aborted) > _ABORTED_KEPT:
                self._aborted.popitem(last=False)
            self._ready.notify_all()
        self.discard(collective)


SERVICE = "ipupod.link.v1.Link"


def deliver_to(mailbox: Mailbox) -> Callable[[Iterable[bytes]], tuple[int, int]]:
    """What a card or machine does with a stream: file every chunk in its mailbox."""

    def deliver(messages: Iterable[bytes]) -> tuple[int, int]:
        total = count = 0
        for message in messages:
            header, payload = decode_chunk(message)
            key = TransferKey(header.collective, header.phase, header.step, header.transfer)
            mailbox.deposit(key, header.offset, header.total, payload)
            total += len(payload)
            count += 1
        return total, count

    return deliver


def _handlers(device: str, deliver) -> grpc.GenericRpcHandler:
    """``Link`` with ``Push`` taking raw message bytes (decoded by :mod:`ipu_node.wire`)."""

    def push(messages, context):
        total, count = deliver(messages)
        return link_pb2.PushReply(bytes=total, chunks=count)

    def ping(request, context):
        return link_pb2.PingReply(device=device)

    return grpc.method_handlers_generic_handler(SERVICE, {
        "Push": grpc.stream_unary_rpc_method_handler(
            push, response_serializer=link_pb2.PushReply.SerializeToString),
        "Ping": grpc.unary_unary_rpc_method_handler(
            ping, request_deserializer=link_pb2.PingRequest.FromString,
            response_serializer=link_pb2.PingReply.SerializeToString),
    })


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


class LinkServer:
    """The ``Link`` gRPC service of one device, on an ephemeral port of ``host``.
    ``receive`` is a :class:`Mailbox` (cards, machines) or a function that takes a stream
    of chunk messages and returns (payload bytes, chunks) (relaying hosts)."""

    def __init__(self, device: str, receive: "Mailbox | Callable", host: str = "127.0.0.1",
                 workers: int = 16) -> None:
        self.device, self.host = device, host
        deliver = deliver_to(receive) if isinstance(receive, Mailbox) else receive
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=workers),
                                   options=_OPTIONS)
        self._server.add_generic_rpc_handlers((_handlers(device, deliver),))
        self.port = self._server.add_insecure_port(f"{host}:0")
        if self.port == 0:
            raise DeviceError(f"{device}: could not bind a link port on {host}")
        self.unix_path = None
        if host in _LOOPBACK:  # only this machine can connect: a Unix socket costs less
            _sweep_stale_sockets()
            self.unix_path = os.path.join(tempfile.gettempdir(),
                                          f"ipupod-link-{os.getpid()}-{self.port}.sock")
            try:
                if not self._server.add_insecure_port(f"unix:{self.unix_path}"):
                    self.unix_path = None
            except RuntimeError:  # no Unix sockets here: TCP it is
                self.unix_path = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def link_address(self) -> str:
        """Where peers connect: the Unix socket of a loopback server, else :attr:`address`."""
        return f"unix:{self.unix_path}" if self.unix_path else self.address

    def start(self) -> str:
        self._server.start()
        return self.address

    def stop(self, grace_s: float = 0.5) -> None:
        self._server.stop(grace_s).wait(grace_s + 1)
        if self.unix_path:
            try:
                os.unlink(self.unix_path)
            except OSError:
                pass


class Transfer(NamedTuple):
    """One outgoing transfer: its index in the superstep, endpoints, and payload (a view of
    the sender's buffer; :func:`encode_transfers` copies it into the messages)."""

    index: int
    src_ipu: int
    dst_ipu: int
    payload: "np.ndarray"


def encode_transfers(collective: str, phase: int, step: int,
                     transfers: Iterable[Transfer]) -> Iterator[bytes]:
    """The serialized chunks of ``transfers``, :data:`CHUNK_BYTES` each. Encoding copies
    the payloads: run it to the end (``list(...)``) and it is the superstep's snapshot."""
    for transfer in transfers:
        flat = memoryview(transfer.payload.view(np.uint8))
        total = flat.nbytes
        for offset in range(0, max(total, 1), CHUNK_BYTES):
            header = encode_header(collective, phase, step, transfer.index, transfer.src_ipu,
                                   transfer.dst_ipu, offset, total)
            yield encode_chunk(header, flat[offset:offset + CHUNK_BYTES])


class LinkClient:
    """The sending end of the links from one device to one peer device."""

    def __init__(self, peer: str, address: str) -> None:
        self.peer, self.address = peer, address
        self._channel = grpc.insecure_channel(address, options=_OPTIONS)
        self._stub = link_pb2_grpc.LinkStub(self._channel)
        self._push = self._channel.stream_unary(
            f"/{SERVICE}/Push", response_deserializer=link_pb2.PushReply.FromString)

    def ping(self, deadline_s: float = 10.0) -> str:
        try:
            return self._stub.Ping(link_pb2.PingRequest(), timeout=deadline_s).device
        except grpc.RpcError as error:
            raise self._error(error) from None

    def push(self, messages: Iterable[bytes], deadline_s: float) -> int:
        """Send serialized chunks (:func:`encode_transfers`) in one stream; return the
        payload bytes the peer acknowledged."""
        try:
            return self._push(iter(messages), timeout=deadline_s).bytes
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


class PeerLinks:
    """The sending ends of one device's links: a :class:`LinkClient` per peer device,
    opened on first use and reopened when the peer's address changes (it restarted).
    Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[int, LinkClient] = {}
        self.names: list[str] = []
        self.addresses: list[str] = []

    def wire(self, names: list[str], addresses: list[str]) -> None:
        """Every device's name and link address; links to moved peers are closed."""
        with self._lock:
            for device, client in list(self._clients.items()):
                if addresses[device] != client.address:
                    client.close()
                    del self._clients[device]
            self.names, self.addresses = names, addresses

    def to(self, device: int) -> LinkClient:
        with self._lock:
            if device not in self._clients:
                self._clients[device] = LinkClient(self.names[device], self.addresses[device])
            return self._clients[device]

    def close(self) -> None:
        with self._lock:
            for client in self._clients.values():
                client.close()
            self._clients.clear()
