"""Real mode's wall clock in a trace (``--trace FILE`` with ``--mode real``): what the card
and host actors actually did, gathered after the run.

:meth:`WallRecorder.start` turns each actor's :class:`~ipu_node.wall_spans.WallSpans` on
(the POD's budget of :data:`MAX_WALL_SPANS` shared out between them) and notes where the
run starts; the driver may add spans of its own (:meth:`WallRecorder.mark`: a size of a
bench, a training step); :meth:`WallRecorder.stop` takes the actors' spans and turns
recording off; :meth:`WallRecorder.add_to` writes them into a trace in processes of their
own whose names begin ``wall clock:`` (:data:`~cluster.model.trace.WALL_PREFIX`) and sort
after the simulated ones: ``wall clock: driver`` (this process), ``wall clock: cards`` (a
track per card or IPU-M2000 actor) and ``wall clock: hosts`` (a track per server host
that relays). Times count from :meth:`start`, on the machine's monotonic clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from cluster.model.trace import BOTH_CLOCKS, WALL, WALL_PREFIX, Trace
from ipu_node.device_spec import DeviceSpec, describe
from ipu_node.wall_spans import RecordedSpans

MAX_WALL_SPANS = 300_000  # spans of all actors together (about 45 MB of JSON at most)
NS_PER_SECOND = 1e9
DRIVER, CARDS, HOSTS = (f"{WALL_PREFIX}{name}" for name in ("driver", "cards", "hosts"))
GATHER_DEADLINE_SECONDS = 60.0
T = TypeVar("T")


class Pod(Protocol):
    """What the recorder uses of a launched POD (:class:`ipu_node.pod.EmulatedPod`)."""

    @property
    def specs(self) -> list[DeviceSpec]: ...

    def call(self, method: str, per_device: dict[int, tuple],
             deadline_seconds: float = ...) -> dict[int, Any]: ...


@dataclass(frozen=True)
class DriverSpan:
    """A span of this process: ``name`` on ``track`` from ``start_ns`` to ``end_ns``."""

    track: str
    name: str
    start_ns: int
    end_ns: int
    args: dict[str, Any]


@dataclass
class WallRecorder:
    """Collects one run's wall-clock spans, the actors' and the driver's."""

    max_spans: int = MAX_WALL_SPANS
    origin_ns: int = 0
    specs: list[DeviceSpec] = field(default_factory=list)
    recorded: dict[int, RecordedSpans] = field(default_factory=dict)
    driver: list[DriverSpan] = field(default_factory=list)
    problem: str = ""  # why the actors' spans are missing, if they are

    def start(self, pod: Pod) -> None:
        """Turn recording on in every actor of ``pod``; the run's wall clock starts now."""
        self.specs = list(pod.specs)
        capacity = max(1, self.max_spans // max(1, len(self.specs)))
        pod.call("record_wall", {i: (capacity,) for i in range(len(self.specs))},
                 deadline_seconds=GATHER_DEADLINE_SECONDS)
        self.origin_ns = time.monotonic_ns()

    def mark(self, track: str, name: str, start_ns: int, **args: Any) -> int:
        """A driver span from ``start_ns`` to now; returns now (the next one's start)."""
        now = time.monotonic_ns()
        self.driver.append(DriverSpan(track, name, start_ns, now, args))
        return now

    def each(self, items: Iterable[T], track: str, name: Callable[[T], str]) -> Iterator[T]:
        """``items`` as they come, each a driver span (named ``name(item)``) from the
        previous one's end (the first from :meth:`start`) to when it came."""
        at = self.origin_ns or time.monotonic_ns()
        for item in items:
            at = self.mark(track, name(item), at)
            yield item

    def marking(self, on_step: Callable[[int, int], None]) -> Callable[[int, int], None]:
        """``on_step(step, total)``, which also marks each step as a driver span (track
        ``steps``) from the previous one's end (the first from :meth:`start`)."""
        last = [self.origin_ns]

        def marked(step: int, total: int) -> None:
            last[0] = self.mark("steps", f"step {step}", last[0], step=step)
            on_step(step, total)
        return marked

    def stop(self, pod: Pod) -> None:
        """Take every actor's spans (recording stops). A failure is kept, not raised: it is
        said in the trace, and the run's own error, if any, is the one reported."""
        try:
            self.recorded = pod.call("wall_spans", {i: () for i in range(len(self.specs))},
                                     deadline_seconds=GATHER_DEADLINE_SECONDS)
        except Exception as error:  # noqa: BLE001 - said in the trace's metadata
            self.problem = f"the actors' spans could not be gathered: {error}"

    def add_to(self, trace: Trace) -> None:
        """Write the spans into ``trace``, in the ``wall clock:`` processes; the trace's
        clock becomes both (if it has simulated spans) or the wall clock alone."""
        simulated = [process for process in trace.tracks() if not process.startswith(WALL_PREFIX)]
        trace.clock = BOTH_CLOCKS if simulated else WALL
        for span in self.driver:
            self._span(trace, DRIVER, span.track, span.name, span.start_ns, span.end_ns,
                       span.args)
        dropped = {}
        for index, spec in enumerate(self.specs):
            process, track = (CARDS if spec.ipus else HOSTS), describe(spec)
            trace.track(process, track)
            answer = self.recorded.get(index, RecordedSpans(spans=[], dropped=0))
            for phase, start_ns, end_ns, args in answer["spans"]:
                self._span(trace, process, track, phase, start_ns, end_ns, args)
            if answer["dropped"]:
                dropped[spec.name] = answer["dropped"]
        trace.metadata["clocks"] = {
            "simulated": simulated,
            "wall": (f"processes whose names begin {WALL_PREFIX.strip()!r}: what the driver "
                     "and the card and host actors actually did, seconds on this machine's "
                     "monotonic clock from the start of the run (never the simulated clock)")}
        trace.metadata["wall_spans_per_actor"] = max(1, self.max_spans // max(1, len(self.specs)))
        if dropped:
            trace.metadata["wall_spans_dropped"] = dropped
        if self.problem:
            trace.metadata["wall_problem"] = self.problem

    def _span(self, trace: Trace, process: str, track: str, name: str, start_ns: int,
              end_ns: int, args: Any) -> None:
        """A span in seconds from the run's start; one that began before it is cut there."""
        start_ns = max(start_ns, self.origin_ns)
        if end_ns >= start_ns:
            trace.span(process, track, name, (start_ns - self.origin_ns) / NS_PER_SECOND,
                       (end_ns - start_ns) / NS_PER_SECOND, **dict(args))
