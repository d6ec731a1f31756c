"""A device's incoming transfers: chunks filed by (collective, phase, step, transfer) as
the link server receives them, handed to the executor as they arrive, with deadlines and
aborts. What it holds is bounded: in bytes (beyond, a push is refused with
RESOURCE_EXHAUSTED), and in time (chunks of a collective nobody waits on are dropped
after :attr:`~ipu_node.links.link_limits.LinkLimits.stale_chunks_seconds`, and counted).
A chunk in a shared-memory slot (:mod:`ipu_node.links.shared_link`) comes with the
function that hands the slot back: called once the chunk has landed (the consumer asked
for the next one) or was dropped, never before."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from ipu_node.device_errors import DeviceError, LinkTimeout
from ipu_node.links.link_limits import LinkLimits, ResourceExhausted
from ipu_node.links.wire import ChunkHeader, decode_chunk

_ABORTED_KEPT = 1024  # aborted collectives remembered, so their late chunks are dropped


Chunk = bytes | memoryview  # a chunk's payload, as it arrived
Release = Callable[[], None] | None  # hands a chunk's shared-memory slot back
Held = tuple[int, Chunk, Release]  # (offset, payload, release)
Deliver = Callable[[Iterable], tuple[int, int]]  # a stream of chunks -> (bytes, chunks) filed


class TransferKey(NamedTuple):
    collective: str
    phase: int
    step: int
    transfer: int


class Mailbox:
    """Incoming transfers, handed out chunk by chunk as they arrive; thread-safe. A
    collective can be aborted (a peer died): its waits end at once with the reason, its
    chunks are dropped, and late ones are ignored. ``clock`` gives seconds (monotonic)."""

    def __init__(self, limits: LinkLimits | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.limits, self._clock = limits or LinkLimits(), clock
        self._ready = threading.Condition()
        self._chunks: dict[TransferKey, list[Held]] = {}
        self._received: dict[TransferKey, int] = {}
        self._total: dict[TransferKey, int] = {}
        self._aborted: OrderedDict[str, str] = OrderedDict()  # collective -> reason
        self.bytes_received = 0
        self.buffered_bytes = 0  # held here, not yet taken
        self.dropped_chunks = 0  # of collectives nobody waited on in time
        self._touched: dict[str, float] = {}  # collective -> when last deposited or awaited
        self._waiting: dict[str, int] = {}  # collective -> waits under way
        self._last_sweep = clock()

    def deposit(self, key: TransferKey, offset: int, total: int,
                data: Chunk, release: Release = None) -> None:
        """File a chunk (``release`` hands its slot back once landed or dropped);
        :class:`ResourceExhausted` if the mailbox is full (the slot is not kept)."""
        with self._ready:
            if key.collective in self._aborted:
                if release is not None:
                    release()
                return
            now = self._clock()
            self._sweep(now)
            if self.buffered_bytes + len(data) > self.limits.max_buffered_bytes:
                raise ResourceExhausted(
                    f"the mailbox holds {self.buffered_bytes:,} bytes not yet taken; a chunk of "
                    f"{len(data):,} more would pass its limit of "
                    f"{self.limits.max_buffered_bytes:,}")
            self._touched.setdefault(key.collective, now)
            self.buffered_bytes += len(data)
            self._chunks.setdefault(key, []).append((offset, data, release))
            self._received[key] = self._received.get(key, 0) + len(data)
            self._total[key] = total
            self.bytes_received += len(data)
            self._ready.notify_all()

    def file(self, header: ChunkHeader, data: Chunk, release: Release = None) -> None:
        """:meth:`deposit` a chunk that arrived with ``header``; its slot is handed back if
        it cannot be filed."""
        key = TransferKey(header.collective, header.phase, header.step, header.transfer)
        try:
            self.deposit(key, header.offset, header.total, data, release)
        except BaseException:
            if release is not None:
                release()
            raise

    def chunks(self, key: TransferKey, deadline_seconds: float,
               sender: str) -> Iterator[tuple[int, Chunk]]:
        """The chunks ``(byte offset, data)`` of ``key`` as they arrive, until the transfer
        is whole, waiting at most ``deadline_seconds`` in all. Each ``data`` may be a view
        of a shared-memory slot: valid until the next chunk is asked for (it is handed back
        then), so land it before."""
        for offset, data, release in self._held(key, deadline_seconds, sender):
            try:
                yield offset, data
            finally:
                if release is not None:
                    release()

    def _held(self, key: TransferKey, deadline_seconds: float, sender: str) -> Iterator[Held]:
        """:meth:`chunks` with each one's release (slots of chunks not handed out when the
        consumer stops are released here)."""
        limit = time.monotonic() + deadline_seconds
        while True:
            with self._ready:
                self._waiting[key.collective] = self._waiting.get(key.collective, 0) + 1
                try:
                    arrived = self._ready.wait_for(
                        lambda: self._chunks.get(key) or key.collective in self._aborted,
                        timeout=max(0.0, limit - time.monotonic()))
                finally:
                    self._waiting[key.collective] -= 1
                    if not self._waiting[key.collective]:
                        del self._waiting[key.collective]
                    self._touched[key.collective] = self._clock()
                if key.collective in self._aborted:
                    raise DeviceError(f"collective {key.collective} aborted: "
                                      f"{self._aborted[key.collective]}")
                if not arrived:
                    raise LinkTimeout(
                        f"no data from {sender} for step {key.step} of phase {key.phase} "
                        f"within {deadline_seconds:g} s (collective {key.collective}): is {sender} "
                        "alive?")
                batch = self._chunks[key]
                self._chunks[key] = []
                self.buffered_bytes -= sum(len(data) for _, data, _ in batch)
                whole = self._received[key] >= self._total[key]
                if whole:
                    del self._chunks[key], self._received[key], self._total[key]
            for index, held in enumerate(batch):
                try:
                    yield held
                except GeneratorExit:
                    _release_all(batch[index + 1:])
                    raise
            if whole:
                return

    def take(self, key: TransferKey, deadline_seconds: float,
             sender: str) -> list[tuple[int, Chunk]]:
        """The chunks ``(byte offset, data)`` of ``key``, waiting at most ``deadline_seconds``
        (chunks from shared-memory slots are copied out and their slots handed back)."""
        taken: list[tuple[int, Chunk]] = []
        for offset, data, release in self._held(key, deadline_seconds, sender):
            if release is not None:
                data = bytes(data)
                release()
            taken.append((offset, data))
        return taken

    def discard(self, collective: str) -> None:
        """Drop everything of a collective (after a failure), so nothing stale is left."""
        with self._ready:
            self._drop([k for k in self._received if k.collective == collective])
            self._touched.pop(collective, None)

    def sweep(self) -> None:
        """Drop the chunks of collectives nobody has waited on for ``stale_chunks_seconds``."""
        with self._ready:
            self._last_sweep = -float("inf")
            self._sweep(self._clock())

    def _sweep(self, now: float) -> None:
        """:meth:`sweep`, at most every quarter of ``stale_chunks_seconds`` (lock held)."""
        stale_seconds = self.limits.stale_chunks_seconds
        if now - self._last_sweep < stale_seconds / 4:
            return
        self._last_sweep = now
        stale = {name for name, touched in self._touched.items()
                 if now - touched > stale_seconds and name not in self._waiting}
        if stale:
            keys = [k for k in self._received if k.collective in stale]
            self.dropped_chunks += sum(len(self._chunks.get(k, ())) for k in keys)
            self._drop(keys)
            for name in stale:
                del self._touched[name]

    def _drop(self, keys: list[TransferKey]) -> None:
        """Forget ``keys`` and their chunks (lock held)."""
        for key in keys:
            dropped = self._chunks.pop(key, [])
            self.buffered_bytes -= sum(len(data) for _, data, _ in dropped)
            _release_all(dropped)
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


def _release_all(held: list[Held]) -> None:
    for _, _, release in held:
        if release is not None:
            release()


def deliver_to(mailbox: Mailbox) -> Deliver:
    """What a card or machine does with a stream: file every chunk in its mailbox (a chunk
    that refers to shared memory is malformed here: see
    :func:`~ipu_node.links.shared_link.slot_delivery` for links that take it)."""

    def deliver(messages: Iterable) -> tuple[int, int]:
        total = count = 0
        for message in messages:
            header, payload = decode_chunk(message)
            mailbox.file(header, payload)
            total += len(payload)
            count += 1
        return total, count

    return deliver
