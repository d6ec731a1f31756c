"""The shape of a tensor an ONNX graph computes from its initializers alone.

ONNX's shape inference loses a shape that goes through a ``Reshape`` of a computed
shape: the dynamo exporter reorders an LSTM's gates so (``Slice``, ``Concat`` on its
weights), and the second layer's weight shape, hence its input size, is unknown. Here the
few nodes that make such a tensor are run by ONNX's reference evaluator (the weights of
one layer: small), to read the shape.
"""

from __future__ import annotations

from typing import Any

from cluster.training.importers.torch_factory import require_module


def constant_shape(graph: Any, opsets: Any, name: str) -> tuple[int, ...] | None:
    """The shape of ``name``, computed from initializers and constants by the nodes that
    make it; None if it needs a graph input or the evaluation fails."""
    onnx = require_module("onnx")
    producer = {output: node for node in graph.node for output in node.output}
    initializers = {i.name: i for i in graph.initializer}
    needed: dict[int, Any] = {}
    pending, seen = [name], set()
    while pending:
        tensor = pending.pop()
        if not tensor or tensor in seen or tensor in initializers:
            continue
        seen.add(tensor)
        node = producer.get(tensor)
        if node is None:  # a graph input: not a constant
            return None
        needed[id(node)] = node
        pending.extend(node.input)
    ordered = [node for node in graph.node if id(node) in needed]
    used = {tensor for node in ordered for tensor in node.input}
    helper = onnx.helper
    sub = helper.make_graph(ordered, "constant", [],
                            [helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT, None)],
                            [initializers[t] for t in sorted(used) if t in initializers])
    reference = require_module("onnx.reference")  # the optional extra, loaded when used
    try:
        evaluator: Any = reference.ReferenceEvaluator(
            helper.make_model(sub, opset_imports=opsets))
        value = evaluator.run(None, {})[0]
    except Exception:  # noqa: BLE001 - any failure: the shape stays unknown
        return None
    return tuple(int(size) for size in value.shape)
