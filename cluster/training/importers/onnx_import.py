"""An ONNX file as a :class:`Workload`: shapes from ONNX's own shape inference.

The file is read with ``onnx.load`` and checked with ``onnx.checker``; a batch dimension
left symbolic is fixed from ``--input-shape``; ``onnx.shape_inference.infer_shapes`` then
gives every tensor's shape and type. Each node is priced from those shapes: ``Conv``,
``Gemm`` and ``MatMul`` as ``2 x`` their multiply-adds (the formulas PyTorch's flop
counter uses; the bias added after one is not counted, as there and in the built-ins),
everything else per element (:mod:`.op_costs`); nodes computing from constants alone (a
transposed weight) are folded, not counted. Parameters are the
floating-point initializers that nodes read (a batch norm's running statistics are not
parameters; one-element constants are not either). ONNX keeps no backward pass, so the
stashed bytes follow what PyTorch's autograd keeps, by op type (:data:`SAVES_INPUTS`).

A graph exported by ``torch.onnx.export(..., dynamo=True)`` names each node's modules
(``pkg.torch.onnx.name_scopes``): its nodes are grouped by module as the PyTorch importer
groups them, so both give the same layers. Export with ``optimize=False`` to keep batch
norms apart from convolutions (the optimiser folds them, as inference wants).
"""

from __future__ import annotations

import ast
import warnings
from pathlib import Path
from typing import Any

from cluster.errors import SettingError, UserError, quoted
from cluster.training.importers.grouping import Span, Trace, Unit, finish_import
from cluster.training.importers.notes import (
    FOLDED_MESSAGE,
    InferenceGraphWarning,
    NumberFormatWarning,
    format_message,
)
from cluster.training.importers.onnx_constants import constant_shape
from cluster.training.importers.op_costs import (
    FREE,
    RESIDUAL_OPS,
    class_kind,
    element_kind,
    is_fused,
    normal_name,
    per_element_flops,
    stronger,
)
from cluster.training.importers.recurrent import ONNX_CELLS, onnx_recurrent, recurrent_flops
from cluster.training.importers.torch_factory import (
    check_regular_file,
    one_line,
    require_module,
)
from cluster.training.importers.torch_import import check_input_shape
from cluster.training.workloads.layers import DType, LayerKind, Workload

PRODUCTS = {"Conv": LayerKind.CONV, "ConvTranspose": LayerKind.CONV,
            "Gemm": LayerKind.DENSE, "MatMul": LayerKind.DENSE}
SAVES_INPUTS = ("Conv", "ConvTranspose", "Gemm", "MatMul", "BatchNormalization",
                "LayerNormalization", "GroupNormalization", "InstanceNormalization", "Mul",
                "Div", "Pow", "Gelu", "Erf", "Sqrt")
"""Ops whose backward reads their activation inputs (as PyTorch's autograd keeps them)."""
SAVES_OUTPUT = ("Relu", "Sigmoid", "Tanh", "Softmax", "LogSoftmax", "Exp")
"""Ops whose backward reads their output."""
ARGMAX_BYTES = 8  # per output of a max pool: the int64 index PyTorch keeps
RUNNING_STATISTICS = {"BatchNormalization": (3, 4)}  # input positions that are buffers
FLOAT_TYPES = {1: 4, 10: 2, 11: 4, 16: 2}  # TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16:
# bytes as priced (a double as the IPU's float32)
UNSUPPORTED_TYPES = {11: "float64", 16: "bfloat16"}
RULE_KEY = "pkg.onnxscript.rewriter.rule_name"
INTEGER_TYPES = {2: 1, 3: 1, 6: 4, 7: 8, 9: 1}  # UINT8, INT8, INT32, INT64, BOOL
SCOPES_KEY = "pkg.torch.onnx.name_scopes"
CLASSES_KEY = "pkg.torch.onnx.class_hierarchy"


def read_model(path: str) -> Any:
    """The checked ``ModelProto`` in ``path``, or a UserError saying why not."""
    check_regular_file(Path(path), "ONNX file", "an .onnx file or file.py:factory")
    onnx = require_module("onnx")
    hint = "export one with torch.onnx.export(model, (sample,), 'model.onnx', dynamo=True)"
    try:
        model = onnx.load(path)
        onnx.checker.check_model(model)
    except Exception as error:  # noqa: BLE001 - DecodeError, ValidationError, OSError...
        raise UserError(f"{quoted(path)} is not a valid ONNX model ({one_line(error)[:200]}); "
                        f"{hint}") from None
    if not model.graph.node:
        raise UserError(f"{quoted(path)} holds an ONNX model with no nodes; {hint}")
    return model


def _fix_input_shape(model: Any, input_shape: tuple[int, ...] | None) -> tuple[int, ...]:
    """The first graph input's shape: from ``input_shape`` (written into the model) or the
    file; a dimension left symbolic is a UserError asking for --input-shape."""
    initializers = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in initializers]
    if not inputs:
        raise UserError("the ONNX graph has no input")
    dims = inputs[0].type.tensor_type.shape.dim
    if input_shape is not None:
        if len(input_shape) != len(dims):
            raise SettingError("input_shape", "{input_shape} has {given} dimensions; the "
                               "model's input {name} has {dims}", given=len(input_shape),
                               name=quoted(inputs[0].name), dims=len(dims))
        for dim, size in zip(dims, input_shape):
            dim.dim_value = size
        return input_shape
    if any(not dim.HasField("dim_value") for dim in dims):
        names = ",".join(d.dim_param or "?" if not d.HasField("dim_value") else str(d.dim_value)
                         for d in dims)
        raise SettingError("input_shape", "the model's input {name} has shape {names}: give "
                           "{input_shape} with every dimension, batch first (e.g. "
                           "1,3,224,224)", name=quoted(inputs[0].name), names=names)
    return tuple(d.dim_value for d in dims)


def _shapes(model: Any) -> dict[str, tuple[tuple[int, ...], int]]:
    """Every tensor's (shape, element type) after ONNX shape inference."""
    onnx = require_module("onnx")
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception as error:  # noqa: BLE001 - InferenceError and kin, one line
        raise UserError(f"ONNX shape inference failed: {one_line(error)[:300]}") from None
    found: dict[str, tuple[tuple[int, ...], int]] = {}
    graph = inferred.graph
    for info in (*graph.input, *graph.value_info, *graph.output):
        tensor = info.type.tensor_type
        if all(d.HasField("dim_value") for d in tensor.shape.dim):
            found[info.name] = (tuple(d.dim_value for d in tensor.shape.dim), tensor.elem_type)
    for init in graph.initializer:
        found[init.name] = (tuple(init.dims), init.data_type)
    return found


def _elements(shape: tuple[int, ...]) -> int:
    count = 1
    for size in shape:
        count *= size
    return count


def _scopes(node: Any) -> tuple[list[str], list[str]]:
    """The module paths enclosing a node (root left out) and their classes, from the
    dynamo exporter's metadata; empty for other files."""
    meta = {p.key: p.value for p in node.metadata_props}
    try:
        paths = ast.literal_eval(meta.get(SCOPES_KEY, "[]"))
        classes = ast.literal_eval(meta.get(CLASSES_KEY, "[]"))
    except (ValueError, SyntaxError):
        return [], []
    if not isinstance(paths, list) or len(paths) < 2:
        return [], []
    return [str(p) for p in paths[1:-1]], [str(c).rsplit(".", 1)[-1] for c in classes[1:-1]]


def _op_name(node: Any) -> str:
    """The op's name as PyTorch would give it (``add``), else the ONNX op type."""
    meta = {p.key: p.value for p in node.metadata_props}
    try:
        classes = ast.literal_eval(meta.get(CLASSES_KEY, "[]"))
    except (ValueError, SyntaxError):
        classes = []
    last = str(classes[-1]) if classes else ""
    return normal_name(last) if last.startswith("aten.") else normal_name(node.op_type)


class _Walker:
    """Walks the nodes in order, building the trace."""

    def __init__(self, model: Any, shapes: dict[str, tuple[tuple[int, ...], int]]) -> None:
        graph = model.graph
        self.model = model
        self.shapes = shapes
        self.trace = Trace()
        self.initializers = {i.name: i for i in graph.initializer}
        self.counted: set[str] = set()
        self.spans: dict[str, Span] = {}
        self.stashed: set[str] = set()
        self.unit_key: object = None
        self.constants = set(self.initializers)  # and what is computed from them alone
        self.made_by: dict[str, str] = {}  # tensor name -> op type of the node making it
        self.parents = {p for node in graph.node for p in _scopes(node)[0][:-1]}

    def nbytes(self, name: str, any_type: bool = False) -> int:
        """Bytes of a tensor of known shape: floating point only (shape and index tensors
        are no activations), or of ``any_type`` (an input of token ids)."""
        shape, elem = self.shapes.get(name, ((), 0))
        sizes = {**FLOAT_TYPES, **INTEGER_TYPES} if any_type else FLOAT_TYPES
        return _elements(shape) * sizes.get(elem, 0) if name in self.shapes else 0

    def unit_for(self, node: Any) -> Unit:
        """The unit a node belongs to: its attention or leaf module's (contiguous nodes of
        one module call), else a new one of its own (a shape op joins the last unit)."""
        paths, classes = _scopes(node)
        for depth, (path, cls) in enumerate(zip(paths, classes)):
            if is_fused(cls) or (depth == len(paths) - 1 and path not in self.parents):
                if path != self.unit_key:
                    kind = class_kind(cls) or LayerKind.ELEMENTWISE
                    self.trace.units.append(Unit(path, kind, tuple(paths[:depth])))
                    self.unit_key = path
                return self.trace.units[-1]
        free = self.is_constant(node) or normal_name(node.op_type) in FREE
        if not free or not self.trace.units:
            op = _op_name(node)
            name = f"{paths[-1]}.{op}" if paths else (node.name or op)
            self.trace.units.append(Unit(name, LayerKind.ELEMENTWISE, tuple(paths)))
            self.unit_key = None
        return self.trace.units[-1]

    def is_constant(self, node: Any) -> bool:
        """A node computing from constants alone (a transposed weight, a scale): folded
        once, not run per sample."""
        return all(name in self.constants for name in node.input if name)

    def parameters(self, node: Any) -> int:
        """Floating-point initializers this node is first to read."""
        skipped = RUNNING_STATISTICS.get(node.op_type, ())
        count = 0
        for position, name in enumerate(node.input):
            init = self.initializers.get(name)
            if init is None or name in self.counted or position in skipped \
                    or init.data_type not in FLOAT_TYPES or _elements(tuple(init.dims)) <= 1:
                continue
            self.counted.add(name)
            count += _elements(tuple(init.dims))
        return count

    def flops(self, node: Any) -> tuple[int, LayerKind]:
        """A node's FLOPs and kind, from the inferred shapes."""
        op = node.op_type
        out = self.shapes.get(node.output[0]) if node.output else None
        first = self.shapes.get(node.input[0]) if node.input else None
        if op in PRODUCTS and out is not None and len(node.input) > 1 \
                and node.input[1] in self.shapes and first is not None:
            weight = self.shapes[node.input[1]][0]
            reduced = _reduced_size(op, node, first[0], weight)
            inner = _elements(first[0]) if op == "ConvTranspose" else _elements(out[0])
            return 2 * inner * reduced, PRODUCTS[op]
        if op in ONNX_CELLS:
            return self.recurrent(node), LayerKind.DENSE
        if op == "Gather" and node.input and node.input[0] in self.initializers:
            return 0, LayerKind.EMBEDDING
        if op == "Add" and any(n in self.constants for n in node.input) and any(
                self.made_by.get(n) in PRODUCTS for n in node.input):
            return 0, LayerKind.ELEMENTWISE  # a product's bias: not counted (arithmetic.py)
        name = normal_name(op)
        window = 1
        for attribute in node.attribute:
            if attribute.name == "kernel_shape":
                window = _elements(tuple(attribute.ints))
        count = per_element_flops(name, _elements(out[0]) if out else 0,
                                  _elements(first[0]) if first else 0, window)
        if count is None or (out is None and name not in FREE and op != "Constant"):
            self.trace.not_counted(op)
            return 0, LayerKind.ELEMENTWISE
        return count, element_kind(name) or LayerKind.ELEMENTWISE

    def recurrent(self, node: Any) -> int:
        """An ``LSTM``, ``GRU`` or ``RNN`` node by its gate formulas (:mod:`.recurrent`):
        the input size from ``X`` or ``W`` (``directions x gates*H x I``), the positions
        (steps x batch) from ``Y`` (``steps x directions x batch x H``) or ``X``."""
        onnx = require_module("onnx")
        attributes = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        x = self.shapes.get(node.input[0], ((), 0))[0] if node.input else ()
        y = self.shapes.get(node.output[0], ((), 0))[0] if node.output else ()
        w = self.shapes.get(node.input[1], ((), 0))[0] if len(node.input) > 1 else ()
        if not (x or w) and len(node.input) > 1:
            w = constant_shape(self.model.graph, self.model.opset_import, node.input[1]) or ()
        layer = onnx_recurrent(node.op_type, attributes, (x or w or (0,))[-1])
        if layer is None or not layer.input_size or not (x or y):
            self.trace.not_counted(node.op_type)
            return 0
        positions = (_elements(y) // (layer.directions * layer.hidden_size) if y else
                     _elements(x) // layer.input_size)
        return recurrent_flops(layer, positions)

    def stash(self, node: Any, unit: Unit) -> None:
        """What PyTorch's autograd would keep for this op's backward."""
        if node.op_type == "MaxPool" and node.output:
            shape = self.shapes.get(node.output[0], ((), 0))[0]
            unit.stashed_bytes += ARGMAX_BYTES * _elements(shape)
            return
        names = (list(node.input) if node.op_type in SAVES_INPUTS else
                 list(node.output[:1]) if node.op_type in SAVES_OUTPUT else [])
        for name in names:
            if name and name not in self.constants and name not in self.stashed:
                self.stashed.add(name)
                unit.stashed_bytes += self.nbytes(name)

    def node(self, node: Any) -> None:
        """Count one node into its unit."""
        unit = self.unit_for(node)
        index = len(self.trace.units) - 1
        if self.is_constant(node):
            unit.parameters += self.parameters(node)
            self.constants.update(node.output)
            return
        self.made_by.update(dict.fromkeys(node.output, node.op_type))
        flops, kind = self.flops(node)
        unit.forward_flops += flops
        unit.kind = stronger(unit.kind, kind)
        unit.parameters += self.parameters(node)
        self.stash(node, unit)
        activations = [n for n in node.input if n in self.spans]
        for name in activations:
            self.spans[name].last_use = index
        if _op_name(node) in RESIDUAL_OPS and node.output and len(activations) >= 2:
            size = self.nbytes(node.output[0])
            unit.joins_activations = unit.joins_activations or sum(
                self.nbytes(n) == size for n in activations) >= 2
        for name in node.output:
            self.produce(name, index)

    def produce(self, name: str, index: int, any_type: bool = False) -> None:
        nbytes = self.nbytes(name, any_type)
        if nbytes:
            span = Span(nbytes, index, index)
            self.trace.spans.append(span)
            self.spans[name] = span


def _reduced_size(op: str, node: Any, input_shape: tuple[int, ...],
                  weight: tuple[int, ...]) -> int:
    """The multiply-adds per output element of a product (per input for ConvTranspose)."""
    if op in ("Conv", "ConvTranspose"):
        return _elements(weight[1:])
    if op == "Gemm":
        trans_a = any(a.name == "transA" and a.i for a in node.attribute)
        return input_shape[0] if trans_a else input_shape[-1]
    return input_shape[-1]


def _partials(model: Any) -> DType:
    """The IPU format of the first floating-point initializer; bfloat16 and float64
    with a note (priced as float16 and float32)."""
    for init in model.graph.initializer:
        if init.data_type in FLOAT_TYPES:
            if init.data_type in UNSUPPORTED_TYPES:
                warnings.warn(format_message(UNSUPPORTED_TYPES[init.data_type]),
                              NumberFormatWarning, stacklevel=3)
            return DType.FLOAT16 if FLOAT_TYPES[init.data_type] == 2 else DType.FLOAT32
    return DType.FLOAT32


def _folds_batch_norms(model: Any) -> bool:
    """Whether the graph's batch norms were folded into convolutions (an inference
    graph): the dynamo exporter's optimiser names its rule, or a module of class
    BatchNorm has no BatchNormalization node, or (the legacy exporter) a convolution's
    weight is a folded constant (``onnx::Conv_12``) in a graph without batch norms."""
    nodes = model.graph.node
    if any(node.op_type == "BatchNormalization" for node in nodes):
        return False
    for node in nodes:
        meta = {p.key: p.value for p in node.metadata_props}
        if "BatchNorm" in meta.get(RULE_KEY, "") or "BatchNorm" in meta.get(CLASSES_KEY, ""):
            return True
    initializers = {i.name for i in model.graph.initializer}
    return any(node.op_type == "Conv" and len(node.input) > 1 and
               node.input[1] in initializers and node.input[1].startswith("onnx::Conv_")
               for node in nodes)


def import_onnx_file(path: str, name: str, input_shape: tuple[int, ...] | None = None,
                     strict: bool = False) -> Workload:
    """The ONNX model in ``path`` as a workload named ``name``, per sample (counts divided
    by the first input's batch dimension)."""
    model = read_model(path)
    if _folds_batch_norms(model):
        warnings.warn(FOLDED_MESSAGE.format(file=quoted(path)), InferenceGraphWarning,
                      stacklevel=2)
    shape = _fix_input_shape(model, check_input_shape(input_shape) if input_shape else None)
    shapes = _shapes(model)
    walker = _Walker(model, shapes)
    inputs = [i.name for i in model.graph.input if i.name not in walker.initializers]
    for given in inputs:  # every input, a mask or token types beside the first
        walker.produce(given, -1, any_type=True)
    for node in model.graph.node:
        walker.node(node)
    for output in model.graph.output:
        if output.name in walker.spans:
            walker.spans[output.name].last_use = len(walker.trace.units)
    walker.trace.input_bytes = sum(walker.nbytes(given, any_type=True) for given in inputs)
    trace = walker.trace.per_sample(shape[0])
    return finish_import(trace, name, _partials(model), strict)
