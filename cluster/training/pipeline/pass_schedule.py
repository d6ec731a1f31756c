"""A pipeline schedule as pure data: which stage runs which pass of which micro-batch, in
which order, and so what crosses each stage boundary when.

Pipelining (000, 001: "stages on successive IPUs, batches B1, B2, ... in flight; for
training: forward, backward with recomputation, weight update") runs a replica's layers as
``stages`` stages on successive IPUs. Each stage runs the forward pass of every
micro-batch and, later, its backward pass, in the order :attr:`PipelineSchedule.order`
gives. The dependencies are fixed by the model, not by the schedule: the forward of
micro-batch ``m`` on stage ``s`` needs the activation stage ``s - 1`` computed for ``m``;
the backward of ``m`` on stage ``s`` needs the gradient stage ``s + 1`` computed for
``m`` (the last stage starts the backward from its own forward's loss). A schedule only
chooses the order within each stage, which sets the bubble and how many micro-batches'
activations each stage keeps stashed. A lock-step schedule also fixes each op's cycle:
every IPU runs its ops of a cycle, then all stages' transfers cross at once (PopART's
pipeline, :mod:`.schedules.popart`).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import pairwise

from cluster.errors import SettingError, UserError
from cluster.model.text_enum import TextEnum


class TooFewMicroBatches(UserError):
    """A schedule that cannot run this many micro-batches through this many stages;
    ``needed`` is the fewest it can run."""

    def __init__(self, message: str, needed: int) -> None:
        super().__init__(message)
        self.needed = needed

    def __reduce__(self) -> tuple[type[TooFewMicroBatches], tuple[str, int]]:
        return type(self), (str(self), self.needed)  # across processes (Ray) whole


class Pass(TextEnum):
    """Which way a micro-batch goes through a stage."""

    FORWARD = "forward"
    BACKWARD = "backward"


@dataclass(frozen=True, order=True)
class Op:
    """Stage ``stage`` runs pass ``pass_`` of micro-batch ``micro``."""

    stage: int
    pass_: Pass
    micro: int


@dataclass(frozen=True)
class PipelineSchedule:
    """Each stage's ops in the order it runs them (``order[s]`` for stage ``s``) and, for
    a lock-step schedule, the cycle each runs in (``cycles[s][i]`` for ``order[s][i]``;
    None: each op starts as soon as its stage is free and its input has arrived)."""

    name: str
    stages: int
    micro_batches: int
    order: tuple[tuple[Op, ...], ...]
    cycles: tuple[tuple[int, ...], ...] | None = None

    def __post_init__(self) -> None:
        check_schedule(self)

    def dependency(self, op: Op) -> Op | None:
        """The op of another stage whose output ``op`` needs, or None (stage 0's forward
        reads the host's input; the last stage's backward starts from its own loss)."""
        if op.pass_ is Pass.FORWARD:
            return Op(op.stage - 1, Pass.FORWARD, op.micro) if op.stage > 0 else None
        if op.stage < self.stages - 1:
            return Op(op.stage + 1, Pass.BACKWARD, op.micro)
        return None

    def rounds(self) -> list[list[Op]]:
        """The ops in lock-step rounds, as soon as each can run: an op's round follows
        the previous op of its stage and the op it depends on. Real mode runs a round's
        ops at once, then moves what they produced across the stage boundaries."""
        round_of: dict[Op, int] = {}
        last_round = [-1] * self.stages
        for op in self.dependency_order():
            dependency = self.dependency(op)
            after = round_of[dependency] if dependency is not None else -1
            round_of[op] = last_round[op.stage] = 1 + max(last_round[op.stage], after)
        rounds: list[list[Op]] = [[] for _ in range(1 + max(round_of.values()))]
        for op, index in sorted(round_of.items(), key=lambda item: (item[1], item[0])):
            rounds[index].append(op)
        return rounds

    def stashed(self) -> list[int]:
        """Per stage, the most micro-batches whose forward has run and backward not yet:
        how many micro-batches' activations the stage keeps at once."""
        most = []
        for ops in self.order:
            held = peak = 0
            for op in ops:
                held += 1 if op.pass_ is Pass.FORWARD else -1
                peak = max(peak, held)
            most.append(peak)
        return most

    def dependency_order(self) -> list[Op]:
        """Every op after the ops it needs; a ValueError if the order deadlocks."""
        done: list[Op] = []
        finished: set[Op] = set()
        next_index = [0] * self.stages
        while len(done) < self.stages * 2 * self.micro_batches:
            progressed = False
            for stage, ops in enumerate(self.order):
                while next_index[stage] < len(ops):
                    op = ops[next_index[stage]]
                    dependency = self.dependency(op)
                    if dependency is not None and dependency not in finished:
                        break
                    done.append(op)
                    finished.add(op)
                    next_index[stage] += 1
                    progressed = True
            if not progressed:
                waiting = [ops[i] for ops, i in zip(self.order, next_index) if i < len(ops)]
                raise ValueError(f"pipeline schedule {self.name!r} deadlocks: every stage waits "
                                 f"({', '.join(map(describe, waiting))})")
        return done


def describe(op: Op) -> str:
    """``F3@1``: the forward of micro-batch 3 on stage 1 (``B`` for backward)."""
    return f"{'F' if op.pass_ is Pass.FORWARD else 'B'}{op.micro}@{op.stage}"


def check_schedule(schedule: PipelineSchedule) -> None:
    """ValueError unless every stage runs each micro-batch's forward, then its backward,
    once, and the order can run (no deadlock)."""
    if schedule.stages < 1 or schedule.micro_batches < 1:
        raise ValueError("a pipeline needs at least one stage and one micro-batch")
    if len(schedule.order) != schedule.stages:
        raise ValueError(f"{schedule.name!r}: {len(schedule.order)} stage orders for "
                         f"{schedule.stages} stages")
    for stage, ops in enumerate(schedule.order):
        expected = {Op(stage, p, m) for p in Pass for m in range(schedule.micro_batches)}
        if len(ops) != len(expected) or set(ops) != expected:
            raise ValueError(f"{schedule.name!r}: stage {stage} must run the forward and the "
                             "backward of every micro-batch once")
        seen: set[int] = set()
        for op in ops:
            if op.pass_ is Pass.FORWARD:
                seen.add(op.micro)
            elif op.micro not in seen:
                raise ValueError(f"{schedule.name!r}: {describe(op)} runs before its forward")
    schedule.dependency_order()
    if schedule.cycles is not None:
        _check_cycles(schedule, schedule.cycles)


def _check_cycles(schedule: PipelineSchedule, cycles: tuple[tuple[int, ...], ...]) -> None:
    """ValueError unless each op has a cycle of 0 or more, a stage's cycles never go
    back, and an op runs in a later cycle than the op of another stage it needs (what
    that op produced crosses at the end of its cycle)."""
    if len(cycles) != schedule.stages:
        raise ValueError(f"{schedule.name!r}: {len(cycles)} stage cycles for "
                         f"{schedule.stages} stages")
    cycle_of: dict[Op, int] = {}
    for ops, stage_cycles in zip(schedule.order, cycles):
        if len(stage_cycles) != len(ops) or any(c < 0 for c in stage_cycles) or any(
                b < a for a, b in pairwise(stage_cycles)):
            raise ValueError(f"{schedule.name!r}: each stage needs a cycle of 0 or more per "
                             "op, in the order it runs them")
        cycle_of.update(zip(ops, stage_cycles))
    for op, cycle in cycle_of.items():
        dependency = schedule.dependency(op)
        if dependency is not None and cycle_of[dependency] >= cycle:
            raise ValueError(f"{schedule.name!r}: {describe(op)} runs in cycle {cycle}, not "
                             f"after {describe(dependency)} (cycle {cycle_of[dependency]})")


def check_shape(stages: int, micro_batches: int) -> None:
    """A SettingError unless there is at least one stage and one micro-batch."""
    if stages < 1:
        raise SettingError("ipus_per_replica", "a pipeline needs at least one stage "
                           "({ipus_per_replica} 1 or more)")
    if micro_batches < 1:
        raise SettingError("accumulation", "a pipeline needs at least one micro-batch "
                           "({accumulation} 1 or more)")
