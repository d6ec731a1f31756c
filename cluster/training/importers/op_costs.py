"""What an op costs, by name, for both front ends: its layer kind and FLOPs per element.

Products (matrix products, convolutions, attention) are counted by the front end from
shapes (PyTorch's own ``torch.utils.flop_counter`` formulas; the same ``2 m n k`` for
ONNX's ``Gemm``/``MatMul``). Everything else is priced here per element with the figures
the built-in workloads use (:mod:`cluster.training.workloads.arithmetic`), so that an
imported ResNet-50 and the built-in one count alike. Names are normalised by
:func:`normal_name` (lower case, no underscores): PyTorch's ``aten.native_layer_norm`` and
ONNX's ``LayerNormalization`` both land here. An op in none of these tables is reported
by name as not counted, never priced as zero in silence.
"""

from __future__ import annotations

from cluster.training.workloads.arithmetic import (
    ACTIVATION_FLOPS,
    ADD_FLOPS,
    NORM_FLOPS,
    RELU_FLOPS,
    SOFTMAX_FLOPS,
)
from cluster.training.workloads.layers import LayerKind


def normal_name(op: str) -> str:
    """``aten.native_layer_norm.default`` -> ``nativelayernorm``; ``Relu`` -> ``relu``."""
    parts = op.split(".")
    name = parts[1] if len(parts) >= 2 and parts[0] in ("aten", "prims") else parts[0]
    return name.lower().replace("_", "")


def _names(text: str) -> tuple[str, ...]:
    return tuple(text.split())


ONE_FLOP = _names("""relu threshold hardtanh clamp clip leakyrelu abs neg maximum minimum max
    min where add sub rsub mul div pow sqrt rsqrt reciprocal exp log sign floor ceil round
    eq ne lt gt le ge equal less greater lessorequal greaterorequal not and or xor
    logicalnot logicaland logicalor maskedfill addcmul addcdiv lerp""")
"""One FLOP per output element: comparisons, additions, products (RELU_FLOPS, ADD_FLOPS)."""

ACTIVATIONS = _names("""tanh sigmoid gelu silu hardswish hardsigmoid mish elu selu celu
    softplus softsign erf sin cos logsigmoid""")
"""ACTIVATION_FLOPS per element (GELU, tanh and kin; the built-ins' assumed 8)."""

SOFTMAXES = _names("softmax safesoftmax logsoftmax")
"""SOFTMAX_FLOPS per element."""

NORMS = _names("""nativebatchnorm nativebatchnormlegit nativebatchnormlegitnotraining
    nativebatchnormlegitfunctional batchnorm nativelayernorm layernorm nativegroupnorm
    groupnorm rmsnorm fusedrmsnorm batchnormalization layernormalization groupnormalization
    instancenormalization rmsnormalization simplifiedlayernormalization""")
"""NORM_FLOPS per element, kind ``norm``."""

REDUCTIONS = _names("""mean sum amax amin var std reducemean reducesum reducemax reducemin
    adaptiveavgpool1d adaptiveavgpool2d adaptiveavgpool3d adaptivemaxpool2d
    globalaveragepool globalmaxpool""")
"""One FLOP per *input* element (a global average pool reads each element once)."""

WINDOW_POOLS = _names("""maxpool1d maxpool2d maxpool3d maxpool2dwithindices
    maxpool3dwithindices avgpool1d avgpool2d avgpool3d maxpool averagepool lppool""")
"""The window's size per output element, kind ``pool``."""

FREE = _names("""view unsafeview reshape reshapealias t transpose permute expand expandas
    squeeze unsqueeze flatten unflatten contiguous clone detach select slice narrow split
    splitwithsizes chunk unbind cat concat stack tocopy copy empty emptylike emptystrided
    zeros zeroslike ones oneslike full fulllike fill zero asstrided alias liftfresh lift
    arange range newempty newzeros newones newfull scalartensor viewas repeat tile
    constantpadnd pad bernoulli rand randlike randn randnlike shape size constant
    constantofshape identity cast castlike gather gatherelements indexselect index
    dropout nonzero viewasreal viewascomplex real imag unsafesplit unsafesplitwithsizes
    unsafechunk localscalardense item isnonzero packpaddedsequence padpackedsequence""")
"""Data movement, shape and random-number ops: no FLOPs (known, not missed): views such
as a GRU's ``unsafe_split``, packing a padded sequence, and reading a scalar
(``x.item()``, ``if x.sum() > 0``)."""

CREATES = _names("""empty emptylike emptystrided zeros zeroslike ones oneslike full fulllike
    rand randlike randn randnlike bernoulli arange range newempty newzeros newones newfull
    scalartensor""")
"""Ops whose output holds none of their inputs' values (a mask, a fill): what is computed
from it alone is no part of the network's arithmetic (a dropout mask scaled)."""

PER_ELEMENT = {
    **dict.fromkeys(ONE_FLOP, RELU_FLOPS),
    **dict.fromkeys(ACTIVATIONS, ACTIVATION_FLOPS),
    **dict.fromkeys(SOFTMAXES, SOFTMAX_FLOPS),
    **dict.fromkeys(NORMS, NORM_FLOPS),
}
RESIDUAL_OPS = ("add", "sub")
"""Ops that start a layer when they join two activations of one shape (a skip
connection), as the built-in ResNet-50's ``layer1.0.add``."""
assert ADD_FLOPS == RELU_FLOPS  # one table entry serves both

KIND_PRIORITY = (LayerKind.ATTENTION, LayerKind.CONV, LayerKind.DENSE, LayerKind.EMBEDDING,
                 LayerKind.NORM, LayerKind.POOL, LayerKind.ELEMENTWISE)
"""A unit's kind is the first of these among its ops (and its module's class)."""


def stronger(a: LayerKind, b: LayerKind) -> LayerKind:
    """The kind of a unit holding ops of kinds ``a`` and ``b``."""
    return a if KIND_PRIORITY.index(a) <= KIND_PRIORITY.index(b) else b


def element_kind(name: str) -> LayerKind | None:
    """The kind of a per-element op (normalised name), or None if it is not one."""
    if name in NORMS:
        return LayerKind.NORM
    if name in WINDOW_POOLS or (name in REDUCTIONS and "pool" in name):
        return LayerKind.POOL
    if name in PER_ELEMENT or name in REDUCTIONS or name in FREE:
        return LayerKind.ELEMENTWISE
    return None


def class_kind(class_name: str) -> LayerKind | None:
    """The kind a module's class name implies (``AdaptiveAvgPool2d`` is a pool, whatever
    op it runs as; ``MultiheadAttention`` is attention), or None."""
    if class_name.endswith("Attention"):
        return LayerKind.ATTENTION
    if "Pool" in class_name:
        return LayerKind.POOL
    return None


def is_fused(class_name: str) -> bool:
    """A module counted as one unit whatever it holds (attention, as the built-ins)."""
    return class_name.endswith("Attention")


def per_element_flops(name: str, output_elements: int, input_elements: int,
                      window: int = 1) -> int | None:
    """FLOPs of a per-element op, or None if the name is in no table."""
    if name in WINDOW_POOLS:
        return window * output_elements
    if name in REDUCTIONS:
        return input_elements
    if name in PER_ELEMENT:
        return PER_ELEMENT[name] * output_elements
    if name in FREE:
        return 0
    return None
