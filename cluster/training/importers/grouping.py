"""Units (module calls and functional ops, counted by a front end) grouped into layers.

Both front ends (:mod:`.torch_import`, :mod:`.onnx_import`) reduce a network to a list of
:class:`Unit`, in execution order: a call of a leaf module (``layer1.0.conv1``), of an
attention module (its ops together, as the built-ins count attention as one layer), or a
functional op in a container's ``forward`` (the residual ``add``). They record every
activation tensor as a :class:`Span`: its bytes, the unit that made it and the last unit
that reads it. This module turns them into :class:`Layer` rows the way the built-in
workloads are grouped (``cluster/training/workloads/resnet.py``, ``bert.py``):

- Outside transformer blocks (the ResNet rule): a layer starts at each unit with
  parameters, each pool and each op joining two activations (a residual addition);
  parameter-free units after it (ReLU, dropout, a flatten) join it. So a convolution, a
  batch norm with its ReLU, an addition with its ReLU are layers of their own.
- A transformer block (the module that called an attention unit): two layers, as
  ``transformer.py`` counts them, ``<block>.attention`` (what comes before the first
  dense unit after the attention: the norms, dropouts and residual addition) and
  ``<block>.ffn`` (the rest).
- ``output_bytes`` of a layer: every activation made up to its end and read after it,
  what crosses a pipeline cut there (the residual input still waited for included), as
  the built-ins count it. ``stashed_bytes``: what the front end saw kept for backward.
- A ``loss`` layer (softmax cross-entropy over the network's outputs) ends the list, as
  every built-in's does.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

from cluster.errors import SettingError
from cluster.training.importers.notes import UncountedOpsWarning, uncounted_message
from cluster.training.workloads.arithmetic import LOSS_FLOPS_PER_LOGIT
from cluster.training.workloads.layers import DType, Layer, LayerKind, Workload

STARTS_ALONE = (LayerKind.POOL,)
"""Kinds that start a layer even without parameters."""


@dataclass
class Unit:
    """One module call or functional op, per sample. ``scopes``: the module paths that
    enclose it, outermost first (the root's ``""`` left out); ``joins_activations``: an
    elementwise op of two activations (a residual addition), which starts a layer."""

    name: str
    kind: LayerKind
    scopes: tuple[str, ...] = ()
    parameters: int = 0
    forward_flops: int = 0
    stashed_bytes: int = 0
    joins_activations: bool = False
    uncounted_ops: set[str] = field(default_factory=set)


@dataclass
class Span:
    """An activation tensor's life: ``produced`` and ``last_use`` are unit indices (-1 for
    the network's input; ``len(units)`` for an output, which the loss reads)."""

    nbytes: int
    produced: int
    last_use: int


@dataclass
class Trace:
    """What a front end counted: units in order, activation spans, the ops it could not
    count (op name -> how many times), and the bytes of one input sample."""

    units: list[Unit] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    uncounted: dict[str, int] = field(default_factory=dict)
    input_bytes: int = 0

    def per_sample(self, batch: int) -> Trace:
        """The counts divided by the batch size (the front ends run a whole batch)."""
        for unit in self.units:
            unit.forward_flops //= batch
            unit.stashed_bytes //= batch
        for span in self.spans:
            span.nbytes //= batch
        self.input_bytes //= batch
        return self

    def not_counted(self, op: str) -> None:
        """Note an op whose FLOPs are unknown (reported, never silently zero), in the
        unit being counted too (the workload file names its layer)."""
        self.uncounted[op] = self.uncounted.get(op, 0) + 1
        if self.units:
            self.units[-1].uncounted_ops.add(op)


@dataclass(frozen=True)
class _Start:
    index: int
    name: str
    kind: LayerKind


def _blocks(units: Sequence[Unit]) -> list[str | None]:
    """The transformer block of each unit: the innermost of its scopes that directly
    called an attention unit (``layers.0`` for ``layers.0.self_attn``), or None."""
    callers = {u.scopes[-1] for u in units if u.kind is LayerKind.ATTENTION and u.scopes}
    found: list[str | None] = []
    for unit in units:
        inside = [scope for scope in unit.scopes if scope in callers]
        found.append(inside[-1] if inside else None)
    return found


def _block_starts(units: Sequence[Unit], first: int, last: int, block: str) -> list[_Start]:
    """A transformer block's layers: attention (from the block's start) and FFN (from the
    first dense unit after each attention)."""
    starts = [_Start(first, f"{block}.attention", LayerKind.ATTENTION)]
    seen_attention = False
    for i in range(first, last + 1):
        kind = units[i].kind
        if kind is LayerKind.ATTENTION and seen_attention and starts[-1].kind is LayerKind.DENSE:
            starts.append(_Start(i, f"{block}.attention", LayerKind.ATTENTION))
        elif kind is LayerKind.DENSE and seen_attention and starts[-1].kind is not LayerKind.DENSE:
            starts.append(_Start(i, f"{block}.ffn", LayerKind.DENSE))
        seen_attention = seen_attention or kind is LayerKind.ATTENTION
    return starts


def _starts_layer(unit: Unit) -> bool:
    return unit.parameters > 0 or unit.kind in STARTS_ALONE or unit.joins_activations


def layer_starts(units: Sequence[Unit]) -> list[_Start]:
    """Where each layer starts, its name and kind (the rules in the module's docstring)."""
    blocks = _blocks(units)
    starts: list[_Start] = []
    i = 0
    while i < len(units):
        block = blocks[i]
        if block is not None:
            last = i
            while last + 1 < len(units) and blocks[last + 1] == block:
                last += 1
            starts += _block_starts(units, i, last, block)
            i = last + 1
            continue
        if not starts or _starts_layer(units[i]) or blocks[i - 1] is not None:
            starts.append(_Start(i, units[i].name, units[i].kind))
        i += 1
    return starts


def _crossing_bytes(spans: Sequence[Span], unit_count: int) -> list[int]:
    """Bytes alive across the cut after each unit: made at or before it, read after it."""
    change = [0] * (unit_count + 2)
    for span in spans:
        begin, end = max(span.produced, 0), min(span.last_use, unit_count)
        if end > begin:  # alive across the cuts after units begin .. end-1
            change[begin] += span.nbytes
            change[end] -= span.nbytes
    crossing, running = [], 0
    for i in range(unit_count):
        running += change[i]
        crossing.append(running)
    return crossing


def _unique(name: str, used: dict[str, int]) -> str:
    """``name``, or ``name.1``, ``name.2`` ... when a module ran more than once."""
    count = used.get(name, 0)
    used[name] = count + 1
    return name if count == 0 else f"{name}.{count}"


def group_layers(trace: Trace, partials: DType) -> list[Layer]:
    """The layers of a trace, ending with the loss over the network's outputs."""
    units = trace.units
    starts = layer_starts(units)
    crossing = _crossing_bytes(trace.spans, len(units))
    layers, used = [], {"loss": 1}
    for n, start in enumerate(starts):
        end = starts[n + 1].index if n + 1 < len(starts) else len(units)
        members = units[start.index:end]
        layers.append(Layer(
            _unique(start.name, used), start.kind,
            parameters=sum(u.parameters for u in members),
            forward_flops=sum(u.forward_flops for u in members),
            output_bytes=crossing[end - 1],
            stashed_bytes=sum(u.stashed_bytes for u in members),
            uncounted_ops=tuple(sorted(set().union(*(u.uncounted_ops for u in members))))))
    outputs = sum(s.nbytes for s in trace.spans if s.last_use >= len(units))
    logits = outputs // partials.itemsize
    layers.append(Layer("loss", LayerKind.LOSS, parameters=0,
                        forward_flops=LOSS_FLOPS_PER_LOGIT * logits,
                        output_bytes=partials.itemsize, stashed_bytes=outputs))
    return layers


def build_workload(trace: Trace, name: str, partials: DType) -> Workload:
    """A workload of the trace's layers, in ``partials`` throughout (weights, gradients,
    activations: the dtype the network ran in), SGD with momentum's one optimiser value
    per parameter (edit ``optimizer_values_per_parameter`` in the file for Adam: 2)."""
    return Workload(name=name, layers=tuple(group_layers(trace, partials)),
                    input_bytes=trace.input_bytes, weight_dtype=partials,
                    gradient_dtype=partials, partials_dtype=partials,
                    optimizer_values_per_parameter=1)


def finish_import(trace: Trace, name: str, partials: DType, strict: bool) -> Workload:
    """The workload of a trace; ops not counted are an :class:`UncountedOpsWarning`
    naming them, or with ``strict`` a UserError."""
    if trace.uncounted:
        message = uncounted_message(trace.uncounted)
        if strict:
            raise SettingError("strict", "{message}; {strict} refuses a partial count (leave "
                               "it out to import with these ops at 0 FLOPs)", message=message)
        warnings.warn(message, UncountedOpsWarning, stacklevel=3)
    return build_workload(trace, name, partials)
