"""Where a connection's next bytes go, as a small pull parser: a view to fill, and what
runs once it is full. The connection's state machine (:mod:`ipu_node.links.protocol`)
says what it expects next (a frame header, a bounded payload, bytes to drop, or a part of
a message's own buffer); whoever has bytes fills :attr:`Incoming.view` and calls
:meth:`Incoming.received`. No frame is interpreted here."""

from __future__ import annotations

from collections.abc import Callable

from ipu_node.links.frames import FRAME_HEADER_BYTES

SKIP_PIECE = 64 << 10  # bytes dropped are read in pieces this large at most


class Incoming:
    """The bytes expected next: :attr:`view` (never empty while bytes are awaited), and
    the step that runs once it is full."""

    def __init__(self) -> None:
        self.head = memoryview(bytearray(FRAME_HEADER_BYTES))  # a frame header lands here
        self.payload = bytearray()  # the bounded payload read last
        self.view = self.head
        self._then: Callable[[], None] = _nothing
        self._skipping, self._after_skip = 0, _nothing
        self._scratch = memoryview(bytearray(SKIP_PIECE))

    def received(self, count: int) -> None:
        """``count`` bytes were written at the start of :attr:`view`."""
        view = self.view[count:]
        if len(view):
            self.view = view
        else:
            self._then()

    def expect(self, view: memoryview, then: Callable[[], None]) -> None:
        """The next bytes fill ``view``, then ``then`` runs (at once if it is empty)."""
        self.view, self._then = view, then
        if not len(view):
            then()

    def header(self, then: Callable[[], None]) -> None:
        """The next 9 bytes are a frame header (in :attr:`head`)."""
        self.expect(self.head, then)

    def read(self, length: int, then: Callable[[], None]) -> None:
        """The next ``length`` bytes (checked small: they are allocated) into
        :attr:`payload`."""
        self.payload = bytearray(length)
        self.expect(memoryview(self.payload), then)

    def skip(self, count: int, then: Callable[[], None]) -> None:
        """Drop the next ``count`` bytes, read in pieces of :data:`SKIP_PIECE` at most."""
        self._skipping, self._after_skip = count, then
        self._skip_piece()

    def _skip_piece(self) -> None:
        piece = min(self._skipping, SKIP_PIECE)
        if not piece:
            self._after_skip()
            return
        self._skipping -= piece
        self.expect(self._scratch[:piece], self._skip_piece)


def _nothing() -> None:
    """The step before any is set."""
