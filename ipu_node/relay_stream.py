"""A relayed stream's onward pushes: each chunk goes on towards its IPU as it arrives.

A host relay (:mod:`ipu_node.host`) opens one push per next hop of an incoming stream and
feeds it chunk by chunk: at most :data:`RELAY_DEPTH` chunks wait per hop, and each one's
shared memory (a slot or a ticket of its sender, :mod:`ipu_node.links.shared_link`) is
handed back as soon as the push has written it onward. So a relay never holds a whole
stream, and a sender waiting for its slots or tickets is never held up by chunks still to
come.

Each push runs on a thread of its own while it lasts, not on a bounded pool: a push waits
for chunks that may be behind another stream's, and a pool full of waiting pushes could
wait forever. A thread whose push ended is kept for the next (:class:`Pushers`): starting
one per stream was a tenth of a host's CPU and, on a busy machine, milliseconds on every
hop between servers.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future

from ipu_node.device_errors import DeviceError, LinkTimeout
from ipu_node.links.shared_link import Arrival

RELAY_DEPTH = 4  # chunks waiting per next hop of a stream
IDLE_PUSHERS_KEPT = 64  # threads kept for the next pushes once theirs ended
_END = object()
_WAIT_SECONDS = 0.05  # between looks at a push that may have failed

Push = Callable[[Iterable, float], int]  # (messages, deadline seconds) -> bytes acknowledged


def _release(arrival: Arrival) -> None:
    if arrival.release is not None:
        arrival.release()


class Pushers:
    """Threads that run pushes, each kept idle once its push ended for the next one (at
    most ``kept``). A push that finds none idle gets a new thread, so no push ever waits
    for another to end."""

    def __init__(self, name: str, kept: int = IDLE_PUSHERS_KEPT) -> None:
        self.name, self.kept = name, kept
        self._idle: list[queue.SimpleQueue[Callable[[], None]]] = []
        self._lock = threading.Lock()

    @property
    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    def run(self, work: Callable[[], None]) -> None:
        """Run ``work`` (which must not raise) on an idle thread, or a new one."""
        with self._lock:
            inbox = self._idle.pop() if self._idle else None
        if inbox is None:
            inbox = queue.SimpleQueue()
            threading.Thread(target=self._serve, args=(inbox,), daemon=True,
                             name=self.name).start()
        inbox.put(work)

    def _serve(self, inbox: queue.SimpleQueue[Callable[[], None]]) -> None:
        while True:
            inbox.get()()
            with self._lock:
                if len(self._idle) >= self.kept:
                    return
                self._idle.append(inbox)


PUSHERS = Pushers("relay-push")


class OnwardPush:
    """One push towards a next hop, fed chunk by chunk (:meth:`put`), ended by
    :meth:`finish` (or :meth:`abandon` when the incoming stream broke)."""

    def __init__(self, push: Push, deadline_seconds: float, pushers: Pushers = PUSHERS) -> None:
        self._queue: queue.Queue[object] = queue.Queue(maxsize=RELAY_DEPTH)
        self._deadline_seconds = deadline_seconds
        self._broken = threading.Event()
        self.done: Future[int] = Future()
        pushers.run(lambda: self._run(push))

    def _run(self, push: Push) -> None:
        try:
            self.done.set_result(push(self._messages(), self._deadline_seconds))
        except BaseException as error:  # noqa: BLE001 - handed to whoever waits on it
            self.done.set_exception(error)
        finally:
            self._drain()

    def _messages(self) -> Iterator:
        """The chunks put here, each handed back once the push asked for the next."""
        limit = time.monotonic() + self._deadline_seconds
        while True:
            try:
                arrival = self._queue.get(timeout=_WAIT_SECONDS)
            except queue.Empty:
                if self._broken.is_set():
                    raise DeviceError("the relayed stream broke before its end") from None
                if time.monotonic() > limit:
                    raise LinkTimeout("a relayed stream's chunks did not come in time") \
                        from None
                continue
            if arrival is _END:
                return
            assert isinstance(arrival, Arrival)
            if self._broken.is_set():
                _release(arrival)
                raise DeviceError("the relayed stream broke before its end")
            try:
                yield arrival.onward
            finally:
                _release(arrival)

    def _drain(self) -> None:
        """Hand back what was put but never sent (the push failed)."""
        while True:
            try:
                arrival = self._queue.get_nowait()
            except queue.Empty:
                return
            if isinstance(arrival, Arrival):
                _release(arrival)

    def put(self, arrival: Arrival, limit: float) -> None:
        """Queue ``arrival`` for the push, waiting until ``limit`` (monotonic) for room;
        if the push failed meanwhile, its error (the arrival is handed back)."""
        self._offer(arrival, limit)

    def finish(self, limit: float) -> int:
        """End the push and wait until ``limit`` for its answer: the bytes acknowledged."""
        self._offer(_END, limit)
        return self.done.result(timeout=max(0.0, limit - time.monotonic()))

    def abandon(self) -> None:
        """End the push with an error (the incoming stream broke); never waits."""
        self._broken.set()
        self._drain()

    def _offer(self, item: object, limit: float) -> None:
        while True:
            if self.done.done():  # it failed (or ended): nothing more goes in
                if isinstance(item, Arrival):
                    _release(item)
                self.done.result()
                raise DeviceError("a relayed push ended before its stream did")
            try:
                self._queue.put(item, timeout=_WAIT_SECONDS)
                if self.done.done():  # it ended while this went in: hand it back
                    self._drain()
                return
            except queue.Full:
                if time.monotonic() > limit:
                    if isinstance(item, Arrival):
                        _release(item)
                    raise LinkTimeout("a relayed push did not take its chunks in time") \
                        from None
