"""Per-user limits on expensive calls (real-mode benchmarks), so that one user's loop
cannot starve the others: at most ``in_flight`` at once per user, and at most ``per_minute``
started per minute (a token bucket). A call past either limit is refused at once with
RESOURCE_EXHAUSTED, holding no worker thread. The administrator is not limited."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from cluster.service.service_error import ServiceError, Status


@dataclass(frozen=True)
class Limits:
    """How many expensive calls a user may have running at once, and start per minute."""

    in_flight: int = 1
    per_minute: float = 30.0


class Limited(ServiceError):
    """A call past a user's limit (RESOURCE_EXHAUSTED); the message says which limit and
    what to do."""

    def __init__(self, message: str) -> None:
        super().__init__(Status.RESOURCE_EXHAUSTED, message)


class CallLimiter:
    """Counts each user's expensive calls running and started (thread-safe)."""

    def __init__(self, limits: Limits, clock: Callable[[], float] = time.monotonic) -> None:
        self.limits, self._clock = limits, clock
        self._lock = threading.Lock()
        self._running: dict[str, int] = {}
        self._bucket: dict[str, tuple[float, float]] = {}  # user -> (tokens, at)

    @contextmanager
    def expensive(self, user: str) -> Iterator[None]:
        """Hold one of ``user``'s expensive-call slots while the block runs; raise
        :class:`Limited` if none is free."""
        self._take(user)
        try:
            yield
        finally:
            with self._lock:
                self._running[user] -= 1

    def _take(self, user: str) -> None:
        limits, now = self.limits, self._clock()
        with self._lock:
            running = self._running.get(user, 0)
            if running >= limits.in_flight:
                raise Limited(f"{user} already has {running} expensive call"
                              f"{'s' if running > 1 else ''} (real-mode benchmarks) running, "
                              f"the most a user may: wait for it to end")
            tokens, at = self._bucket.get(user, (limits.per_minute, now))
            tokens = min(limits.per_minute, tokens + (now - at) * limits.per_minute / 60)
            if tokens < 1:
                raise Limited(f"{user} started {limits.per_minute:g} expensive calls "
                              "(real-mode benchmarks) in the last minute, the most a user "
                              f"may: retry in {(1 - tokens) * 60 / limits.per_minute:.0f} s")
            self._bucket[user] = (tokens - 1, now)
            self._running[user] = running + 1
