"""Step times from MLPerf Training result logs (``:::MLLOG`` lines), by a stated method.

An MLPerf result file is one run: JSON events after the ``:::MLLOG`` marker, each with
``time_ms`` (wall clock, milliseconds), ``key`` and ``value``. No event gives a step time;
it follows from the timed intervals and the steps each one holds. What the log does not
say (how the submission's code cuts its intervals) comes from that code, cited below.

- **epochs** (ResNet-50, TensorFlow 1): the host runs the device loop in
  ``session.run`` calls of ``(train_samples // global_batch_size) // logs_per_epoch``
  steps each, and logs an epoch after ``logs_per_epoch`` calls (Graphcore's
  ``train.py``: ``log_freq = iterations_per_epoch // opts['logs_per_epoch']``, 5 in every
  submitted ``configs.yml``). So a logged epoch holds exactly ``logs_per_epoch`` calls'
  steps, not ``train_samples / global_batch_size`` (1.1% fewer on a POD64). An epoch that
  wrote a checkpoint (every fourth: the epochs the log later evaluates, ``eval_start``'s
  ``epoch_num``) is about 2 s longer, and on the larger systems the epoch after it is
  slow too; both are left out, as they are not steady training.
- **blocks** (BERT, PopART): each ``block_start`` .. ``block_stop`` trains up to the next
  ``eval_accuracy``, whose ``metadata.epoch_num`` is the trigger it passed. How many
  steps that is depends on what the trigger counted (Graphcore's ``bert.py``, v1.1
  L1236-1237): a run of several instances (poprun) counts whole steps, ``count *
  global_batch_size > trigger``, so block ``k`` ends after ``trigger_k //
  global_batch_size + 1`` steps exactly; a single instance, and every v1.0 run, counts
  the real sequences trained. The runs train packed sequences whose packs hold slightly
  more than the 2 sequences the logged global batch assumes, so a real-sequence block
  holds ``samples / (global_batch_size * sequences_per_sample)`` steps, with
  ``sequences_per_sample`` real sequences per logged one, measured on the step-counted
  runs by :func:`packing_ratio` (their ``train_samples`` is the real count).

A run's figure is the median over its steady epochs (the odd epoch with one call more
falls away), or its blocks' seconds over their steps, the first block (with its warm-up)
left out: a real-sequence block holds a whole number of steps, one either side of the
fraction the method gives it, so a median of per-block figures would lean to one side
and the sum does not. A configuration's figure is the median over its runs. Evaluation
runs between the intervals, so it is not counted.

A log is read as untrusted text: lines are bounded, a line that is not an event is
skipped, and a log that does not hold what the method needs is a :class:`UserError`
saying what is missing.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate, pairwise
from typing import Any, TypeGuard

from cluster.errors import UserError, quoted

MARKER = ":::MLLOG "
MAX_LINE_CHARACTERS = 65_536  # an event is a few hundred; longer lines are not events
MAX_EVENTS = 1_000_000  # a run logs a few hundred
LOGS_PER_EPOCH = 5  # ResNet's logs_per_epoch in every submitted configs.yml


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
            or not math.isfinite(time_ms) or not isinstance(key, str)):
        return None
    return Event(float(time_ms), key, raw.get("value"),
                 metadata if isinstance(metadata, dict) else {})


def run_steps(events: list[Event], name: str = "the log", *,
              logs_per_epoch: int = LOGS_PER_EPOCH,
              sequences_per_sample: float | None = None) -> RunSteps:
    """The step time of one run (seconds per step of ``global_batch_size`` samples).

    ``logs_per_epoch``: ResNet's ``session.run`` calls per logged epoch. BERT blocks:
    with ``sequences_per_sample`` None they end on whole steps (a run of several
    instances); otherwise on real sequences, that many per logged sample (the module
    docstring)."""
    facts = {event.key: event.value for event in events}
    global_batch = _count(facts.get("global_batch_size"), "global_batch_size", name)
    accumulation = facts.get("gradient_accumulation_steps")
    platform = facts.get("submission_platform")
    if _keys(events, "epoch_start"):
        samples = _count(_single(facts.get("train_samples")), "train_samples", name)
        per_step = _epoch_seconds_per_step(events, name, samples // global_batch,
                                           logs_per_epoch)
        seconds, intervals, method = statistics.median(per_step), len(per_step), "epochs"
    else:
        steps = (_counted_block_steps(events, name, global_batch)
                 if sequences_per_sample is None
                 else [samples / (global_batch * sequences_per_sample)
                       for samples in _block_samples(events, name)])
        durations = _intervals(events, "block_start", "block_stop", name)
        steady = slice(1 if len(durations) > 1 else 0, None)  # the first carries warm-up
        seconds = sum(durations[steady]) / sum(steps[steady])
        intervals, method = len(durations[steady]), "blocks"
    return RunSteps(seconds, global_batch,
                    accumulation if isinstance(accumulation, int) else None, intervals,
                    method, platform if isinstance(platform, str) else None)


def packing_ratio(events: list[Event], name: str = "the log") -> float:
    """Real sequences per logged sample in a step-counted BERT run: its ``train_samples``
    (the real sequences, summed over the instances) over the steps it ran (the last
    block's end) times ``global_batch_size``."""
    facts = {event.key: event.value for event in events}
    global_batch = _count(facts.get("global_batch_size"), "global_batch_size", name)
    real = _count(_single(facts.get("train_samples")), "train_samples", name)
    steps = sum(_counted_block_steps(events, name, global_batch))
    return real / (steps * global_batch)


def _epoch_seconds_per_step(events: list[Event], name: str, steps_per_epoch: int,
                            logs_per_epoch: int) -> list[float]:
    """Seconds per step of each steady epoch: not one that wrote a checkpoint (an
    evaluated epoch) nor the one after it."""
    steps = (steps_per_epoch // logs_per_epoch) * logs_per_epoch
    if steps < 1:
        raise UserError(f"{name}: an epoch of {steps_per_epoch} steps holds no whole "
                        f"session.run of {logs_per_epoch} logs per epoch")
    evaluated = {number for event in _keys(events, "eval_start")
                 if _whole(number := event.metadata.get("epoch_num"))}
    durations = _intervals(events, "epoch_start", "epoch_stop", name)
    raw = [event.metadata.get("epoch_num") for event in _keys(events, "epoch_start")]
    numbers = [number for number in raw if _whole(number)]
    if len(numbers) != len(raw):
        raise UserError(f"{name}: each epoch_start needs a whole metadata.epoch_num, to tell "
                        "the epochs that wrote a checkpoint from the others")
    steady = [seconds / steps for seconds, number in zip(durations, numbers)
              if not {number, number - 1} & evaluated]
    if not steady:
        raise UserError(f"{name}: every epoch wrote a checkpoint or followed one; no steady "
                        "epoch to take a step time from")
    return steady


def _block_samples(events: list[Event], name: str) -> list[float]:
    """The samples each block trained: the difference of successive triggers passed
    (``eval_accuracy``'s ``metadata.epoch_num``), the first from 0."""
    trained = [event.metadata.get("epoch_num") for event in events
               if event.key == "eval_accuracy"]
    counts = [float(n) for n in trained
              if isinstance(n, (int, float)) and not isinstance(n, bool) and math.isfinite(n)]
    blocks = len(_keys(events, "block_start"))
    if len(counts) < blocks or len(counts) != len(trained):
        raise UserError(f"{name}: each block needs an eval_accuracy event whose "
                        "metadata.epoch_num counts the samples trained; some are missing")
    samples = [after - before for before, after in pairwise([0.0, *counts[:blocks]])]
    if min(samples, default=0) <= 0:
        raise UserError(f"{name}: the samples trained (eval_accuracy's epoch_num) must grow "
                        "from one block to the next")
    return samples


def _counted_block_steps(events: list[Event], name: str, global_batch: int) -> list[int]:
    """Steps in each block of a step-counted run: block ``k`` ends after
    ``trigger_k // global_batch + 1`` steps, and at least one step after the previous
    block (the trigger is checked after each step)."""
    ends: list[int] = []
    for trigger in accumulate(_block_samples(events, name)):
        ends.append(max(round(trigger) // global_batch + 1, ends[-1] + 1 if ends else 1))
    return [after - before for before, after in pairwise([0, *ends])]


def _whole(value: object) -> TypeGuard[int]:
    """Whether ``value`` is a whole number (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool)


def _single(value: Any) -> Any:
    """A count logged as a one-element list (summed over instances) or as itself."""
    return value[0] if isinstance(value, list) and len(value) == 1 else value


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
