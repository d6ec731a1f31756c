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

from ipu_node.device_errors import DeviceError
from ipu_node.links.link_limits import LinkLimits
from ipu_node.links.mailbox import Deliver, Mailbox, Release, deliver_to
from ipu_node.links.shared_slots import (
    MIN_SLOT_PAYLOAD_BYTES,
    ReceiverSlots,
    SenderSlots,
    wanted,
)
from ipu_node.links.wire import ChunkParts, announcement, parse_chunk, slot_reference

Push = Callable[[Iterable, float], int]  # (messages, deadline seconds) -> bytes acknowledged


def sending_layer(peer: str, address: str, tls: bool, limits: LinkLimits,
                  chunk_bytes: int) -> SlotSender | None:
    """The layer a link to ``peer`` at ``address`` pushes through (slots of
    ``chunk_bytes``), or None where it does not apply (chunks go inline on the socket)."""
    if not wanted(address, tls, limits.shared_memory_slots):
        return None
    return SlotSender(peer, limits.shared_memory_slots, chunk_bytes)


def receiving_layer(device: str, receive: Mailbox | Deliver, address: str, tls: bool,
                    limits: LinkLimits) -> tuple[ReceiverSlots | None, Deliver]:
    """How a link server delivers a stream: the segments peers on this machine announce
    (None when the layer does not apply) and the delivery. Only into a mailbox: a relaying
    host passes chunks on as they are."""
    if not isinstance(receive, Mailbox):
        return None, receive
    if not wanted(address, tls, limits.shared_memory_slots):
        return None, deliver_to(receive)
    slots = ReceiverSlots(device)
    return slots, slot_delivery(receive, slots)


class SlotSender:
    """The sending end of one link's layer, over the socket's push: the segment is made and
    announced on the first push; large chunks' payloads go into free slots, the rest inline.
    If the segment cannot be made or announced (a relaying host, a peer that refuses), chunks
    go inline from then on. Thread-safe."""

    def __init__(self, peer: str, slots: int, slot_bytes: int) -> None:
        self.peer, self.slots, self.slot_bytes = peer, slots, slot_bytes
        self._on = True
        self._segment: SenderSlots | None = None  # made and announced on the first push
        self._retired = ""  # the last segment given up, for the receiver to forget
        self._announcing = threading.Lock()

    def push(self, messages: Iterable, deadline_seconds: float, socket_push: Push) -> int:
        """Send ``messages`` in one stream with ``socket_push``, large payloads through
        slots; return the payload bytes the peer acknowledged."""
        segment = self._made(deadline_seconds, socket_push) if self._on else None
        if segment is None:
            return socket_push(messages, deadline_seconds)
        claimed: list[int] = []
        try:
            return socket_push(self._through(segment, messages,
                                             time.monotonic() + deadline_seconds, claimed),
                               deadline_seconds)
        except BaseException:  # slots it claimed may never come back: start a new segment
            if claimed:
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

    @staticmethod
    def _through(segment: SenderSlots, messages: Iterable, limit: float,
                 claimed: list[int]) -> Iterator:
        """``messages`` with each large chunk's payload copied into a free slot (waiting
        until ``limit`` for one) and a reference to it in its place."""
        for message in messages:
            if isinstance(message, ChunkParts) and len(message[1]) >= MIN_SLOT_PAYLOAD_BYTES:
                slot = segment.claim(limit)
                claimed.append(slot)
                segment.write(slot, message[1])
                yield slot_reference(message.header, segment.name, slot, len(message[1]))
            else:
                yield message


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
                if slot.slots:  # an announcement, not a chunk
                    slots.attach(slot.segment, slot.slots, slot.slot_bytes, slot.retired)
                    continue
                payload, release = slots.resolve(slot.segment, slot.slot, slot.length)
            mailbox.file(header, payload, release)
            total += len(payload)
            count += 1
        return total, count

    return deliver
