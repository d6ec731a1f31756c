"""Timelines of simulated time, written in the Trace Event Format (the JSON that the Perfetto
UI and chrome://tracing open).

A :class:`Trace` collects spans (a named stretch of time on a track of a process, with
``args`` shown when the span is selected) and counters, in seconds of one clock; it is
written as a JSON object: ``traceEvents`` holds an ``"M"`` (metadata) event naming each
process and track, an ``"X"`` (complete) event per span and a ``"C"`` event per counter
sample, with ``ts`` and ``dur`` in microseconds as the format counts them (to the
picosecond); ``metadata`` says which clock the times are on (``simulated``: the emulated
hardware's, never this machine's) and anything a reader must know (what was
aggregated). Pure: no I/O but :func:`write_trace`.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SIMULATED = "simulated"  # the clock of the cost model: seconds on the emulated hardware
WALL = "wall"  # this machine's monotonic clock: what real mode's actors actually did
BOTH_CLOCKS = "simulated and wall"  # each process on one clock, named for it (real mode)
WALL_PREFIX = "wall clock: "  # how the name of a process on the wall clock begins
MICROSECONDS = 1e6  # the format's ts and dur are microseconds
PICOSECOND_DIGITS = 6  # decimals of a microsecond written


@dataclass(frozen=True)
class Span:
    """``name`` on track ``track`` of process ``process``, from ``start_seconds`` for
    ``duration_seconds`` seconds of the trace's clock; ``args`` are shown with it."""

    process: str
    track: str
    name: str
    start_seconds: float
    duration_seconds: float
    args: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CounterSample:
    """The values of counter ``name`` of process ``process`` from ``time_seconds`` on (a series
    per key of ``values``)."""

    process: str
    name: str
    time_seconds: float
    values: Mapping[str, float]


@dataclass
class Trace:
    """Spans and counters on one clock, in the order added; processes and tracks are
    numbered (``pid``, ``tid``) in the order they first appear, and shown in that order."""

    clock: str = SIMULATED
    metadata: dict[str, Any] = field(default_factory=dict)
    spans: list[Span] = field(default_factory=list)
    counters: list[CounterSample] = field(default_factory=list)
    _tracks: dict[str, dict[str, int]] = field(default_factory=dict)

    def track(self, process: str, track: str) -> None:
        """Declare ``track`` of ``process`` (shown even if no span lands on it)."""
        tracks = self._tracks.setdefault(process, {})
        tracks.setdefault(track, len(tracks) + 1)

    def span(self, process: str, track: str, name: str, start_seconds: float,
             duration_seconds: float, **args: Any) -> Span:
        """Add a span (seconds of the trace's clock) and return it."""
        self.track(process, track)
        added = Span(process, track, name, start_seconds, duration_seconds, args)
        self.spans.append(added)
        return added

    def counter(self, process: str, name: str, time_seconds: float, **values: float) -> None:
        """Add a counter sample: each of ``values`` from ``time_seconds`` on."""
        self._tracks.setdefault(process, {})
        self.counters.append(CounterSample(process, name, time_seconds, values))

    def tracks(self) -> dict[str, list[str]]:
        """Each process's tracks, in the order they appeared."""
        return {process: list(tracks) for process, tracks in self._tracks.items()}

    def events(self) -> list[dict[str, Any]]:
        """The ``traceEvents`` list: metadata events, then spans, then counter samples."""
        pids = {process: pid for pid, process in enumerate(self._tracks, start=1)}
        events: list[dict[str, Any]] = []
        for process, tracks in self._tracks.items():
            pid = pids[process]
            events.append(_meta("process_name", pid, 0, name=process))
            events.append(_meta("process_sort_index", pid, 0, sort_index=pid))
            for track, tid in tracks.items():
                events.append(_meta("thread_name", pid, tid, name=track))
                events.append(_meta("thread_sort_index", pid, tid, sort_index=tid))
        events.extend({"name": s.name, "ph": "X", "pid": pids[s.process],
                       "tid": self._tracks[s.process][s.track], "ts": _us(s.start_seconds),
                       "dur": _us(s.duration_seconds), "args": dict(s.args)} for s in self.spans)
        events.extend({"name": c.name, "ph": "C", "pid": pids[c.process], "tid": 0,
                       "ts": _us(c.time_seconds), "args": dict(c.values)}
                      for c in self.counters)
        return events

    def document(self) -> dict[str, Any]:
        """The whole trace as the format's JSON object."""
        return {"traceEvents": self.events(), "displayTimeUnit": "ns",
                "metadata": {"clock": self.clock, "time_unit_of_ts_and_dur": "microseconds",
                             **self.metadata}}


def _us(seconds: float) -> float:
    """Seconds as the format's microseconds, to the picosecond (the cost model's figures
    carry no more; fewer digits keep a large trace small)."""
    return round(seconds * MICROSECONDS, PICOSECOND_DIGITS)


def _meta(kind: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    """A metadata (``"M"``) event: a process's or track's name or place in the list."""
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": args}


def trace_json(trace: Trace) -> bytes:
    """The trace's document as compact JSON (UTF-8): what a trace file holds."""
    return json.dumps(trace.document(), separators=(",", ":")).encode("utf-8")


def write_trace(trace: Trace | bytes, path: str | os.PathLike[str]) -> int:
    """Write ``trace`` (or its :func:`trace_json`) to ``path`` atomically (a temporary
    file beside it, then a rename, so a failure leaves no half-written file); return the
    bytes written."""
    target = Path(path)
    data = trace if isinstance(trace, bytes) else trace_json(trace)
    descriptor, temporary = tempfile.mkstemp(prefix=f".{target.name}-", suffix=".tmp",
                                             dir=target.parent)
    try:
        with os.fdopen(descriptor, "wb") as out:
            out.write(data)
        os.chmod(temporary, 0o644)  # mkstemp's 0600 is for secrets; a trace is shared
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return len(data)
