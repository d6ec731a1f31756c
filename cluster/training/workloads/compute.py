"""Simulated compute seconds of a workload on one IPU: FLOPs over peak times efficiency.

A layer's forward pass for ``samples`` samples takes ``samples * forward_flops / (peak *
efficiency)``: the peak is the processor's for the workload's partials dtype
(``fp16_flops_per_second`` or ``fp32_flops_per_second``: GC2 100 TFLOPS fp16 from seed
000, 124.5 public, 31.1 fp32; GC200 250 fp16 from seed 002, 62.5 fp32; docs/hardware.md), the
efficiency the fraction of it that the layer's kind reaches (:class:`Efficiencies`).
Backward is ``BACKWARD_FLOPS_FACTOR`` (2) times forward; recomputation adds one forward.
The weight update is costed once per step by :func:`update_seconds`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields, replace
from numbers import Real
from typing import Any

from cluster.errors import UserError
from cluster.model.hardware import Processor
from cluster.training.workloads.layers import (
    BACKWARD_FLOPS_FACTOR,
    DType,
    Layer,
    LayerKind,
    Workload,
)


@dataclass(frozen=True)
class Efficiencies:
    """The fraction of the IPU's peak each kind of layer reaches, one field per
    :class:`LayerKind`, each in (0, 1].

    Defaults, derived from published end-to-end training throughputs (so they fold in
    exchange, sync, host I/O and the weight update: the simulated time, which adds those
    on top, comes out somewhat slower than published, not faster):

    - ``conv`` 0.19: ResNet-50 v1.5 at 30,000 images/s on an IPU-POD16 (Graphcore,
      "Accelerating ResNet-50 Training on the IPU for MLPerf", Jan 2022, the MLPerf v1.1
      run). The built-in's 3 x 8.28e9 training FLOPs per image make
      ``30,000 * 2.485e10 = 7.46e14`` FLOPS, over 16 GC200s' ``16 * 250e12 = 4e15``:
      0.186.
    - ``dense`` and ``attention`` 0.22: BERT-Large phase 1 (sequence 128) at 5,179
      sequences/s on a Bow Pod16 with PopART (Graphcore's performance results page,
      pre-SDK 2.5). The built-in's 3 x 8.04e10 FLOPs per sequence make 1.25e15 FLOPS,
      over 16 Bow IPUs' ``16 * 350e12 = 5.6e15`` (Bow IPU: 350 TFLOPS fp16, public
      docs, not in docs/hardware.md): 0.223. A Bow IPU is a GC200 at a higher clock; taking
      the fraction for the GC200 is our assumption. The figure covers whole encoder
      layers, so attention and dense get the same value.
    - ``embedding``, ``norm``, ``pool``, ``elementwise``, ``loss`` 0.05: an assumption,
      no published figure. These run on the tiles' vector units, not the matrix-product
      units that the peak is quoted for; 1/20 of peak is our estimate. They are under 2%
      of the built-ins' FLOPs, so the choice moves step times by a few percent at most.

    The same fractions are used for the GC2 (an assumption: no GC2 figures used).
    :meth:`peak` gives 1.0 everywhere: the trainer's pricing of its MLP at peak.
    """

    dense: float = 0.22
    conv: float = 0.19
    attention: float = 0.22
    embedding: float = 0.05
    norm: float = 0.05
    pool: float = 0.05
    elementwise: float = 0.05
    loss: float = 0.05

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            if isinstance(value, bool) or not isinstance(value, Real) or not 0 < float(value) <= 1:
                shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
                raise UserError(f"efficiency of {field.name} layers must be a number more "
                                f"than 0 and at most 1 (a fraction of peak), not {shown}")

    @classmethod
    def peak(cls) -> Efficiencies:
        """Every kind at the IPU's peak (efficiency 1)."""
        return cls(**{field.name: 1.0 for field in fields(cls)})

    def of(self, kind: LayerKind) -> float:
        """The efficiency of layers of ``kind``."""
        return float(getattr(self, LayerKind(kind).value))

    def scaled(self, factor: float) -> Efficiencies:
        """Every kind's efficiency times ``factor`` (a calibration: one measured step time
        moves every kind alike); a UserError if any would pass the peak (more than 1)."""
        if isinstance(factor, bool) or not isinstance(factor, Real) or not factor > 0:
            raise UserError(f"an efficiency scale must be a number more than 0, not "
                            f"{factor!r}")
        limit = 1 / max(getattr(self, field.name) for field in fields(self))
        if factor > limit:
            raise UserError(f"an efficiency scale of {factor:.4g} puts a layer kind past the "
                            f"IPU's peak: at most {limit:.4g} with these efficiencies")
        return replace(self, **{field.name: getattr(self, field.name) * factor
                                for field in fields(self)})

    def with_overrides(self, overrides: Mapping[str, Any]) -> Efficiencies:
        """A copy with some kinds' efficiencies replaced (``{"conv": 0.3}``); an unknown
        kind or a value outside (0, 1] is a UserError."""
        kinds = [field.name for field in fields(self)]
        for kind in overrides:
            if kind not in kinds:
                raise UserError(f"no layer kind is named {str(kind)[:40]!r}: efficiencies "
                                f"are given for {', '.join(kinds)}")
        return replace(self, **dict(overrides))


DEFAULT_EFFICIENCIES = Efficiencies()

UPDATE_FLOPS_PER_PARAMETER = {0: 2, 1: 4, 2: 12}
"""Optimiser FLOPs per parameter by float32 values kept per parameter: plain SGD
``w -= lr g`` 2; SGD with momentum ``v = m v + g; w -= lr v`` 4; Adam 12
(``m = b1 m + (1 - b1) g`` 3, ``v = b2 v + (1 - b2) g^2`` 4, ``w -= lr m / (sqrt(v) +
eps)`` 5). LAMB adds two norms and a trust ratio, about 19: pass ``flops_per_parameter``.
More values than 2: 6 per value, a rough guess."""


def peak_flops_per_second(processor: Processor, dtype: DType) -> float:
    """The processor's peak FLOPS for arithmetic in ``dtype``."""
    if DType(dtype) is DType.FLOAT16:
        return processor.fp16_flops_per_second
    return processor.fp32_flops_per_second


def _samples(samples: int) -> int:
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
        raise UserError(f"samples must be a whole number of 0 or more, not {samples!r}")
    return samples


def layer_seconds(layer: Layer, processor: Processor, dtype: DType, samples: int,
                  efficiencies: Efficiencies = DEFAULT_EFFICIENCIES) -> float:
    """Forward seconds of ``layer`` for ``samples`` samples computing in ``dtype``."""
    return (_samples(samples) * layer.forward_flops
            / (peak_flops_per_second(processor, dtype) * efficiencies.of(layer.kind)))


def forward_seconds(workload: Workload, processor: Processor, samples: int,
                    efficiencies: Efficiencies = DEFAULT_EFFICIENCIES,
                    layers: Iterable[Layer] | None = None) -> float:
    """Forward seconds of ``layers`` (default: all of the workload's; a pipeline stage's
    otherwise) for ``samples`` samples, in the workload's partials dtype."""
    chosen = workload.layers if layers is None else layers
    return math.fsum(layer_seconds(layer, processor, workload.partials_dtype, samples,
                                   efficiencies) for layer in chosen)


def backward_seconds(workload: Workload, processor: Processor, samples: int,
                     efficiencies: Efficiencies = DEFAULT_EFFICIENCIES,
                     layers: Iterable[Layer] | None = None) -> float:
    """Backward seconds: ``BACKWARD_FLOPS_FACTOR`` times the forward's."""
    return BACKWARD_FLOPS_FACTOR * forward_seconds(workload, processor, samples,
                                                   efficiencies, layers)


def training_seconds(workload: Workload, processor: Processor, samples: int,
                     efficiencies: Efficiencies = DEFAULT_EFFICIENCIES,
                     layers: Iterable[Layer] | None = None, recompute: bool = False) -> float:
    """Forward plus backward seconds, plus one more forward with ``recompute`` (a
    pipeline stage that recomputes its activations instead of stashing them)."""
    passes = 1 + BACKWARD_FLOPS_FACTOR + (1 if recompute else 0)
    return passes * forward_seconds(workload, processor, samples, efficiencies, layers)


def update_flops(workload: Workload, parameters: int | None = None,
                 flops_per_parameter: int | None = None) -> int:
    """The weight update's FLOPs for ``parameters`` (default: all the workload's)."""
    values = workload.optimizer_values_per_parameter
    per = (flops_per_parameter if flops_per_parameter is not None
           else UPDATE_FLOPS_PER_PARAMETER.get(values, 6 * values))
    return per * _parameters(workload, parameters)


def update_bytes(workload: Workload, parameters: int | None = None) -> int:
    """Memory traffic of the weight update: read weights, gradients and the float32
    optimiser state; write weights and state."""
    per = (2 * workload.weight_dtype.itemsize + workload.gradient_dtype.itemsize
           + 2 * DType.FLOAT32.itemsize * workload.optimizer_values_per_parameter)
    return per * _parameters(workload, parameters)


def update_seconds(workload: Workload, processor: Processor, parameters: int | None = None,
                   efficiencies: Efficiencies = DEFAULT_EFFICIENCIES,
                   flops_per_parameter: int | None = None) -> float:
    """Seconds of one weight update of ``parameters`` on one IPU, once per step.

    The optimiser computes in float32 on the vector units: its FLOPs over the fp32 peak
    times the ``elementwise`` efficiency, plus its memory passes (:func:`update_bytes`)
    over ``memory_bandwidth_Bps`` (GC2 45 TB/s, GC200 47.5 TB/s; docs/hardware.md). Summed,
    not overlapped: a tile's loads and stores issue from the same instruction stream as
    its arithmetic, so within the update's superstep they overlap little.
    """
    compute = (update_flops(workload, parameters, flops_per_parameter)
               / (processor.fp32_flops_per_second * efficiencies.elementwise))
    return compute + update_bytes(workload, parameters) / processor.memory_bandwidth_Bps


def _parameters(workload: Workload, parameters: int | None) -> int:
    if parameters is None:
        return workload.parameter_count
    if isinstance(parameters, bool) or not isinstance(parameters, int) or parameters < 0:
        raise UserError(f"parameters must be a whole number of 0 or more, not {parameters!r}")
    return parameters
