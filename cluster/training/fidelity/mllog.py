"""Step times from MLPerf Training result logs (``:::MLLOG`` lines), by a stated method.

An MLPerf result file is one run: JSON events after the ``:::MLLOG`` marker, each with
``time_ms`` (wall clock, milliseconds), ``key`` and ``value``. No event gives a step time;
it follows from the timed intervals and the samples each one trains:

- **epochs** (ResNet-50): each ``epoch_start`` .. ``epoch_stop`` trains ``train_samples``
  images (the whole ImageNet training set, 1,281,167), so a step of ``global_batch_size``
  images takes ``global_batch_size * epoch_ms / train_samples``.
- **blocks** (BERT): each ``block_start`` .. ``block_stop`` trains up to the next
  ``eval_accuracy``, whose ``metadata.epoch_num`` counts the samples trained so far; a
  block trains the difference from the previous one (the first, from 0).

Each interval gives seconds per sample; a run's figure is the median over its intervals
(the epochs that also write a checkpoint, and the first block with its warm-up, are
slower and fall away), and a configuration's the median over its runs. Evaluation runs
between the intervals, so it is not counted.

A log is read as untrusted text: lines are bounded, a line that is not an event is
skipped, and a log that does not hold what the method needs is a :class:`UserError`
saying what is missing.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from cluster.errors import UserError, quoted

MARKER = ":::MLLOG "
MAX_LINE_CHARACTERS = 65_536  # an event is a few hundred; longer lines are not events
MAX_EVENTS = 1_000_000  # a run logs a few hundred


@dataclass(frozen=True)
class Event:
    """One ``:::MLLOG`` event: when (milliseconds), what, and its metadata."""

    time_ms: float
    key: str
    value: Any
    metadata: dict[str, Any]


@dataclass(frozen=True)
class RunSteps:
    """One run's step time and what it came from."""

    step_seconds: float
    global_batch: int
    accumulation: int | None
    intervals: int  # epochs or blocks measured
    method: str  # "epochs" or "blocks"
    platform: str | None


def parse_events(lines: Iterable[str]) -> list[Event]:
    """The events in ``lines``; anything else (other output, broken JSON) is skipped."""
    events: list[Event] = []
    for line in lines:
        if len(line) > MAX_LINE_CHARACTERS:
            continue
        start = line.find(MARKER)
        if start < 0:
            continue
        event = _event(line[start + len(MARKER):])
        if event is not None:
            events.append(event)
            if len(events) > MAX_EVENTS:
                raise UserError(f"more than {MAX_EVENTS:,} MLLOG events in one log: this is "
                                "not one MLPerf run's result file")
    return events


def _event(text: str) -> Event | None:
    try:
        raw = json.loads(text)
    except ValueError:
        return None
    if not isinstance(raw, dict):
        return None
    time_ms, key = raw.get("time_ms"), raw.get("key")
    metadata = raw.get("metadata")
    if (isinstance(time_ms, bool) or not isinstance(time_ms, (int, float))
            or not isinstance(key, str)):
        return None
    return Event(float(time_ms), key, raw.get("value"),
                 metadata if isinstance(metadata, dict) else {})


def run_steps(events: list[Event], name: str = "the log") -> RunSteps:
    """The step time of one run (seconds per ``global_batch_size`` samples)."""
    facts = {event.key: event.value for event in events}
    global_batch = _count(facts.get("global_batch_size"), "global_batch_size", name)
    accumulation = facts.get("gradient_accumulation_steps")
    platform = facts.get("submission_platform")
    if _keys(events, "epoch_start"):
        train_samples = facts.get("train_samples")
        if isinstance(train_samples, list) and len(train_samples) == 1:
            train_samples = train_samples[0]
        samples = _count(train_samples, "train_samples", name)
        durations = _intervals(events, "epoch_start", "epoch_stop", name)
        per_sample = [seconds / samples for seconds in durations]
        method = "epochs"
    else:
        per_sample = _block_seconds_per_sample(events, name)
        method = "blocks"
    return RunSteps(global_batch * statistics.median(per_sample), global_batch,
                    accumulation if isinstance(accumulation, int) else None, len(per_sample),
                    method, platform if isinstance(platform, str) else None)


def _block_seconds_per_sample(events: list[Event], name: str) -> list[float]:
    durations = _intervals(events, "block_start", "block_stop", name)
    trained = [event.metadata.get("epoch_num") for event in events
               if event.key == "eval_accuracy"]
    counts = [float(n) for n in trained
              if isinstance(n, (int, float)) and not isinstance(n, bool)]
    if len(counts) < len(durations) or len(counts) != len(trained):
        raise UserError(f"{name}: each block needs an eval_accuracy event whose "
                        "metadata.epoch_num counts the samples trained; some are missing")
    done = [0.0, *counts[:len(durations)]]
    samples = [after - before for before, after in pairwise(done)]
    if min(samples) <= 0:
        raise UserError(f"{name}: the samples trained (eval_accuracy's epoch_num) must grow "
                        "from one block to the next")
    return [seconds / count for seconds, count in zip(durations, samples)]


def _keys(events: list[Event], key: str) -> list[Event]:
    return [event for event in events if event.key == key]


def _intervals(events: list[Event], start: str, stop: str, name: str) -> list[float]:
    """Seconds of each ``start`` .. ``stop`` interval, in order."""
    starts = [event.time_ms for event in _keys(events, start)]
    stops = [event.time_ms for event in _keys(events, stop)]
    if not starts or len(starts) != len(stops):
        raise UserError(f"{name}: {len(starts)} {start} and {len(stops)} {stop} events; "
                        "a run's result file has as many of each, at least one")
    seconds = [(b - a) / 1e3 for a, b in zip(starts, stops)]
    if min(seconds) <= 0:
        raise UserError(f"{name}: a {stop} comes before its {start}")
    return seconds


def _count(value: Any, key: str, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UserError(f"{name}: {key} must be a whole number of 1 or more, not "
                        f"{quoted(value, 40)}")
    return value


def median_run(runs: list[RunSteps]) -> float:
    """A configuration's step seconds: the median of its runs'."""
    if not runs:
        raise UserError("no runs to take a step time from")
    return statistics.median(run.step_seconds for run in runs)
