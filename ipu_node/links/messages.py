"""gRPC's length-prefixed messages read off a stream's DATA frames: the 5-byte prefix,
then the body read straight into a buffer of its own, allocated only once the prefix is
whole and the size within :class:`~ipu_node.links.limits.LinkLimits` and the server's
budget for messages in flight."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from ipu_node.links.frames import PADDED, PROTOCOL_ERROR, ConnectionViolation, ProtocolError
from ipu_node.links.limits import ResourceExhausted

if TYPE_CHECKING:
    from ipu_node.links.h2 import Connection


class MessageReader:
    """The gRPC message in progress on a stream: its 5-byte prefix, then its body read
    straight into a buffer allocated once the prefix is whole and within the limits."""

    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.prefix, self.have = bytearray(5), 0
        self.message: np.ndarray | None = None
        self.filled = 0

    def frame(self, stream: int, length: int, flags: int) -> Iterator[np.ndarray]:
        """Read one DATA frame's bytes; yield the messages it completes."""
        connection = self.connection
        connection.count_received(stream, length)
        remaining, padding = length, 0
        if flags & PADDED:
            padding = connection.read(1)[0]
            remaining -= 1 + padding
            if remaining < 0:
                raise ConnectionViolation(PROTOCOL_ERROR, "a DATA frame's padding exceeds it")
        while remaining:
            if self.message is None:
                take = min(5 - self.have, remaining)
                connection.read_into(memoryview(self.prefix)[self.have:self.have + take])
                self.have, remaining = self.have + take, remaining - take
                if self.have == 5:
                    try:
                        self.message = self._allocate()
                    except ResourceExhausted:
                        connection.skip(remaining + padding)  # the frame, whole
                        raise
            else:
                message = self.message
                take = min(len(message) - self.filled, remaining)
                connection.read_into(message.data[self.filled:self.filled + take])
                self.filled, remaining = self.filled + take, remaining - take
            if self.message is not None and self.filled == len(self.message):
                done = self.message
                self.release()
                yield done
        if padding:
            connection.skip(padding)

    def _allocate(self) -> np.ndarray:
        if self.prefix[0]:
            raise ProtocolError("compressed gRPC messages are not supported")
        size = int.from_bytes(self.prefix[1:5], "big")
        limit = self.connection.limits.max_message_bytes
        if size > limit:
            raise ResourceExhausted(f"a gRPC message of {size:,} bytes, more than the "
                                    f"{limit:,} a link takes")
        if self.connection.budget is not None:
            self.connection.budget.take(size)
        self.filled = 0
        return np.empty(size, dtype=np.uint8)

    def release(self) -> None:
        """The message is whole or abandoned: its bytes leave the budget."""
        if self.message is not None and self.connection.budget is not None:
            self.connection.budget.give(len(self.message))
        self.message, self.have, self.filled = None, 0, 0
