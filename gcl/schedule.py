"""Schedules as pure data: which IPU sends which element range to which IPU, superstep by
superstep, and whether the receiver reduces it or copies it.

Every IPU works on a buffer of ``slots x chunk`` elements (the user's data, padded so that
it splits evenly: padding travels too, and is dropped at the end). A :class:`Phase` is
``steps`` consecutive supersteps that share the same transfers (source, destination,
element count); only the element ranges moved change from step to step, and
:meth:`Phase.transfers` gives them for any step. So a 1,023-step ring over 65,536 IPUs is
one small record, costed once, and the real-data executor still gets every byte range.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gcl.collectives import CollectiveName, DType

WORK = "work"  # the buffer a collective reduces or gathers in place
OUT = "out"  # a second buffer, for collectives that must not overwrite their input

LOCAL, GLOBAL, FLAT = "local", "global", "flat"  # where a phase's traffic runs


@dataclass(frozen=True)
class Transfers:
    """One superstep's transfers, vectorised: element ranges of ``src_buffer`` on ``src``
    go to ``dst_offset`` of ``dst_buffer`` on ``dst``; reduced there or copied."""

    src: np.ndarray
    dst: np.ndarray
    src_offset: np.ndarray
    dst_offset: np.ndarray
    count: np.ndarray
    reduce: bool
    src_buffer: str = WORK
    dst_buffer: str = WORK


@dataclass(frozen=True)
class RingOffsets:
    """Offsets for ring steps: at step ``k`` flow ``f`` moves the chunk of the ring member
    at position ``(pos[f] - k - shift) mod length[f]``, that is elements
    ``base[f] + slot[start[f] + that position] * chunk[f]`` onward, same offset both ends."""

    slot: np.ndarray  # slot owned by each ring position, rings concatenated
    start: np.ndarray  # per flow: where its ring begins in ``slot``
    pos: np.ndarray  # per flow: the sender's position in its ring
    length: np.ndarray  # per flow: its ring's length
    base: np.ndarray  # per flow: element offset of the block the ring works in
    chunk: np.ndarray  # per flow: elements per chunk
    shift: int  # 1 for reduce-scatter steps, 0 for all-gather steps

    def at(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """Per flow, the (source, destination) element offsets at step ``step``."""
        position = (self.pos - step - self.shift) % self.length
        offset = self.base + self.slot[self.start + position] * self.chunk
        return offset, offset

    @staticmethod
    def concat(parts: list[RingOffsets]) -> RingOffsets:
        """The offsets of ``parts``' flows side by side (rings renumbered into one array)."""
        starts: list[np.ndarray] = []
        total = 0
        for part in parts:
            starts.append(part.start + total)
            total += len(part.slot)
        return RingOffsets(
            slot=np.concatenate([p.slot for p in parts]),
            start=np.concatenate(starts),
            pos=np.concatenate([p.pos for p in parts]),
            length=np.concatenate([p.length for p in parts]),
            base=np.concatenate([p.base for p in parts]),
            chunk=np.concatenate([p.chunk for p in parts]),
            shift=parts[0].shift,
        )


@dataclass(frozen=True)
class FixedOffsets:
    """Offsets that do not change from step to step (single-step phases, mostly)."""

    src_offset: np.ndarray
    dst_offset: np.ndarray

    def at(self, step: int) -> tuple[np.ndarray, np.ndarray]:
        """Per flow, the (source, destination) element offsets: the same at every step."""
        return self.src_offset, self.dst_offset

    @staticmethod
    def concat(parts: list[FixedOffsets]) -> FixedOffsets:
        """The offsets of ``parts``' flows side by side."""
        return FixedOffsets(np.concatenate([p.src_offset for p in parts]),
                            np.concatenate([p.dst_offset for p in parts]))


@dataclass(frozen=True)
class Phase:
    """``steps`` supersteps with the same transfers ``src[f] -> dst[f]`` of ``count[f]``
    elements each; ``offsets`` says which elements at each step."""

    label: str
    scope: str
    steps: int
    src: np.ndarray
    dst: np.ndarray
    count: np.ndarray
    reduce: bool
    offsets: RingOffsets | FixedOffsets
    src_buffer: str = WORK
    dst_buffer: str = WORK

    def transfers(self, step: int) -> Transfers:
        """The concrete transfers of superstep ``step`` (0-based) of this phase."""
        if not 0 <= step < self.steps:
            raise IndexError(f"phase {self.label!r} has {self.steps} steps, not step {step}")
        src_offset, dst_offset = self.offsets.at(step)
        return Transfers(self.src, self.dst, src_offset, dst_offset, self.count, self.reduce,
                         self.src_buffer, self.dst_buffer)

    @staticmethod
    def concurrent(parts: list[Phase], label: str | None = None) -> Phase:
        """Run phases of the same shape in the same supersteps (several groups at once, or
        the two directions of a ring pair): their transfers are concatenated."""
        first = parts[0]
        for part in parts[1:]:
            if (part.steps, part.reduce, type(part.offsets), part.src_buffer, part.dst_buffer) != (
                    first.steps, first.reduce, type(first.offsets), first.src_buffer,
                    first.dst_buffer):
                raise ValueError("only phases of the same shape can run in the same supersteps")
        if len(parts) == 1 and label is None:
            return first
        return Phase(
            label=label or first.label,
            scope=first.scope if all(p.scope == first.scope for p in parts) else FLAT,
            steps=first.steps,
            src=np.concatenate([p.src for p in parts]),
            dst=np.concatenate([p.dst for p in parts]),
            count=np.concatenate([p.count for p in parts]),
            reduce=first.reduce,
            offsets=_concat_offsets([p.offsets for p in parts]),
            src_buffer=first.src_buffer,
            dst_buffer=first.dst_buffer,
        )


def _concat_offsets(offsets: list[RingOffsets | FixedOffsets]) -> RingOffsets | FixedOffsets:
    """Concatenate the offsets of phases of one shape: all of one type, as
    :meth:`Phase.concurrent` checks."""
    if isinstance(offsets[0], RingOffsets):
        return RingOffsets.concat([o for o in offsets if isinstance(o, RingOffsets)])
    return FixedOffsets.concat([o for o in offsets if isinstance(o, FixedOffsets)])


@dataclass(frozen=True)
class Schedule:
    """A whole collective on one or more replica groups (run concurrently).

    ``groups[g]`` lists the IPUs of group ``g`` in rank order; ``slot_of_rank[g][r]`` is
    the slot of the buffer that rank ``r`` owns at the end of a reduce-scatter (or holds
    its input in, for an all-gather). Each IPU's buffer has ``slots * chunk`` elements.
    """

    collective: CollectiveName
    algorithm: str
    dtype: DType
    itemsize: int
    count: int  # the user's elements per replica (input side)
    chunk: int
    slots: int
    groups: tuple[np.ndarray, ...]
    slot_of_rank: tuple[np.ndarray, ...]
    phases: tuple[Phase, ...]
    root: int = 0
    notes: tuple[str, ...] = field(default=())

    @property
    def buffer_elements(self) -> int:
        """Elements of each IPU's buffer: ``slots * chunk``."""
        return self.slots * self.chunk

    @property
    def supersteps(self) -> int:
        """Supersteps of the whole schedule, every phase's steps summed."""
        return sum(p.steps for p in self.phases)

    @property
    def group_size(self) -> int:
        """Ranks (IPUs) per replica group; every group has the same size."""
        return len(self.groups[0])
