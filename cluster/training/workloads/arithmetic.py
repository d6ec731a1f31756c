"""How the built-in workloads count: FLOPs and bytes per element, and number formats.

A multiply-add counts 2 FLOPs; a matrix product of ``(n, k) @ (k, m)`` is ``2 n k m``.
Bias additions are not counted (under 0.1% of any built-in's FLOPs). Elementwise work is
counted per element with the figures below: rough operation counts, not measurements,
stated so that a reader can check them. They add 0.3% (BERT) to 2% (ResNet-50) to a
network's forward FLOPs.

Stashed bytes follow Korthikanti et al. 2022, "Reducing Activation Recomputation in
Large Transformer Models" (arXiv:2205.05198), section 4.1: every tensor that a backward
pass reads is kept in the partials dtype, and every dropout or ReLU keeps a one-byte mask
per element.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cluster.errors import SpecError
from cluster.training.workloads.layers import DType

RELU_FLOPS = 1  # per element: a comparison
ADD_FLOPS = 1  # per element: a residual addition
DROPOUT_FLOPS = 1  # per element: a product with the scaled mask
NORM_FLOPS = 8  # per element, batch or layer norm in training: mean 1, variance 3
#                 (subtract, square, add), normalise 2, scale and shift 2
RMS_NORM_FLOPS = 4  # per element, RMSNorm (Zhang and Sennrich 2019): square, sum,
#                     normalise, scale
ACTIVATION_FLOPS = 8  # per element, GELU (tanh form), tanh or SiLU: an assumed 8
GATE_FLOPS = 1  # per element of a gated FFN (SwiGLU): the activation times the up projection
ROTARY_FLOPS = 3  # per rotated element of a query or key: x cos + rotate(x) sin
SOFTMAX_FLOPS = 5  # per element: max, subtract, exp, sum, divide
SCORE_SCALE_MASK_FLOPS = 2  # per attention score: scale by 1/sqrt(head size), add the mask
LOSS_FLOPS_PER_LOGIT = SOFTMAX_FLOPS  # softmax cross-entropy: the softmax dominates

MASK_BYTES = 1  # per element of a dropout or ReLU mask (Korthikanti et al. 2022)
INT32_BYTES = 4  # token ids, labels, positions


@dataclass(frozen=True)
class Precision:
    """The number formats of a workload: weights, gradients, partials (activations).

    The built-ins default to float16 throughout, Graphcore's "16.16" recipes for
    ResNet-50, BERT and GPT-2: float16 weights updated with stochastic rounding (no
    float32 master copy), float16 gradients with loss scaling, float16 partials. The
    optimiser state stays float32 (``Workload.optimizer_values_per_parameter``).
    """

    weight: DType = DType.FLOAT16
    gradient: DType = DType.FLOAT16
    partials: DType = DType.FLOAT16

    @classmethod
    def of(cls, weight: Any = None, gradient: Any = None, partials: Any = None,
           default: Precision | None = None) -> Precision:
        """A precision from dtype names (``"float16"``, ``"float32"``); ``None`` keeps
        ``default``'s. A name outside :class:`DType` is a SpecError naming the option."""
        base = default or cls()
        given = {"weight_dtype": weight, "gradient_dtype": gradient, "partials_dtype": partials}
        chosen = [dtype_named(option, value) if value is not None else None
                  for option, value in given.items()]
        return cls(chosen[0] or base.weight, chosen[1] or base.gradient,
                   chosen[2] or base.partials)


HALF = Precision()
SINGLE = Precision(DType.FLOAT32, DType.FLOAT32, DType.FLOAT32)


def dtype_named(option: str, value: Any) -> DType:
    """``value`` as a :class:`DType`, or a SpecError naming ``option`` and the choices."""
    if isinstance(value, DType):
        return value
    choices = ", ".join(d.value for d in DType)
    if not isinstance(value, str) or value not in {d.value for d in DType}:
        raise SpecError(f"{option}: {_shown(value)} is not a number format; choose one of "
                        f"{choices}")
    return DType(value)


def whole(option: str, value: Any, low: int, high: int) -> int:
    """``value`` as a whole number from ``low`` to ``high`` (digits as text are taken too,
    as a command line gives them), or a SpecError naming ``option``."""
    number = _as_whole(value)
    if number is None:
        raise SpecError(f"{option}: expected a whole number, got {_shown(value)}")
    return _in_range(option, number, low, high)


def whole_numbers(option: str, value: Any, high: int, most: int,
                  example: str = "4,4,6") -> tuple[int, ...]:
    """Whole numbers from 1 to ``high``, at most ``most`` of them, or a SpecError naming
    ``option``: text separated by commas (``"4,4,6"``, as a command line gives them; it
    must hold one number at least), a list of numbers (``[]`` is none) or one number. The
    one reading of ``--hidden``, the ``mlp`` workload's ``hidden`` and
    ``--layers-per-ipu``."""
    if isinstance(value, str):
        items: list[Any] = [part.strip() for part in value.split(",") if part.strip()]
        if not items:
            raise SpecError(f"{option}: takes whole numbers separated by commas, e.g. "
                            f"{example}; got {_shown(value)}")
    else:
        items = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(items) > most:
        raise SpecError(f"{option}: takes at most {most} numbers, got {len(items)}")
    numbers = []
    for item in items:
        number = _as_whole(item)
        if number is None:
            raise SpecError(f"{option}: takes whole numbers separated by commas, e.g. "
                            f"{example}; got {_shown(item)}")
        numbers.append(_in_range(option, number, 1, high))
    return tuple(numbers)


def _as_whole(value: Any) -> int | None:
    """``value`` as an int (decimal digits as text too, under 20 of them), or None."""
    if isinstance(value, str) and value.strip().isdecimal() and len(value) < 20:
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value


def _in_range(option: str, value: int, low: int, high: int) -> int:
    if not low <= value <= high:
        raise SpecError(f"{option}: must be from {low:,} to {high:,}, got {value:,}")
    return value


def _shown(value: Any) -> str:
    """``repr(value)``, cut to 40 characters."""
    return repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
