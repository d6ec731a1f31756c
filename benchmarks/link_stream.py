"""What one emulated link costs: bytes pushed from one process to another over the ``Link``
gRPC service, against grpcio and a plain Unix socket moving the same bytes, in the same run.

- ``link``: chunks of a NumPy buffer (:func:`ipu_node.links.channel.encode_transfers`)
  pushed by a :class:`ipu_node.links.channel.LinkClient` to a
  :class:`ipu_node.links.channel.LinkServer` in another process, which lands each in a NumPy
  buffer, as a device does (gRPC over :mod:`ipu_node.links.h2`).
- ``link_shared``: the same link to a peer that files chunks in a mailbox, as a device
  does, so the chunks' bytes go through shared-memory slots
  (:mod:`ipu_node.links.shared_slots`: eight 4 MiB slots, the ``Chunk`` on the stream a
  reference); the receiver lands each from its slot, which then goes back to the sender.
- ``grpcio``: the same chunks and landing through grpcio's own client and server (what the
  links used before 2026-11-21).
- ``unix_socket``: the floor for moving bytes between two processes here: the sender
  writes its buffer to a Unix socket, the receiver reads straight into its buffer (one
  copy into the kernel, one out, the way gloo's TCP transport moves data).
- ``shared_memory``: the floor if processes on one machine moved the bytes through shared
  memory (what issue 32 allows links to do): the sender copies each 4 MiB chunk into a
  free slot of a segment both map (four slots), tells the receiver which one on a Unix
  socket, and the receiver lands it from there and hands the slot back. One copy in each
  process, none in the kernel.

Each row gives wall GB/s and the CPU seconds each side spends per GiB.

    python benchmarks/link_stream.py               # 1 GiB, 3 repeats, best of each
    python benchmarks/link_stream.py --gib 2 --json
"""

from __future__ import annotations

import argparse
import functools
import json
import mmap
import multiprocessing
import os
import socket
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GIB = 1 << 30
SLOT_BYTES, SLOTS = 4 << 20, 4  # the shared-memory row's chunk and ring
_SLOT_NOTE = struct.Struct("<QQQ")  # slot, offset in the target, length


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _grpc_receiver(size: int, secret: str, ready: Connection) -> None:
    """A link server that lands every chunk in one buffer of ``size`` bytes; calls must
    carry ``secret``, as in a POD."""
    from ipu_node.control import keep_freed_memory
    from ipu_node.links.channel import LinkServer
    from ipu_node.links.wire import decode_chunk

    keep_freed_memory()
    target = np.zeros(size, dtype=np.uint8)

    def land(messages: Iterable[bytes]) -> tuple[int, int]:
        """Land a stream's chunks; (payload bytes, chunks), as the link server wants."""
        total = count = 0
        for message in messages:
            header, payload = decode_chunk(message)
            target[header.offset:header.offset + len(payload)] = np.frombuffer(payload, np.uint8)
            total, count = total + len(payload), count + 1
        return total, count

    server = LinkServer("receiver", land, secret=secret)
    server.start()
    ready.send(server.link_address)
    ready.recv()  # until told to stop
    server.stop()


def _mailbox_receiver(size: int, secret: str, ready: Connection) -> None:
    """A device's link server (a mailbox: chunks may come through shared memory) and a
    thread that lands every push's chunks in one buffer of ``size`` bytes, as the executor
    does (each push is the next ``step``)."""
    import threading

    from ipu_node.control import keep_freed_memory
    from ipu_node.links.channel import LinkServer
    from ipu_node.links.mailbox import Mailbox, TransferKey

    keep_freed_memory()
    target = np.zeros(size, dtype=np.uint8)
    mailbox = Mailbox()

    def land() -> None:
        for step in range(1 << 30):
            for at, data in mailbox.chunks(TransferKey("bench", 0, step, 0), 3600, "sender"):
                target[at:at + len(data)] = np.frombuffer(data, np.uint8)

    server = LinkServer("receiver", mailbox, secret=secret)
    server.start()
    threading.Thread(target=land, daemon=True).start()
    ready.send(server.link_address)
    ready.recv()  # until told to stop
    server.stop()


def _grpcio_receiver(size: int, ready: Connection) -> None:
    """grpcio's server, landing every chunk in one buffer of ``size`` bytes."""
    from concurrent import futures

    import grpc

    from ipu_node.control import keep_freed_memory
    from ipu_node.links.wire import decode_chunk
    from ipupod_proto import link_pb2

    keep_freed_memory()
    target = np.zeros(size, dtype=np.uint8)

    def push(messages: Iterable[bytes], context: grpc.ServicerContext) -> link_pb2.PushReply:
        """The ``Push`` RPC: land every chunk, answer with the payload bytes."""
        total = 0
        for message in messages:
            header, payload = decode_chunk(message)
            target[header.offset:header.offset + len(payload)] = np.frombuffer(payload, np.uint8)
            total += len(payload)
        return link_pb2.PushReply(bytes=total)

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=_GRPCIO_OPTIONS)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(
        "ipupod.link.v1.Link", {"Push": grpc.stream_unary_rpc_method_handler(
            push, response_serializer=link_pb2.PushReply.SerializeToString)}),))
    path = os.path.join(tempfile.gettempdir(), f"ipupod-bench-grpcio-{os.getpid()}.sock")
    server.add_insecure_port(f"unix:{path}")
    server.start()
    ready.send(f"unix:{path}")
    ready.recv()
    server.stop(0)
    Path(path).unlink(missing_ok=True)


_GRPCIO_OPTIONS = [("grpc.max_send_message_length", 64 << 20),
                   ("grpc.max_receive_message_length", 64 << 20)]


def _socket_receiver(size: int, path: str, ready: Connection) -> None:
    """A Unix socket server at ``path`` that reads each stream straight into one buffer."""
    target = np.zeros(size, dtype=np.uint8).data  # a memoryview of the buffer

    def receive(connection: socket.socket) -> None:
        done = 0
        while done < size:
            got = connection.recv_into(target[done:])
            if not got:
                break
            done += got
        connection.sendall(b"k")

    _serve_unix(path, ready, receive)


def _serve_unix(path: str, ready: Connection,
                handle: Callable[[socket.socket], None]) -> None:
    """Listen at ``path``, say so on ``ready``, and ``handle`` each connection (blocking)
    until ``ready`` is told to stop."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(path)
        listener.listen()
        listener.settimeout(0.2)
        ready.send(path)
        while not ready.poll():  # until told to stop
            try:
                connection, _ = listener.accept()
            except TimeoutError:
                continue
            with connection:
                connection.settimeout(None)
                handle(connection)


def _shared_memory_receiver(size: int, segment: str, path: str, ready: Connection) -> None:
    """A Unix socket server at ``path``: for each note (slot, offset, length) it lands that
    slot of the file ``segment`` (mapped) in one buffer, then hands the slot back."""
    target = np.zeros(size, dtype=np.uint8)
    with open(segment, "r+b") as file, mmap.mmap(file.fileno(), SLOTS * SLOT_BYTES) as ring:
        _serve_unix(path, ready, functools.partial(
            _land_slots, slots=np.frombuffer(ring, dtype=np.uint8), target=target))
        # the partial (and its view of the map) is gone here, so the map can close


def _land_slots(connection: socket.socket, slots: np.ndarray, target: np.ndarray) -> None:
    """Land every noted slot until the sender closes the connection."""
    note = bytearray(_SLOT_NOTE.size)
    while connection.recv_into(note, _SLOT_NOTE.size, socket.MSG_WAITALL) == len(note):
        slot, offset, length = _SLOT_NOTE.unpack(note)
        start = slot * SLOT_BYTES
        target[offset:offset + length] = slots[start:start + length]
        connection.sendall(bytes([slot]))


def _measure(send: Callable[[], None], receiver_pid: int, size: int,
             repeats: int) -> dict[str, Any]:
    """Time ``send`` (``size`` bytes) ``repeats`` times after a warm-up: the best run's wall
    seconds, GB/s and CPU seconds per GiB of each side, and every run under ``runs``."""
    send()  # warm-up: connections open, buffers touched
    runs: list[dict[str, float]] = []
    for _ in range(repeats):
        receiver_before, sender_before = _cpu_seconds(receiver_pid), _cpu_seconds(os.getpid())
        started = time.perf_counter()
        send()
        wall = time.perf_counter() - started
        runs.append({"wall_seconds": wall, "gb_per_second": size / wall / 1e9,
                     "sender_cpu_seconds_per_gib": (_cpu_seconds(os.getpid()) - sender_before)
                     * GIB / size,
                     "receiver_cpu_seconds_per_gib": (_cpu_seconds(receiver_pid)
                                                      - receiver_before) * GIB / size})
    best = min(runs, key=lambda run: run["wall_seconds"])
    return {**best, "runs": runs}


@contextmanager
def _receiver(target: Callable[..., None], *args: object) -> Iterator[tuple[int, str]]:
    """Run ``target(*args, pipe)`` in a fresh process; yield (its pid, the first thing it
    sends on the pipe: its address); tell it to stop afterwards."""
    ours, theirs = multiprocessing.Pipe()
    process = multiprocessing.get_context("spawn").Process(target=target, args=(*args, theirs),
                                                           daemon=True)
    process.start()
    try:
        if process.pid is None:  # set by start()
            raise RuntimeError("the receiver process did not start")
        yield process.pid, ours.recv()
    finally:
        ours.send("stop")
        process.join(5)
        if process.is_alive():
            process.kill()


def link(size: int, repeats: int,
         receiver: Callable[..., None] = _grpc_receiver) -> dict[str, Any]:
    """``size`` bytes over this project's link (LinkClient to LinkServer, in ``receiver``'s
    process): :func:`_measure`."""
    import itertools

    from ipu_node.links.channel import LinkClient, Transfer, encode_transfers
    from ipu_node.links.link_secret import new_secret

    source = np.ones(size // 4, dtype=np.float32)
    secret = new_secret()
    steps = itertools.count()
    with _receiver(receiver, size, secret) as (pid, address):
        client = LinkClient("receiver", address, secret)

        def send() -> None:
            messages = encode_transfers("bench", 0, next(steps), [Transfer(0, 0, 1, source)])
            if client.push(messages, deadline_seconds=60) != size:
                raise RuntimeError("the link server did not take every byte")

        try:
            return _measure(send, pid, size, repeats)
        finally:
            client.close()


def grpcio_link(size: int, repeats: int) -> dict[str, Any]:
    """``size`` bytes over grpcio's client and server: :func:`_measure`."""
    import grpc

    from ipu_node.links.channel import Transfer, encode_transfers
    from ipupod_proto import link_pb2

    source = np.ones(size // 4, dtype=np.float32)
    with _receiver(_grpcio_receiver, size) as (pid, address):
        channel = grpc.insecure_channel(address, options=_GRPCIO_OPTIONS)
        push = channel.stream_unary("/ipupod.link.v1.Link/Push",
                                    response_deserializer=link_pb2.PushReply.FromString)

        def send() -> None:
            chunks = encode_transfers("bench", 0, 0, [Transfer(0, 0, 1, source)])
            messages = (b"".join(parts) for parts in chunks)  # grpcio takes bytes: a copy
            if push(messages, timeout=60).bytes != size:
                raise RuntimeError("the grpcio server did not take every byte")

        try:
            return _measure(send, pid, size, repeats)
        finally:
            channel.close()


def unix_socket(size: int, repeats: int) -> dict[str, Any]:
    """``size`` bytes over a plain Unix socket, the floor: :func:`_measure`."""
    path = os.path.join(tempfile.gettempdir(), f"ipupod-bench-{os.getpid()}.sock")
    source = np.ones(size, dtype=np.uint8).data  # a memoryview of the buffer
    try:
        with _receiver(_socket_receiver, size, path) as (pid, _):

            def send() -> None:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                    connection.connect(path)
                    connection.sendall(source)
                    if connection.recv(1) != b"k":
                        raise RuntimeError("the socket peer did not take every byte")

            return _measure(send, pid, size, repeats)
    finally:
        Path(path).unlink(missing_ok=True)


def shared_memory(size: int, repeats: int) -> dict[str, Any]:
    """``size`` bytes through a ring of shared-memory slots, notes on a Unix socket:
    :func:`_measure`."""
    folder = "/dev/shm" if os.path.isdir("/dev/shm") else None
    handle, segment = tempfile.mkstemp(prefix="ipupod-bench-", dir=folder)
    path = os.path.join(tempfile.gettempdir(), f"ipupod-bench-shm-{os.getpid()}.sock")
    source = np.ones(size, dtype=np.uint8)
    try:
        os.ftruncate(handle, SLOTS * SLOT_BYTES)
        # the map is unmapped when the last view of it goes (closing it would fail first)
        slots = np.frombuffer(mmap.mmap(handle, SLOTS * SLOT_BYTES), dtype=np.uint8)
        with _receiver(_shared_memory_receiver, size, segment, path) as (pid, _):

            def send() -> None:
                with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
                    connection.connect(path)
                    _fill_slots(connection, source, slots)

            return _measure(send, pid, size, repeats)
    finally:
        os.close(handle)
        Path(segment).unlink(missing_ok=True)
        Path(path).unlink(missing_ok=True)


def _fill_slots(connection: socket.socket, source: np.ndarray, slots: np.ndarray) -> None:
    """Copy ``source`` chunk by chunk into free slots, noting each to the receiver; return
    once every slot is back."""
    free = list(range(SLOTS))
    for offset in range(0, len(source), SLOT_BYTES):
        if not free:
            free += _slots_back(connection)
        slot, length = free.pop(), min(SLOT_BYTES, len(source) - offset)
        start = slot * SLOT_BYTES
        slots[start:start + length] = source[offset:offset + length]
        connection.sendall(_SLOT_NOTE.pack(slot, offset, length))
    while len(free) < SLOTS:
        free += _slots_back(connection)


def _slots_back(connection: socket.socket) -> bytes:
    """The slots the receiver has handed back (at least one)."""
    back = connection.recv(SLOTS)
    if not back:
        raise RuntimeError("the shared-memory peer did not take every byte")
    return back


def main() -> None:
    """Command line: measure the five ways and print a table or JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=1.0, help="bytes per run, in GiB")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if not 0 < args.gib <= 8 or args.repeats < 1:
        parser.error("--gib must be in (0, 8] and --repeats at least 1")
    size = int(args.gib * GIB) // 4 * 4
    rows = {"link": link(size, args.repeats),
            "link_shared": link(size, args.repeats, _mailbox_receiver),
            "grpcio": grpcio_link(size, args.repeats),
            "unix_socket": unix_socket(size, args.repeats),
            "shared_memory": shared_memory(size, args.repeats)}
    report = {"bytes": size, **rows}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"{size / GIB:g} GiB from one process to another, best of {args.repeats}:")
    print(f"  {'':<13} {'wall s':>7} {'GB/s':>6} {'sender CPU s/GiB':>17} "
          f"{'receiver CPU s/GiB':>19}")
    for name in rows:
        row = rows[name]
        print(f"  {name:<13} {row['wall_seconds']:7.3f} {row['gb_per_second']:6.2f} "
              f"{row['sender_cpu_seconds_per_gib']:17.2f} "
              f"{row['receiver_cpu_seconds_per_gib']:19.2f}")


if __name__ == "__main__":
    main()
