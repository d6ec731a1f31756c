"""The shared-memory layer of a link, beside its socket: for a peer on this machine a
chunk's payload goes through a slot both processes map (:mod:`ipu_node.links.shared_slots`)
and the socket's stream carries a reference to it in its place.

The layer is chosen per link, from what the link is given: its peer's address (a Unix
socket: the peer is on this machine), whether it speaks TLS, and its
:attr:`~ipu_node.links.link_limits.LinkLimits.shared_memory_slots` (0: off); see
:func:`~ipu_node.links.shared_slots.wanted`. The socket does not know about it: a sender
(:class:`SlotSender`) wraps the socket's push, a receiver (:func:`slot_delivery`) wraps
the delivery into the mailbox. The link's secret, deadlines and the bytes it meters are
those of the socket's stream.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

from ipu_node.device_errors import DeviceError
from ipu_node.links.link_limits import LinkLimits
from ipu_node.links.mailbox import Deliver, Mailbox, Release, deliver_to
from ipu_node.links.shared_buffers import REGISTRY, SharedBuffer
from ipu_node.links.shared_slots import (
    MIN_SLOT_PAYLOAD_BYTES,
    ReceiverSlots,
    SenderSlots,
    wanted,
)
from ipu_node.links.wire import (
    ChunkHeader,
    ChunkParts,
    SlotFields,
    announcement,
    buffer_announcement,
    buffer_forgotten,
    buffer_reference,
    encode_header,
    parse_chunk,
    slot_reference,
)

Push = Callable[[Iterable, float], int]  # (messages, deadline seconds) -> bytes acknowledged
Locate = Callable[[memoryview], "tuple[SharedBuffer, int] | None"]  # SlotSender.located


def sending_layer(peer: str, address: str, tls: bool, limits: LinkLimits,
                  chunk_bytes: int) -> SlotSender | None:
    """The layer a link to ``peer`` at ``address`` pushes through (slots of
    ``chunk_bytes``), or None where it does not apply (chunks go inline on the socket)."""
    if not wanted(address, tls, limits.shared_memory_slots):
        return None
    return SlotSender(peer, limits.shared_memory_slots, chunk_bytes,
                      waits=limits.shared_memory_waits)


class Arrival(NamedTuple):
    """A chunk as a relay receives it: its header, its payload (inline, or a read-only view
    of the sender's shared memory), the message that sends it onward unchanged, and the
    function that hands its shared memory back (None for an inline chunk)."""

    header: ChunkHeader
    payload: memoryview
    onward: object  # bytes, or ChunkParts
    release: Release


class Relay(NamedTuple):
    """A receiver that passes chunks on as they arrive (a relaying host): ``forward``
    takes a stream of :class:`Arrival` and returns (payload bytes, chunks); it must call
    each arrival's ``release`` once the chunk has been passed on (or given up)."""

    forward: Callable[[Iterator[Arrival]], tuple[int, int]]


def receiving_layer(device: str, receive: Mailbox | Relay | Deliver, address: str, tls: bool,
                    limits: LinkLimits) -> tuple[ReceiverSlots | None, Deliver]:
    """How a link server delivers a stream: the segments peers on this machine announce
    (None when the layer does not apply) and the delivery. Into a mailbox, or to a
    :class:`Relay`; any other function takes the chunks as they are."""
    if not isinstance(receive, (Mailbox, Relay)):
        return None, receive
    on = wanted(address, tls, limits.shared_memory_slots)
    slots = ReceiverSlots(device) if on else None
    if isinstance(receive, Relay):
        return slots, lambda messages: receive.forward(_arrivals(messages, slots))
    if slots is None:
        return None, deliver_to(receive)
    return slots, slot_delivery(receive, slots)


class SlotSender:
    """The sending end of one link's layer, over the socket's push: the segment is made and
    announced on the first push; large chunks' payloads are referred to where they lie in a
    shared buffer (:mod:`ipu_node.links.shared_buffers`), else go into free slots; the rest
    inline. A push streams: each chunk is sent as it comes, its buffer announced (in a push
    of its own) the first time. With ``waits`` False (a relay) a chunk that finds no free
    ticket or slot goes inline rather than wait for the receiver. If the segment cannot be
    made or announced (a peer that refuses it), chunks go inline from then on; if a buffer
    cannot be announced, through slots. Thread-safe."""

    def __init__(self, peer: str, slots: int, slot_bytes: int, waits: bool = True) -> None:
        self.peer, self.slots, self.slot_bytes, self.waits = peer, slots, slot_bytes, waits
        self._on = True
        self._segment: SenderSlots | None = None  # made and announced on the first push
        self._retired = ""  # the last segment given up, for the receiver to forget
        self._announcing = threading.Lock()
        self._buffers_on = True
        self._announced: set[str] = set()  # shared buffers the peer has mapped

    def push(self, messages: Iterable, deadline_seconds: float, socket_push: Push) -> int:
        """Send ``messages`` in one stream with ``socket_push``, large payloads by reference
        or through slots; return the payload bytes the peer acknowledged once it has landed
        every payload it reads from this device's buffers."""
        segment = self._made(deadline_seconds, socket_push) if self._on else None
        if segment is None:
            return socket_push(messages, deadline_seconds)
        limit = time.monotonic() + deadline_seconds
        self._forget_freed(deadline_seconds, socket_push)
        claimed: list[int] = []
        tickets: list[int] = []
        try:
            acknowledged = socket_push(self._through(
                segment, messages, lambda payload: self.located(payload, deadline_seconds,
                                                                socket_push),
                limit, claimed, tickets), deadline_seconds)
            segment.landed(tickets, limit)  # until then the ranges must not change
            return acknowledged
        except BaseException:  # slots it claimed may never come back: start a new segment
            if claimed or tickets:
                with self._announcing:
                    if self._segment is segment:
                        self._segment, self._retired = None, segment.name
            raise

    def _made(self, deadline_seconds: float, socket_push: Push) -> SenderSlots | None:
        """This link's segment, made and announced to the peer if it is not yet; None (and
        chunks inline from now on) if that fails."""
        with self._announcing:
            if self._segment is not None or not self._on:
                return self._segment
            segment = SenderSlots(self.peer, self.slots, self.slot_bytes, self._retired)
            try:
                segment.create()
                socket_push([announcement(segment.name, segment.slots, segment.slot_bytes,
                                          segment.retired)], deadline_seconds)
            except (DeviceError, OSError):
                self._on = False
                return None
            finally:
                segment.unlink()  # the peer has mapped it (or never will)
            self._segment = segment
            return segment

    def _forget_freed(self, deadline_seconds: float, socket_push: Push) -> None:
        """Tell the peer to unmap the buffers it mapped that were freed here since."""
        with self._announcing:
            gone = [name for name in self._announced if not REGISTRY.live(name)]
            if not gone:
                return
            self._announced.difference_update(gone)
            try:
                socket_push([buffer_forgotten(name) for name in gone], deadline_seconds)
            except (DeviceError, OSError):  # the peer drops them when this process ends
                pass

    def located(self, payload: memoryview, deadline_seconds: float,
                socket_push: Push) -> tuple[SharedBuffer, int] | None:
        """Where ``payload`` lies in a shared buffer the peer has mapped (announced now, in
        a push of its own, if it has not), or None (not in one, or the peer cannot map it:
        slots from now on)."""
        where = REGISTRY.locate(payload)
        if where is None:
            return None
        with self._announcing:
            if not self._buffers_on:
                return None
            if where[0].name in self._announced:
                return where
            try:
                socket_push([buffer_announcement(where[0].name, where[0].size)],
                            deadline_seconds)
            except (DeviceError, OSError):
                self._buffers_on = False
                return None
            self._announced.add(where[0].name)
            return where

    def _through(self, segment: SenderSlots, messages: Iterable, located: Locate,
                 limit: float, claimed: list[int], tickets: list[int]) -> Iterator:
        """``messages`` as they come, each large chunk's payload referred to where it lies
        in a shared buffer (a ticket holding the range in flight), or else copied into a
        free slot (waiting until ``limit`` for either, if this sender waits), and a
        reference to it in its place; inline if neither."""
        for message in messages:
            if not (isinstance(message, ChunkParts) and len(message[1]) >= MIN_SLOT_PAYLOAD_BYTES):
                yield message
                continue
            header, payload = message.header, message[1]
            where = located(payload)
            if where is not None:
                (buffer, offset), length = where, len(payload)
                ticket = (segment.claim_ticket(buffer.number, offset, length, limit) if self.waits
                          else segment.try_claim_ticket(buffer.number, offset, length))
                if ticket is not None:
                    tickets.append(ticket)
                    yield buffer_reference(header, segment.name, ticket, buffer.name, offset,
                                           length)
                    continue
            slot = segment.claim(limit) if self.waits else segment.try_claim()
            if slot is None:
                yield message
                continue
            claimed.append(slot)
            segment.write(slot, payload)
            yield slot_reference(header, segment.name, slot, len(payload))


def _resolved(slots: ReceiverSlots, slot: SlotFields) -> tuple[memoryview, Release] | None:
    """A reference's payload (a view of shared memory) and the function that hands it back;
    None for an announcement (of a segment, or news of a buffer), which is applied here."""
    if slot.slots:  # an announcement, not a chunk
        slots.attach(slot.segment, slot.slots, slot.slot_bytes, slot.retired)
        return None
    if slot.buffer and (slot.buffer_bytes or slot.forget):  # news of a buffer
        if slot.forget:
            slots.buffers.forget(slot.buffer)
        else:
            slots.buffers.attach(slot.buffer, slot.buffer_bytes)
        return None
    if slot.buffer:
        return slots.resolve_buffer(slot.segment, slot.slot, slot.buffer, slot.buffer_offset,
                                    slot.length)
    return slots.resolve(slot.segment, slot.slot, slot.length)


def slot_delivery(mailbox: Mailbox, slots: ReceiverSlots) -> Deliver:
    """File every chunk of a stream in ``mailbox``: inline ones as they are, references
    resolved to a view of their slot (handed back once landed), announcements of segments
    mapped."""

    def deliver(messages: Iterable) -> tuple[int, int]:
        total = count = 0
        for message in messages:
            header, payload, slot = parse_chunk(message)
            release: Release = None
            if slot is not None:
                resolved = _resolved(slots, slot)
                if resolved is None:
                    continue
                payload, release = resolved
            mailbox.file(header, payload, release)
            total += len(payload)
            count += 1
        return total, count

    return deliver


def _arrivals(messages: Iterable, slots: ReceiverSlots | None) -> Iterator[Arrival]:
    """A relay's stream as :class:`Arrival` s: small inline chunks go on as they came; a
    reference (only where ``slots`` is, else malformed) or a large chunk goes on as its
    header and payload, which the next hop's link may put in a slot of its own."""
    for message in messages:
        header, payload, slot = parse_chunk(message)
        if slot is None:  # a large one is passed on as parts, for the next hop's slots
            onward = (ChunkParts(encode_header(*header), payload)
                      if len(payload) >= MIN_SLOT_PAYLOAD_BYTES else message)
            yield Arrival(header, payload, onward, None)
            continue
        if slots is None:
            raise DeviceError("a malformed chunk arrived on a link: it refers to shared "
                              "memory, which this link does not take")
        resolved = _resolved(slots, slot)
        if resolved is not None:
            payload, release = resolved
            yield Arrival(header, payload, ChunkParts(encode_header(*header), payload), release)
