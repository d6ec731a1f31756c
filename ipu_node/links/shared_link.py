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


def sending_layer(peer: str, address: str, tls: bool, limits: LinkLimits,
                  chunk_bytes: int) -> SlotSender | None:
    """The layer a link to ``peer`` at ``address`` pushes through (slots of
    ``chunk_bytes``), or None where it does not apply (chunks go inline on the socket)."""
    if not wanted(address, tls, limits.shared_memory_slots):
        return None
    return SlotSender(peer, limits.shared_memory_slots, chunk_bytes)


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
    inline. If the segment cannot be made or announced (a peer that refuses it), chunks go
    inline from then on; if a buffer cannot be announced, through slots. Thread-safe."""

    def __init__(self, peer: str, slots: int, slot_bytes: int) -> None:
        self.peer, self.slots, self.slot_bytes = peer, slots, slot_bytes
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
        messages = list(messages)
        located = self._announce_buffers(messages, deadline_seconds, socket_push)
        claimed: list[int] = []
        tickets: list[int] = []
        try:
            acknowledged = socket_push(self._through(segment, messages, located, limit,
                                                     claimed, tickets), deadline_seconds)
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

    def _announce_buffers(self, messages: list, deadline_seconds: float,
                          socket_push: Push) -> dict[int, tuple[SharedBuffer, int]]:
        """Where each large payload of ``messages`` lies in a shared buffer the peer has
        mapped (by message index), announcing the buffers it has not yet mapped and
        forgetting those freed here, in a push of their own."""
        located = {index: where for index, message in enumerate(messages)
                   if isinstance(message, ChunkParts)
                   and len(message[1]) >= MIN_SLOT_PAYLOAD_BYTES
                   and (where := REGISTRY.locate(message[1])) is not None}
        with self._announcing:
            if not self._buffers_on:
                return {}
            new = {where[0] for where in located.values() if where[0].name not in self._announced}
            gone = [name for name in self._announced if not REGISTRY.live(name)]
            if not new and not gone:
                return located
            try:
                socket_push([buffer_forgotten(name) for name in gone]
                            + [buffer_announcement(b.name, b.size) for b in new],
                            deadline_seconds)
            except (DeviceError, OSError):  # a peer that cannot map them: slots from now on
                self._buffers_on = False
                return {}
            self._announced.difference_update(gone)
            self._announced.update(buffer.name for buffer in new)
            return located

    @staticmethod
    def _through(segment: SenderSlots, messages: list,
                 located: dict[int, tuple[SharedBuffer, int]], limit: float,
                 claimed: list[int], tickets: list[int]) -> Iterator:
        """``messages`` with each large chunk's payload referred to where it lies in a
        shared buffer (a ticket holding the range in flight), or else copied into a free
        slot (waiting until ``limit`` for either), and a reference to it in its place."""
        for index, message in enumerate(messages):
            if index in located:
                (buffer, offset), length = located[index], len(message[1])
                ticket = segment.claim_ticket(buffer.number, offset, length, limit)
                tickets.append(ticket)
                yield buffer_reference(message.header, segment.name, ticket, buffer.name,
                                       offset, length)
            elif isinstance(message, ChunkParts) and len(message[1]) >= MIN_SLOT_PAYLOAD_BYTES:
                slot = segment.claim(limit)
                claimed.append(slot)
                segment.write(slot, message[1])
                yield slot_reference(message.header, segment.name, slot, len(message[1]))
            else:
                yield message


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
    """A relay's stream as :class:`Arrival` s: inline chunks go on as they came; a
    reference (only where ``slots`` is, else malformed) goes on with its payload inline."""
    for message in messages:
        header, payload, slot = parse_chunk(message)
        if slot is None:
            yield Arrival(header, payload, message, None)
            continue
        if slots is None:
            raise DeviceError("a malformed chunk arrived on a link: it refers to shared "
                              "memory, which this link does not take")
        resolved = _resolved(slots, slot)
        if resolved is not None:
            payload, release = resolved
            yield Arrival(header, payload, ChunkParts(encode_header(*header), payload), release)
