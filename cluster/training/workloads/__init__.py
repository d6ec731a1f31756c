"""Workloads: what a network asks of the IPUs, layer by layer (see :mod:`.layers`).

Built-ins by name or YAML files (:func:`workload`, ``docs/workloads.md``), their
compute seconds on an IPU (:mod:`.compute`) and the memory they keep on one
(:mod:`.memory`).
"""

from cluster.training.workloads.arithmetic import HALF, SINGLE, Precision
from cluster.training.workloads.bert import bert_base, bert_large
from cluster.training.workloads.compute import (
    DEFAULT_EFFICIENCIES,
    UPDATE_FLOPS_PER_PARAMETER,
    Efficiencies,
    backward_seconds,
    forward_seconds,
    layer_seconds,
    peak_flops_per_second,
    training_seconds,
    update_bytes,
    update_flops,
    update_seconds,
)
from cluster.training.workloads.experts import Experts
from cluster.training.workloads.gpt2 import gpt2_xl
from cluster.training.workloads.layers import (
    BACKWARD_FLOPS_FACTOR,
    DType,
    Layer,
    LayerKind,
    Workload,
)
from cluster.training.workloads.memory import MemoryUse, fits, memory_use, stage_input_bytes
from cluster.training.workloads.mlp import mlp_workload
from cluster.training.workloads.registry import (
    BUILTINS,
    builtin_workload_of,
    workload,
    workload_names,
)
from cluster.training.workloads.resnet import resnet50
from cluster.training.workloads.workload_yaml import (
    dump_workload,
    load_workload,
    parse_workload,
    to_yaml,
)

__all__ = [
    "BACKWARD_FLOPS_FACTOR",
    "BUILTINS",
    "DEFAULT_EFFICIENCIES",
    "HALF",
    "SINGLE",
    "UPDATE_FLOPS_PER_PARAMETER",
    "DType",
    "Efficiencies",
    "Experts",
    "Layer",
    "LayerKind",
    "MemoryUse",
    "Precision",
    "Workload",
    "backward_seconds",
    "bert_base",
    "bert_large",
    "builtin_workload_of",
    "dump_workload",
    "fits",
    "forward_seconds",
    "gpt2_xl",
    "layer_seconds",
    "load_workload",
    "memory_use",
    "mlp_workload",
    "parse_workload",
    "peak_flops_per_second",
    "resnet50",
    "stage_input_bytes",
    "to_yaml",
    "training_seconds",
    "update_bytes",
    "update_flops",
    "update_seconds",
    "workload",
    "workload_names",
]
