"""gRPC's length-prefixed messages (gRPC's PROTOCOL-HTTP2) on a stream's DATA bytes: the
5-byte prefix, then the body landed straight in a buffer of its own, allocated only once
the prefix is whole and the size within :class:`~ipu_node.links.link_limits.LinkLimits` and the
server's budget for messages in flight. No socket and no frames: the connection's state
machine (:mod:`ipu_node.links.protocol`) asks where the next bytes go and says when they
have landed."""

from __future__ import annotations

import struct

import numpy as np

from ipu_node.links.frames import ProtocolError
from ipu_node.links.link_limits import ByteBudget, LinkLimits, ResourceExhausted

PREFIX_BYTES = 5
_PREFIX = struct.Struct(">BI")


def grpc_prefix(length: int) -> bytes:
    """gRPC's message prefix: not compressed, then the length (big-endian, 4 bytes)."""
    return _PREFIX.pack(0, length)


class MessageReader:
    """The gRPC message in progress on a stream: its 5-byte prefix, then its body, landed
    where :meth:`target` says. ``budget`` (a server's) bounds bytes of messages begun and
    not yet whole across its connections."""

    def __init__(self, limits: LinkLimits, budget: ByteBudget | None) -> None:
        self.limits, self.budget = limits, budget
        self.prefix, self.have = bytearray(PREFIX_BYTES), 0
        self.message: np.ndarray | None = None
        self.filled = 0

    @property
    def inside(self) -> bool:
        """Whether a message is begun and not yet whole."""
        return self.message is not None or self.have > 0

    def target(self, available: int) -> memoryview:
        """Where the next of ``available`` (> 0) bytes go: the rest of the prefix or of
        the body, no more than ``available`` bytes long."""
        message = self.message
        if message is None:
            return memoryview(self.prefix)[self.have:min(PREFIX_BYTES,
                                                         self.have + available)]
        return message.data[self.filled:self.filled + min(len(message) - self.filled,
                                                          available)]

    def landed(self, count: int) -> np.ndarray | None:
        """``count`` bytes reached :meth:`target`; the message they complete, if any.
        :class:`ResourceExhausted` if the prefix declares more than the limits allow."""
        if self.message is None:
            self.have += count
            if self.have == PREFIX_BYTES:
                self.message = self._allocate()
        else:
            self.filled += count
        if self.message is not None and self.filled == len(self.message):
            done = self.message
            self.release()
            return done
        return None

    def _allocate(self) -> np.ndarray:
        compressed, size = _PREFIX.unpack(self.prefix)
        if compressed:
            raise ProtocolError("compressed gRPC messages are not supported")
        limit = self.limits.max_message_bytes
        if size > limit:
            raise ResourceExhausted(f"a gRPC message of {size:,} bytes, more than the "
                                    f"{limit:,} a link takes")
        if self.budget is not None:
            self.budget.take(size)
        self.filled = 0
        return np.empty(size, dtype=np.uint8)

    def release(self) -> None:
        """The message is whole or abandoned: its bytes leave the budget."""
        if self.message is not None and self.budget is not None:
            self.budget.give(len(self.message))
        self.message, self.have, self.filled = None, 0, 0
