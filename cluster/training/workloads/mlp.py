"""The trainer's NumPy MLP (:mod:`cluster.training.numpy_mlp`) as a workload.

Dense layer ``i`` of ``(fan_in, fan_out)``: ``fan_in * fan_out + fan_out`` parameters,
``2 * fan_in * fan_out`` forward FLOPs per sample (as
:func:`cluster.training.numpy_mlp.forward_flops`), a float32 output of ``fan_out`` values,
and its float32 input (``fan_in`` values) stashed for the backward pass, which needs it
for the weights' gradient and, through the ReLU, for the input's.
"""

from __future__ import annotations

from cluster.training.numpy_mlp import MLPSpec
from cluster.training.workloads.layers import DType, Layer, LayerKind, Workload

FLOAT32_BYTES = 4


def mlp_workload(spec: MLPSpec) -> Workload:
    """The workload of an MLP of shape ``spec`` (float32 throughout, SGD with momentum)."""
    layers = tuple(
        Layer(name=f"dense{i}", kind=LayerKind.DENSE, parameters=fan_in * fan_out + fan_out,
              forward_flops=2 * fan_in * fan_out, output_bytes=FLOAT32_BYTES * fan_out,
              stashed_bytes=FLOAT32_BYTES * fan_in)
        for i, (fan_in, fan_out) in enumerate(spec.layer_shapes()))
    return Workload(name="mlp", layers=layers,
                    input_bytes=FLOAT32_BYTES * spec.input_size + 4,  # features, int32 label
                    weight_dtype=DType.FLOAT32, gradient_dtype=DType.FLOAT32,
                    partials_dtype=DType.FLOAT32, optimizer_values_per_parameter=1)
