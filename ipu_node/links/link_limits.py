"""What a link accepts from a peer, in one validated place: frame and header sizes, the
largest gRPC message, connections, timeouts, and what a device buffers. A link treats
every byte from its socket as hostile; these bounds are what keep a peer from taking a
device's memory, threads or time (see ``docs/links.md``)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields

from cluster.errors import UserError
from ipu_node.device_errors import DeviceError

RESOURCE_EXHAUSTED = 8  # the gRPC status of a message or buffer beyond its limit
MIN_FRAME_BYTES, MAX_FRAME_BYTES = 1 << 14, (1 << 24) - 1  # RFC 9113 §6.5.2
MAX_SHARED_MEMORY_SLOTS = 64


class ResourceExhausted(DeviceError):
    """A peer sent more than a limit allows (a message too large, a full mailbox): the
    call is refused with gRPC status RESOURCE_EXHAUSTED, the device carries on."""


@dataclass(frozen=True)
class LinkLimits:
    """The bounds of one device's links. Sizes in bytes, times in seconds.

    (*) Large frames cost no memory here (DATA is read straight into messages, other
    frames have small fixed or limited sizes, unknown ones are skipped in pieces) and
    save CPU: 1 MiB frames made one link 20% slower (``benchmarks/link_stream.py``).

    (**) A relaying host sends without waiting: its receiver may hold every slot with
    chunks that wait on another chunk the host has yet to pass on."""

    max_frame_bytes: int = (1 << 24) - 1  # SETTINGS_MAX_FRAME_SIZE we advertise (*)
    max_header_block_bytes: int = 16 << 10  # one header block, CONTINUATION included
    max_message_bytes: int = 8 << 20  # one gRPC message (a 4 MiB chunk and its header)
    max_pending_message_bytes: int = 256 << 20  # messages begun, not yet whole, per server
    max_connections: int = 128  # per server (one thread each)
    handshake_timeout_seconds: float = 5.0  # preface and first SETTINGS, from accept
    idle_timeout_seconds: float = 60.0  # no byte for this long: the server closes the connection
    client_reuse_seconds: float = 20.0  # a client reuses an idle connection this long at most
    max_buffered_bytes: int = 2 << 30  # chunks a mailbox holds, not yet taken
    stale_chunks_seconds: float = 120.0  # chunks of a collective nobody waits on: dropped after
    shared_memory_slots: int = 8  # per link to a peer on this machine (0: chunks go inline)
    shared_memory_waits: bool = True  # a sender waits for a free slot; False: it goes inline (**)

    def __post_init__(self) -> None:
        if not MIN_FRAME_BYTES <= self.max_frame_bytes <= MAX_FRAME_BYTES:
            raise UserError(f"max_frame_bytes must be in [{MIN_FRAME_BYTES}, {MAX_FRAME_BYTES}]"
                            f" (RFC 9113), not {self.max_frame_bytes}")
        if not (isinstance(self.shared_memory_slots, int)
                and 0 <= self.shared_memory_slots <= MAX_SHARED_MEMORY_SLOTS):
            raise UserError(f"link limit shared_memory_slots must be 0 (off) to "
                            f"{MAX_SHARED_MEMORY_SLOTS}, not {self.shared_memory_slots!r}")
        if not isinstance(self.shared_memory_waits, bool):
            raise UserError(f"link limit shared_memory_waits must be true or false, "
                            f"not {self.shared_memory_waits!r}")
        for field in fields(self):
            value = getattr(self, field.name)
            if field.name in ("shared_memory_slots", "shared_memory_waits"):
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise UserError(f"link limit {field.name} must be a positive number, "
                                f"not {value!r}")
        if self.max_header_block_bytes < 1024 or self.max_message_bytes < 1024:
            raise UserError("link limits: header blocks and messages need at least 1024 bytes")
        if self.max_pending_message_bytes < self.max_message_bytes:
            raise UserError("link limits: max_pending_message_bytes must hold one whole "
                            "message (max_message_bytes)")
        if self.client_reuse_seconds >= self.idle_timeout_seconds:
            raise UserError("link limits: client_reuse_seconds must be shorter than "
                            "idle_timeout_seconds, "
                            "or clients would reuse connections the server has closed")


class ByteBudget:
    """Bytes a server has allocated for messages not yet whole, across its connections:
    a peer that declares a large message and sends little holds at most this much."""

    def __init__(self, total: int) -> None:
        self.total, self.used = total, 0
        self._lock = threading.Lock()

    def take(self, count: int) -> None:
        """Reserve ``count`` bytes, or raise :class:`ResourceExhausted`."""
        with self._lock:
            if self.used + count > self.total:
                raise ResourceExhausted(
                    f"{count:,} bytes for a message would pass the link's budget of "
                    f"{self.total:,} bytes for messages in flight")
            self.used += count

    def give(self, count: int) -> None:
        with self._lock:
            self.used -= count
