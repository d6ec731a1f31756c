"""What a device actor actually did, on the wall clock: spans of compute, send, receive
and reduce that real mode's ``--trace FILE`` draws (:mod:`ipu_node.wall_trace` gathers
them).

A :class:`WallSpans` is off until the POD turns it on (:meth:`WallSpans.start`); while off,
:meth:`WallSpans.begin` answers 0 at the cost of an attribute read and nothing is kept, so
an untraced run pays about nothing. Times are ``time.monotonic_ns()``: the machine's
monotonic clock, the same in every process of one machine (actors on other machines
have their own). The buffer is bounded: past ``capacity`` spans the later ones are only
counted (``dropped``), so a long run cannot fill the actor's memory.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import Any, TypedDict

COMPUTE, SEND, RECEIVE, REDUCE = "compute", "send", "receive", "reduce"
PHASES = (COMPUTE, SEND, RECEIVE, REDUCE)
DEFAULT_CAPACITY = 100_000  # spans an actor keeps at most, unless told otherwise


class RecordedSpans(TypedDict):
    """An actor's answer: its spans ``(phase, start_ns, end_ns, args)`` on the monotonic
    clock, and how many more it did not keep."""

    spans: list[tuple[str, int, int, Mapping[str, Any]]]
    dropped: int


class WallSpans:
    """The spans one actor records (thread-safe; the actor runs on several threads)."""

    def __init__(self) -> None:
        self.on = False
        self.capacity = DEFAULT_CAPACITY
        self.dropped = 0
        self._spans: list[tuple[str, int, int, Mapping[str, Any]]] = []
        self._lock = threading.Lock()

    def start(self, capacity: int = DEFAULT_CAPACITY) -> None:
        """Forget what was recorded and record from now on, up to ``capacity`` spans."""
        with self._lock:
            self._spans, self.dropped, self.capacity = [], 0, max(0, capacity)
            self.on = True

    def take(self) -> RecordedSpans:
        """Stop recording; the spans recorded (and how many were dropped), forgotten here."""
        with self._lock:
            self.on = False
            taken = RecordedSpans(spans=self._spans, dropped=self.dropped)
            self._spans, self.dropped = [], 0
        return taken

    def begin(self) -> int:
        """Now on the monotonic clock (ns) while recording; 0 (nothing to do) otherwise."""
        return time.monotonic_ns() if self.on else 0

    def end(self, kind: str, started_ns: int, /, **args: Any) -> int:
        """Keep a span of ``kind`` (one of :data:`PHASES`) from ``started_ns`` (from
        :meth:`begin`) to now; return now (the next span's start) or 0 when not
        recording."""
        if not started_ns or not self.on:
            return 0
        now = time.monotonic_ns()
        with self._lock:
            if len(self._spans) < self.capacity:
                self._spans.append((kind, started_ns, now, args))
            else:
                self.dropped += 1
        return now
