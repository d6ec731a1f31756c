"""What a model asks of an IPU, layer by layer: parameters, FLOPs and activation bytes.

A :class:`Workload` is the whole description the cost model needs of a network: no
weights, no code, only per-layer counts per sample. Pipelining splits its layers into
stages, sharding splits one layer; the trainer turns the counts into simulated seconds
(FLOPs over the IPU's peak) and bytes (weights, optimiser state, stashed activations,
transfers between stages). Counts are per sample so that one description serves any
micro-batch.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.errors import SpecError
from cluster.model.text_enum import TextEnum
from cluster.training.workloads.experts import Experts
from cluster.training.workloads.tensor_shape import TensorRole, TensorShape


class LayerKind(TextEnum):
    """The kind of a layer: what its FLOPs run on, so what fraction of peak it reaches."""

    DENSE = "dense"
    CONV = "conv"
    ATTENTION = "attention"
    EMBEDDING = "embedding"
    NORM = "norm"
    POOL = "pool"
    ELEMENTWISE = "elementwise"
    LOSS = "loss"


class DType(TextEnum):
    """A number format the IPU computes in (IEEE, 000)."""

    FLOAT16 = "float16"
    FLOAT32 = "float32"

    @property
    def itemsize(self) -> int:
        """Bytes per element."""
        return 2 if self is DType.FLOAT16 else 4


BACKWARD_FLOPS_FACTOR = 2
"""Backward FLOPs per forward FLOP: one product for the weights' gradient, one for the
input's (the usual estimate; training is ``1 + 2 = 3`` times the forward)."""


@dataclass(frozen=True)
class Layer:
    """One layer, per sample: ``forward_flops`` (a multiply-add counts 2),
    ``output_bytes`` (the activation it hands the next layer, what crosses a pipeline
    stage boundary after it) and ``stashed_bytes`` (what its backward pass needs kept from
    the forward: the memory recomputation saves). ``uncounted_ops``: ops an importer met
    in this layer without knowing their FLOPs (taken as 0), so that whoever prices the
    layer can say its compute is short. ``experts``: a mixture-of-experts layer's routing
    (its parameters are all its experts', its FLOPs those of every expert's buffer);
    ``None`` for any other layer. ``tensor``: how tensor parallelism splits it (a
    transformer's layers, :mod:`.tensor_shape`); ``None``: it does not, and each IPU of
    a tensor-parallel group runs it whole."""

    name: str
    kind: LayerKind
    parameters: int
    forward_flops: int
    output_bytes: int
    stashed_bytes: int
    uncounted_ops: tuple[str, ...] = ()
    experts: Experts | None = None
    tensor: TensorShape | None = None

    def __post_init__(self) -> None:
        for field in ("parameters", "forward_flops", "output_bytes", "stashed_bytes"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpecError(f"layer {self.name!r}: {field} must be a whole number of 0 "
                                f"or more, not {value!r}")
        if self.tensor is not None and ((self.tensor.role is TensorRole.EXPERTS)
                                        != (self.experts is not None)):
            raise SpecError(f"layer {self.name!r}: a tensor shape of role experts goes with "
                            "a layer's experts, and a layer with experts takes no other role")

    @property
    def training_flops(self) -> int:
        """Forward plus backward FLOPs per sample."""
        return (1 + BACKWARD_FLOPS_FACTOR) * self.forward_flops


@dataclass(frozen=True)
class Workload:
    """A network as the cost model sees it: its layers in order, the bytes of one input
    sample, the number formats of weights, gradients and partials (activations), and how
    many float32 optimiser values each parameter keeps (1 for SGD with momentum, 2 for
    Adam)."""

    name: str
    layers: tuple[Layer, ...]
    input_bytes: int
    weight_dtype: DType = DType.FLOAT32
    gradient_dtype: DType = DType.FLOAT32
    partials_dtype: DType = DType.FLOAT32
    optimizer_values_per_parameter: int = 1

    def __post_init__(self) -> None:
        if not self.layers:
            raise SpecError(f"workload {self.name!r} has no layers")
        names = [layer.name for layer in self.layers]
        if len(set(names)) != len(names):
            raise SpecError(f"workload {self.name!r} names a layer twice")
        if self.input_bytes < 0 or self.optimizer_values_per_parameter < 0:
            raise SpecError(f"workload {self.name!r}: input bytes and optimiser values per "
                            "parameter must be 0 or more")

    @property
    def parameter_count(self) -> int:
        """Parameters of the whole network."""
        return sum(layer.parameters for layer in self.layers)

    @property
    def uncounted(self) -> dict[str, tuple[str, ...]]:
        """Layer name -> the ops in it whose FLOPs are unknown, for the layers with any."""
        return {layer.name: layer.uncounted_ops for layer in self.layers if layer.uncounted_ops}

    @property
    def forward_flops(self) -> int:
        """Forward FLOPs per sample, every layer."""
        return sum(layer.forward_flops for layer in self.layers)

    @property
    def training_flops(self) -> int:
        """Forward plus backward FLOPs per sample, every layer."""
        return sum(layer.training_flops for layer in self.layers)
