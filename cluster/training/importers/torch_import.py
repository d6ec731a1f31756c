"""A ``torch.nn.Module`` as a :class:`Workload`: one traced forward pass, counted by
PyTorch's own tools.

The module runs once in training mode on a random input of ``input_shape`` (on the device
of its parameters: a model built under ``torch.device("meta")`` is counted without memory
or arithmetic). Three PyTorch mechanisms watch it:

- module forward hooks name each op by the module that ran it (``layer1.0.conv1``);
- a ``TorchDispatchMode`` sees every ATen op: products are counted by
  ``torch.utils.flop_counter``'s formulas (the ones ``FlopCounterMode`` uses), the rest
  per element (:mod:`.op_costs`), except what is computed from no input or parameter
  (a dropout mask made and scaled); parameters are counted where first used (a tied
  weight once); every tensor's bytes, maker and last reader give the bytes crossing each cut;
- ``torch.autograd.graph.saved_tensors_hooks`` sees what autograd keeps for backward:
  the stashed bytes (each tensor once, parameters not).

:mod:`.grouping` turns the units into layers. Counts are per sample: divided by
``input_shape[0]``. The module's buffers (batch-norm statistics) are put back afterwards.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from cluster.errors import SettingError, UserError
from cluster.training.importers.forward_memory import check_forward_fits
from cluster.training.importers.grouping import Span, Trace, Unit, finish_import
from cluster.training.importers.notes import (
    FORMAT_PRICED_AS,
    NumberFormatWarning,
    UnusedParametersWarning,
    format_message,
    unused_message,
    unused_modules,
)
from cluster.training.importers.op_costs import (
    CREATES,
    FREE,
    RESIDUAL_OPS,
    class_kind,
    element_kind,
    is_fused,
    normal_name,
    per_element_flops,
    stronger,
)
from cluster.training.importers.recurrent import (
    recurrent_flops,
    torch_positions,
    torch_recurrent,
)
from cluster.training.importers.torch_factory import one_line, require_torch
from cluster.training.workloads.layers import DType, LayerKind, Workload

if TYPE_CHECKING:
    import torch

MAX_INPUT_DIMENSIONS = 8
MAX_INPUT_ELEMENTS = 2**28  # a 1 GiB float32 input: a typo such as 1,3,22400,22400 stops


def check_input_shape(shape: Sequence[int]) -> tuple[int, ...]:
    """A shape of 1 to 8 whole dimensions, each at least 1 (the first is the batch)."""
    dims = tuple(shape)
    if not 1 <= len(dims) <= MAX_INPUT_DIMENSIONS or any(
            isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in dims):
        raise UserError(f"input shape {','.join(map(str, dims))} must be 1 to "
                        f"{MAX_INPUT_DIMENSIONS} whole numbers of 1 or more, batch first, "
                        "e.g. 1,3,224,224")
    elements = 1
    for size in dims:
        elements *= size
    if elements > MAX_INPUT_ELEMENTS:
        raise UserError(f"input shape {','.join(map(str, dims))} holds {elements:,} elements, "
                        f"over the {MAX_INPUT_ELEMENTS:,} an import runs; one sample (batch 1) "
                        "is enough")
    return dims


def _dtype_of(module: torch.nn.Module, torch_module: Any) -> Any:
    for parameter in module.parameters():
        if parameter.is_floating_point():
            return parameter.dtype
    return torch_module.float32


def _partials(dtype: Any, torch_module: Any) -> DType:
    """The IPU format a torch dtype is priced in; bfloat16 and float64 with a note."""
    shown = str(dtype).removeprefix("torch.")
    if shown in FORMAT_PRICED_AS:
        warnings.warn(format_message(shown), NumberFormatWarning, stacklevel=4)
    return DType.FLOAT16 if dtype in (torch_module.float16, torch_module.bfloat16) \
        else DType.FLOAT32


def _nbytes(tensor: Any) -> int:
    """A tensor's bytes as priced: a float64 one as float32 (the IPU's widest)."""
    size = 4 if str(tensor.dtype) == "torch.float64" else tensor.element_size()
    return int(tensor.numel()) * size


class _Recorder:
    """The trace being built: units, activation spans by tensor identity, parameters."""

    def __init__(self, module: torch.nn.Module, torch_module: Any) -> None:
        self.torch = torch_module
        self.trace = Trace()
        self.params = {id(p): p for p in module.parameters()}
        self.constants = {id(b) for b in module.buffers()} | set(self.params)
        self.derived = set(self.params)  # tensors computed from the input or parameters
        self.spans: dict[int, Span] = {}
        self.alive: list[Any] = []  # keeps traced tensors, so that their ids stay theirs
        self.stashed: set[int] = set()
        self.frames: list[tuple[str, Any, bool]] = []  # (path, module, starts a unit)
        self.recurrent_frames: list[bool] = []  # per frame: a recurrent module's

    def unit(self) -> Unit:
        if not self.trace.units:
            self.trace.units.append(Unit("input", LayerKind.ELEMENTWISE))
        return self.trace.units[-1]

    def scopes(self) -> tuple[str, ...]:
        return tuple(path for path, _, _ in self.frames if path)

    def enter(self, path: str, module: Any, args: tuple[Any, ...]) -> None:
        """A module's forward begins: a new unit if it is a leaf or an attention module
        not already inside one; a recurrent module is priced whole, from its sizes."""
        inside = any(starts or is_fused(type(m).__name__) for _, m, starts in self.frames)
        name = type(module).__name__
        starts = not inside and (is_fused(name) or not any(True for _ in module.children()))
        if starts:
            kind = class_kind(name) or LayerKind.ELEMENTWISE
            self.trace.units.append(Unit(path or name, kind, scopes=self.scopes()))
        recurrent = torch_recurrent(module) is not None
        if recurrent and not self.in_recurrent():
            self.recurrent(module, args)
        self.frames.append((path, module, starts))
        self.recurrent_frames.append(recurrent)

    def recurrent(self, module: Any, args: tuple[Any, ...]) -> None:
        """Price an LSTM, GRU or RNN by its gate formulas (:mod:`.recurrent`); the ops
        it runs are then not priced one by one."""
        layer = torch_recurrent(module)
        assert layer is not None
        positions = torch_positions(args[0], layer) if args else None
        unit = self.unit()
        if positions is None:
            self.trace.not_counted(type(module).__name__)
            return
        unit.forward_flops += recurrent_flops(layer, positions)
        unit.kind = stronger(unit.kind, LayerKind.DENSE)

    def in_recurrent(self) -> bool:
        """Inside a recurrent module: its FLOPs are counted whole, on entry."""
        return any(self.recurrent_frames)

    def leave(self) -> None:
        """A module's forward ended (or raised)."""
        self.frames.pop()
        self.recurrent_frames.pop()

    def in_unit_module(self) -> bool:
        return any(starts for _, _, starts in self.frames)

    def tensors(self, value: Any) -> list[Any]:
        leaves = self.torch.utils._pytree.tree_leaves(value)
        return [t for t in leaves if isinstance(t, self.torch.Tensor)]

    def produce(self, tensor: Any, index: int) -> None:
        if id(tensor) in self.constants:
            return
        span = Span(_nbytes(tensor), index, index)
        self.trace.spans.append(span)
        self.spans[id(tensor)] = span
        self.alive.append(tensor)

    def op(self, func: Any, args: tuple[Any, ...], kwargs: dict[str, Any], out: Any) -> None:
        """Count one ATen op into the current unit (a new one for a functional op)."""
        name = normal_name(str(func))
        inputs, outputs = self.tensors((args, kwargs)), self.tensors(out)
        activations = [t for t in inputs if id(t) not in self.constants]
        if not self.in_unit_module() and name not in FREE:
            self.functional_unit(name, activations, outputs)
        unit, index = self.unit(), len(self.trace.units) - 1
        flops, kind = (0, LayerKind.ELEMENTWISE) if self.in_recurrent() else \
            self.flops(func, name, args, kwargs, out, inputs, outputs)
        if name not in CREATES and any(id(t) in self.derived for t in inputs):
            self.derived.update(id(t) for t in outputs)
        else:  # a dropout mask made and scaled, num_batches_tracked += 1: not the network
            flops = 0
        unit.forward_flops += flops
        unit.kind = stronger(unit.kind, kind)
        for tensor in inputs:
            if id(tensor) in self.params:
                unit.parameters += self.params.pop(id(tensor)).numel()
            elif id(tensor) in self.spans:
                self.spans[id(tensor)].last_use = index
        for tensor in outputs:
            self.produce(tensor, index)

    def functional_unit(self, name: str, activations: list[Any], outputs: list[Any]) -> None:
        """A new unit for an op run by a container's own ``forward`` (``layer1.0.add``);
        an addition of two activations of the output's size is a skip connection."""
        scope = self.scopes()
        size = outputs[0].numel() if outputs else -1
        joins = name in RESIDUAL_OPS and sum(t.numel() == size for t in activations) >= 2
        self.trace.units.append(Unit(f"{scope[-1]}.{name}" if scope else name,
                                     LayerKind.ELEMENTWISE, scopes=scope,
                                     joins_activations=joins))

    def flops(self, func: Any, name: str, args: Any, kwargs: Any, out: Any,
              inputs: list[Any], outputs: list[Any]) -> tuple[int, LayerKind]:
        """FLOPs and kind of one op: PyTorch's formula for products, else the tables."""
        from torch.utils.flop_counter import flop_registry, sdpa_flop_count

        packet = func._overloadpacket
        if packet in flop_registry:
            try:
                count = int(flop_registry[packet](*args, **kwargs, out_val=out))
            except Exception:  # noqa: BLE001 - a formula that fails is an op not counted
                self.trace.not_counted(str(packet).removeprefix("aten."))
                return 0, LayerKind.DENSE
            kind = LayerKind.CONV if "conv" in name else (
                LayerKind.ATTENTION if "attention" in name else LayerKind.DENSE)
            return count, kind
        if name.startswith("scaleddotproduct") and len(inputs) >= 3:
            q, k, v = inputs[:3]
            return int(sdpa_flop_count(q.shape, k.shape, v.shape)), LayerKind.ATTENTION
        if name == "embedding":
            return 0, LayerKind.EMBEDDING
        window = _window(args) if "pool" in name else 1
        out_elements = sum(t.numel() for t in outputs[:1])
        tabled = per_element_flops(name, out_elements, sum(t.numel() for t in inputs[:1]),
                                   window)
        if tabled is None:
            self.trace.not_counted(str(packet).removeprefix("aten."))
            return 0, LayerKind.ELEMENTWISE
        return tabled, element_kind(name) or LayerKind.ELEMENTWISE

    def stash(self, tensor: Any) -> Any:
        """saved_tensors_hooks' pack: count what autograd keeps, once per tensor."""
        base = tensor._base if tensor._base is not None else tensor
        if id(base) not in self.constants and id(base) not in self.stashed \
                and id(base) not in self.params:
            self.stashed.add(id(base))
            self.alive.append(base)
            self.unit().stashed_bytes += _nbytes(base)
        return tensor


def _window(args: Any) -> int:
    """The size of a pool's window, from its ``kernel_size`` argument."""
    kernel = args[1] if len(args) > 1 else 1
    sizes = kernel if isinstance(kernel, (list, tuple)) else [kernel]
    product = 1
    for size in sizes:
        product *= int(size)
    return product


def _run(module: torch.nn.Module, sample: tuple[Any, ...], recorder: _Recorder) -> None:
    """One forward pass on ``sample`` under the hooks and the dispatch mode."""
    torch = recorder.torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (),
                               kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            recorder.op(func, args, kwargs, out)
            return out

    handles = []
    for path, child in module.named_modules():
        handles.append(child.register_forward_pre_hook(
            lambda m, args, path=path: recorder.enter(path, m, args)))
        handles.append(child.register_forward_hook(
            lambda _m, _args, _out: recorder.leave(), always_call=True))
    for tensor in sample:
        recorder.produce(tensor, -1)
        recorder.derived.add(id(tensor))
    try:
        with torch.autograd.graph.saved_tensors_hooks(recorder.stash, lambda t: t), Watch():
            outputs = recorder.tensors(module(*sample))
    finally:
        for handle in handles:
            handle.remove()
    for tensor in outputs:
        if id(tensor) in recorder.spans:
            recorder.spans[id(tensor)].last_use = len(recorder.trace.units)


def _random_sample(module: torch.nn.Module, shape: tuple[int, ...], integer_input: bool,
                   torch: Any, device: Any = None) -> tuple[Any, ...]:
    """A random input of ``shape`` on ``device`` (default: the module's): floats in its
    number format, or token ids 0 and 1."""
    device = device or next((p.device for p in module.parameters()), torch.device("cpu"))
    if integer_input:
        return (torch.randint(0, 2, shape, device=device),)
    return (torch.randn(shape, device=device, dtype=_dtype_of(module, torch)),)


def _checked_sample(module: torch.nn.Module, input_shape: Sequence[int] | None,
                    integer_input: bool, sample: tuple[Any, ...] | None,
                    torch: Any) -> tuple[Any, ...]:
    """``sample``, or a random one of ``input_shape``, once the traced forward on it is
    known to fit in memory (:mod:`.forward_memory`)."""
    if sample is not None:
        meta = tuple(torch.empty_like(t, device="meta") for t in sample)
        check_forward_fits(module, meta, False, torch)
        return sample
    if input_shape is None:
        raise SettingError("input_shape", "give the input's shape ({input_shape}, batch "
                           "first) or a sample")
    shape = check_input_shape(input_shape)
    meta = _random_sample(module, shape, integer_input, torch, torch.device("meta"))
    check_forward_fits(module, meta, True, torch)
    return _random_sample(module, shape, integer_input, torch)


def trace_torch_module(module: torch.nn.Module, input_shape: Sequence[int] | None,
                       integer_input: bool = False,
                       sample: tuple[Any, ...] | None = None) -> tuple[Trace, DType]:
    """Run ``module`` once and count it, per sample; also the number format it ran in. The
    input: ``sample`` (the forward's positional arguments) if given, else a random one of
    ``input_shape`` (token ids 0 and 1 if ``integer_input``). The batch is the first
    dimension of the first input. A failing forward is a UserError."""
    torch = require_torch()
    sample = _checked_sample(module, input_shape, integer_input, sample, torch)
    shape = tuple(sample[0].shape) or (1,)
    buffers = {name: b.detach().clone() for name, b in module.named_buffers()}
    was_training = module.training
    recorder = _Recorder(module, torch)
    module.train()
    try:
        with torch.enable_grad():
            _run(module, sample, recorder)
    except Exception as error:  # noqa: BLE001 - the user's network: report it in one line
        raise SettingError("input_shape", "the forward pass on an input of shape {shape} "
                           "raised {error}: check {input_shape}",
                           shape=",".join(map(str, shape)), error=one_line(error)) from None
    finally:
        module.train(was_training)
        with torch.no_grad():
            for name, value in module.named_buffers():
                value.copy_(buffers[name])
    recorder.trace.input_bytes = sum(_nbytes(t) for t in sample)
    unused = unused_modules(module, set(recorder.params))
    if unused:
        warnings.warn(unused_message(unused), UnusedParametersWarning, stacklevel=3)
    return recorder.trace.per_sample(shape[0]), _partials(_dtype_of(module, torch), torch)


def import_torch_module(module: torch.nn.Module, input_shape: tuple[int, ...] | None,
                        name: str, strict: bool = False, integer_input: bool = False,
                        sample: tuple[Any, ...] | None = None) -> Workload:
    """``module`` as a workload named ``name``, ``input_shape`` including the batch (1);
    ``integer_input`` feeds token ids instead of floats; ``sample`` (the forward's
    positional arguments) replaces the random input. Ops it cannot count: an
    :class:`UncountedOpsWarning` naming them, or with ``strict`` a UserError."""
    trace, partials = trace_torch_module(module, input_shape, integer_input, sample)
    return finish_import(trace, name, partials, strict)
