"""Shared-memory slots for a link between two devices on one machine.

Between actors connected by a Unix socket (and without TLS) a chunk's bytes need not go
through the kernel: the sender copies them into a free slot of a segment both processes
map, and the ``Chunk`` on the same gRPC stream carries a reference (segment, slot,
length) in place of the payload. The link, its secret, deadlines and metering are the
same; only the copy into and out of the socket is saved.

- **Made by the sender**, one segment per link (per peer it pushes to), on its first push:
  a file in ``/dev/shm`` named ``ipupod-slots-<pid>-<peer>-<random>``, mode 0600, of a
  state page and ``slots`` slots of ``slot_bytes``. The sender knows first that it needs
  one, and owns what it writes, so no reply path is needed to hand out names.
- **Announced** in a ``Chunk`` of its own (fields 11, 14, 15 and optionally 16, the
  segment it replaces) on a push of its own; the receiver checks the name, owner, mode and
  size, maps it and unlinks it at once, so a mapping outlives any crash but no file does.
  The sender unlinks it too once the announcement returned (whatever the answer); a file
  whose creating process is gone is removed by the next device that makes or takes one.
- **Handed back by the receiver**: a slot's state byte is CLAIMED from the sender's copy
  until the receiver has landed the chunk (the last read of its view), then FREE. The
  sender waits for a free slot with the push's deadline (back-pressure, bounded memory).
- **Checked by the receiver**: every reference must name a segment announced to it, a
  slot in range marked CLAIMED and not already held, and a length within the slot;
  anything else is a malformed chunk (the push fails, the server carries on).
"""

from __future__ import annotations

import mmap
import os
import re
import secrets
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from ipu_node.device_errors import DeviceError, LinkTimeout
from ipu_node.links.link_limits import MAX_SHARED_MEMORY_SLOTS
from ipu_node.links.shared_buffers import PeerBuffers

SHM_FOLDER = Path("/dev/shm")
ENV_SWITCH = "IPUPOD_LINK_SHARED_MEMORY"  # "0" turns the path off in this process
STATE_BYTES = 4096  # the segment's first page: one state byte per slot, then the tickets
MAX_SLOTS = MAX_SHARED_MEMORY_SLOTS  # they fit in the state page
TICKETS = 64  # per link: chunks in flight straight from the sender's buffers
TICKET_STATES_AT, TICKET_RECORDS_AT = 1024, 2048  # in the state page: a byte, 3 uint64 each
MIN_SLOT_PAYLOAD_BYTES = 64 << 10  # smaller chunks go inline: a slot would save nothing
MAX_SEGMENTS = 256  # mapped by one receiver at a time (one per sending link)
FREE, CLAIMED = 0, 1
_NAME = re.compile(r"ipupod-slots-(\d+)-[A-Za-z0-9._-]{0,64}-[0-9a-f]{16}")
_PEER_CHARACTERS = re.compile(r"[^A-Za-z0-9._-]")


def wanted(address: str, tls: bool, slots: int) -> bool:
    """Whether a link to ``address`` moves its chunks through shared memory: a Unix
    socket (the peer is on this machine), no TLS, slots asked for, not switched off by
    :data:`ENV_SWITCH`, and a ``/dev/shm`` to put them in."""
    return (address.startswith("unix:") and not tls and slots > 0
            and shared_memory_asked(None) and SHM_FOLDER.is_dir())


def shared_memory_asked(asked: bool | None) -> bool:
    """``asked``, or when it is None whether :data:`ENV_SWITCH` leaves the path on."""
    return os.environ.get(ENV_SWITCH, "1") != "0" if asked is None else asked


def segment_bytes(slots: int, slot_bytes: int) -> int:
    return STATE_BYTES + slots * slot_bytes


def sweep_stale_segments(folder: Path = SHM_FOLDER) -> None:
    """Remove the segments of processes that are gone (a device killed between making a
    segment and its peer's taking it cannot clean up); others' files are left alone."""
    for path in folder.glob("ipupod-slots-*"):
        if _maker_gone(path.name):
            try:
                path.unlink(missing_ok=True)
            except OSError:
                continue  # not ours to remove


def _maker_gone(name: str) -> bool:
    """Whether the process that made segment ``name`` has ended (a restarted device)."""
    match = _NAME.fullmatch(name)
    if match is None:
        return False
    try:
        os.kill(int(match.group(1)), 0)
    except ProcessLookupError:
        return True
    except OSError:
        pass
    return False


def _refused(reason: str) -> DeviceError:
    return DeviceError(f"a malformed chunk arrived on a link: {reason}")


class _Backoff:
    """Pauses growing from ``first`` to ``most`` seconds while a sender waits for its
    receiver, until ``limit`` (monotonic); then :class:`LinkTimeout` saying ``why``."""

    def __init__(self, limit: float, first: float, most: float, why: str) -> None:
        self.limit, self.pause, self.most, self.why = limit, first, most, why

    def wait(self) -> None:
        if time.monotonic() + self.pause > self.limit:
            raise LinkTimeout(self.why)
        time.sleep(self.pause)
        self.pause = min(self.pause * 2, self.most)


class SenderSlots:
    """The sending end's segment for one link: made on first use, slots claimed here and
    handed back by the receiver through their state bytes. Thread-safe."""

    def __init__(self, peer: str, slots: int, slot_bytes: int, retired: str = "") -> None:
        if not 1 <= slots <= MAX_SLOTS:
            raise DeviceError(f"shared-memory slots per link must be 1 to {MAX_SLOTS}, "
                              f"not {slots}")
        self.peer, self.slots, self.slot_bytes, self.retired = peer, slots, slot_bytes, retired
        self.name = ""
        self._lock = threading.Lock()
        self._memory: np.ndarray | None = None
        self._state: np.ndarray | None = None
        self._tickets: np.ndarray | None = None
        self._records: np.ndarray | None = None

    def create(self) -> str:
        """Make, size and map the segment (the file stays until :meth:`unlink`)."""
        sweep_stale_segments()
        peer = _PEER_CHARACTERS.sub("_", self.peer)[:64]
        self.name = f"ipupod-slots-{os.getpid()}-{peer}-{secrets.token_hex(8)}"
        size = segment_bytes(self.slots, self.slot_bytes)
        descriptor = os.open(SHM_FOLDER / self.name,
                             os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            os.ftruncate(descriptor, size)
            mapping = mmap.mmap(descriptor, size)
        except BaseException:
            self.unlink()
            raise
        finally:
            os.close(descriptor)
        self._memory = np.frombuffer(mapping, dtype=np.uint8)
        self._state = self._memory[:self.slots]
        self._tickets, self._records = _ticket_views(self._memory)
        return self.name

    def unlink(self) -> None:
        if self.name:
            try:
                (SHM_FOLDER / self.name).unlink(missing_ok=True)
            except OSError:
                pass

    def claim(self, limit: float) -> int:
        """A free slot, now CLAIMED; waits until ``limit`` (monotonic) for the receiver to
        hand one back, then raises :class:`LinkTimeout` naming the link."""
        assert self._state is not None
        return self._claim(self._state, limit, f"{self.slots} shared-memory slots")

    def try_claim(self) -> int | None:
        """A free slot, now CLAIMED, or None if the receiver holds them all (never waits)."""
        assert self._state is not None
        return self._take(self._state)

    def claim_ticket(self, buffer: int, offset: int, length: int, limit: float) -> int:
        """A free ticket, now CLAIMED for ``length`` bytes at ``offset`` of shared buffer
        number ``buffer`` (:mod:`ipu_node.links.shared_buffers`); waits like :meth:`claim`."""
        assert self._tickets is not None
        return self._claim(self._tickets, limit, f"{TICKETS} shared-buffer tickets",
                           record=(buffer, offset, length))

    def try_claim_ticket(self, buffer: int, offset: int, length: int) -> int | None:
        """:meth:`claim_ticket`, or None if every ticket is in flight (never waits)."""
        assert self._tickets is not None
        return self._take(self._tickets, (buffer, offset, length))

    def _claim(self, states: np.ndarray, limit: float, what: str,
               record: tuple[int, int, int] | None = None) -> int:
        backoff = _Backoff(limit, 50e-6, 2e-3,
                           f"the link to {self.peer}: none of its {what} came back in time "
                           "(the receiver has not landed the chunks it holds)")
        while (index := self._take(states, record)) is None:
            backoff.wait()
        return index

    def _take(self, states: np.ndarray,
              record: tuple[int, int, int] | None = None) -> int | None:
        """The first FREE index of ``states``, now CLAIMED (a ticket's ``record`` written
        before its state says it is in flight), or None."""
        with self._lock:
            free = np.flatnonzero(states == FREE)
            if not len(free):
                return None
            index = int(free[0])
            if record is not None:
                assert self._records is not None
                self._records[index] = record
            states[index] = CLAIMED
            return index

    def landed(self, tickets: list[int], limit: float) -> None:
        """Wait until ``limit`` (monotonic) for the receiver to hand ``tickets`` back: it
        has landed their ranges, which may be written again; else :class:`LinkTimeout`."""
        assert self._tickets is not None
        backoff = _Backoff(limit, 20e-6, 1e-3,
                           f"the link to {self.peer}: the receiver did not land the chunks it "
                           "reads from this device's buffers in time")
        for ticket in tickets:
            while self._tickets[ticket] != FREE:
                backoff.wait()

    def write(self, slot: int, payload: memoryview) -> None:
        """Copy ``payload`` into ``slot`` (claimed by :meth:`claim`)."""
        assert self._memory is not None
        start = STATE_BYTES + slot * self.slot_bytes
        self._memory[start:start + len(payload)] = np.frombuffer(payload, dtype=np.uint8)


def _ticket_views(state_page: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The tickets' state bytes and records (buffer number, offset, length) in a state
    page (the segment's first :data:`STATE_BYTES`)."""
    records = state_page[TICKET_RECORDS_AT:TICKET_RECORDS_AT + TICKETS * 24]
    return (state_page[TICKET_STATES_AT:TICKET_STATES_AT + TICKETS],
            records.view("<u8").reshape(TICKETS, 3))


class _Segment:
    """A segment as its receiver holds it: the mapping, and the slots and tickets handed
    out (by the number of their holding)."""

    def __init__(self, mapping: mmap.mmap, slots: int, slot_bytes: int) -> None:
        self.memory = memoryview(mapping).toreadonly()
        self.state = np.frombuffer(mapping, dtype=np.uint8, count=slots)
        self.tickets, self.records = _ticket_views(np.frombuffer(mapping, np.uint8,
                                                                 count=STATE_BYTES))
        self.slots, self.slot_bytes = slots, slot_bytes
        self.held: dict[int, int] = {}  # slot -> the number of its holding
        self.held_tickets: dict[int, int] = {}
        self.holdings = 0


class ReceiverSlots:
    """The segments announced to one link server, and the slots its mailbox holds;
    thread-safe (connections announce and refer, the executor lands and hands back)."""

    def __init__(self, device: str, max_segments: int = MAX_SEGMENTS) -> None:
        self.device, self.max_segments = device, max_segments
        self._segments: dict[str, _Segment] = {}
        self._lock = threading.Lock()
        self.buffers = PeerBuffers(device)  # senders' buffers that tickets refer into

    @property
    def segments(self) -> int:
        with self._lock:
            return len(self._segments)

    def attach(self, name: str, slots: int, slot_bytes: int, retired: str = "") -> None:
        """Map the segment ``name`` of ``slots`` slots of ``slot_bytes`` and unlink its
        file; ``retired`` (a segment the same sender gave up) is forgotten."""
        if _NAME.fullmatch(name) is None:
            raise _refused(f"{name[:80]!r} is not a shared-memory segment's name")
        if not (1 <= slots <= MAX_SLOTS and 0 < slot_bytes <= 1 << 30):
            raise _refused(f"a segment of {slots} slots of {slot_bytes} bytes")
        sweep_stale_segments()
        with self._lock:
            gone = [known for known in self._segments if known == retired or _maker_gone(known)]
            for known in gone:  # views the mailbox holds stay valid: the mapping goes with them
                del self._segments[known]
        self.buffers.drop_gone()
        with self._lock:
            if len(self._segments) >= self.max_segments:
                raise _refused(f"{self.device} maps {self.max_segments} segments already")
        mapping = _map_segment(name, segment_bytes(slots, slot_bytes))
        with self._lock:
            self._segments[name] = _Segment(mapping, slots, slot_bytes)

    def resolve(self, name: str, slot: int,
                length: int) -> tuple[memoryview, Callable[[], None]]:
        """A read-only view of ``length`` bytes of ``slot``, now held, and the function that
        hands it back; a reference the sender could not have made is refused."""
        with self._lock:
            segment = self._segments.get(name)
            if segment is None:
                raise _refused(f"unknown shared-memory segment {name[:80]!r}")
            if not (0 <= slot < segment.slots and 0 < length <= segment.slot_bytes):
                raise _refused(f"slot {slot} with {length} bytes is outside segment {name} "
                               f"({segment.slots} slots of {segment.slot_bytes} bytes)")
            if slot in segment.held:
                raise _refused(f"slot {slot} of segment {name} is referred to twice")
            if segment.state[slot] != CLAIMED:
                raise _refused(f"slot {slot} of segment {name} is not in flight")
            segment.holdings += 1
            segment.held[slot] = holding = segment.holdings
        start = STATE_BYTES + slot * segment.slot_bytes
        return (segment.memory[start:start + length],
                lambda: self._release(segment, slot, holding))

    def resolve_buffer(self, name: str, ticket: int, buffer: str, offset: int,
                       length: int) -> tuple[memoryview, Callable[[], None]]:
        """A read-only view of ``length`` bytes at ``offset`` of the sender's shared
        ``buffer``, in flight under ``ticket`` of segment ``name`` (now held), and the
        function that hands the ticket back; anything its sender did not put in flight is
        refused."""
        with self._lock:
            segment = self._segments.get(name)
            if segment is None:
                raise _refused(f"unknown shared-memory segment {name[:80]!r}")
            if not 0 <= ticket < TICKETS:
                raise _refused(f"ticket {ticket} is outside segment {name} ({TICKETS} tickets)")
            if ticket in segment.held_tickets:
                raise _refused(f"ticket {ticket} of segment {name} is referred to twice")
            number, start, size = (int(v) for v in segment.records[ticket])
            if segment.tickets[ticket] != CLAIMED or (start, size) != (offset, length):
                raise _refused(f"{length} bytes at {offset} of shared buffer {buffer[:80]} "
                               f"are not in flight under ticket {ticket} of segment {name}")
            view = self.buffers.view(buffer, number, offset, length)
            segment.holdings += 1
            segment.held_tickets[ticket] = holding = segment.holdings
        return view, lambda: self._release(segment, ticket, holding, tickets=True)

    def _release(self, segment: _Segment, index: int, holding: int,
                 tickets: bool = False) -> None:
        """Hand slot (or ticket) ``index`` back to its sender (its chunk has landed or was
        dropped); a second call for the same holding does nothing."""
        held, states = ((segment.held_tickets, segment.tickets) if tickets
                        else (segment.held, segment.state))
        with self._lock:
            if held.get(index) == holding:
                del held[index]
                states[index] = FREE

    def close(self) -> None:
        """Forget every segment (mappings end when the last view of them is gone)."""
        with self._lock:
            self._segments.clear()
        self.buffers.close()


def _map_segment(name: str, size: int) -> mmap.mmap:
    """Open, check and map ``/dev/shm/name`` (ours, private, a regular file of exactly
    ``size`` bytes), then unlink it: the mapping stays, the file goes."""
    path = SHM_FOLDER / name
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    except OSError as error:
        raise _refused(f"segment {name} cannot be opened: {error.strerror}") from None
    try:
        info = os.fstat(descriptor)
        if (not stat.S_ISREG(info.st_mode) or info.st_uid != os.geteuid()
                or info.st_mode & 0o077 or info.st_size != size):
            raise _refused(f"segment {name} is not a private file of {size} bytes of ours")
        return mmap.mmap(descriptor, size)
    finally:
        os.close(descriptor)
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass
