"""A link whose client has announced a shared-memory segment to its server, for the tests
of the shared-memory layer: the client then pushes whatever messages a test gives it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from ipu_node.links.channel import LinkClient, LinkServer
from ipu_node.links.link_limits import LinkLimits
from ipu_node.links.mailbox import Mailbox
from ipu_node.links.shared_slots import SenderSlots
from ipu_node.links.wire import announcement

SLOTS, SLOT_BYTES = 2, 1 << 16


@contextmanager
def announced_segment() -> Iterator[tuple[LinkClient, SenderSlots, Mailbox]]:
    """A server on loopback with shared memory, a client that sends messages as given (its
    own shared-memory layer off), and a segment of ``SLOTS`` slots it announced."""
    mailbox = Mailbox()
    server = LinkServer("receiver", mailbox)
    server.start()
    client = LinkClient("receiver", server.link_address, limits=LinkLimits(shared_memory_slots=0))
    try:
        slots = SenderSlots("receiver", SLOTS, SLOT_BYTES)
        slots.create()
        client.push([announcement(slots.name, SLOTS, SLOT_BYTES)], 10)
        slots.unlink()
        yield client, slots, mailbox
    finally:
        client.close()
        server.stop()
