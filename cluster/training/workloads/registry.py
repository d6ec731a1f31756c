"""Workloads by name: :func:`workload` builds a built-in or reads a workload file.

Built-ins (one module each, registered in :data:`BUILTINS`): ``resnet50``, ``bert-base``,
``bert-large``, ``gpt2-xl`` and ``mlp`` (the trainer's NumPy MLP). Options are keyword
arguments: each built-in's own (``sequence_length=384``), and for all but ``mlp`` the
number formats ``weight_dtype``, ``gradient_dtype``, ``partials_dtype`` (``"float16"``
or ``"float32"``); ``optimizer_values_per_parameter`` for every built-in. An unknown
name, option or value is a :class:`SpecError` saying what to write instead.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from cluster.errors import SpecError
from cluster.training.numpy_mlp import MLPSpec
from cluster.training.workloads.arithmetic import HALF, Precision, whole
from cluster.training.workloads.bert import bert_base, bert_large
from cluster.training.workloads.gpt2 import gpt2_xl
from cluster.training.workloads.layers import Workload
from cluster.training.workloads.mlp import mlp_workload
from cluster.training.workloads.resnet import resnet50
from cluster.training.workloads.workload_yaml import MAX_OPTIMIZER_VALUES, load_workload

PRECISION_OPTIONS = ("weight_dtype", "gradient_dtype", "partials_dtype")
OPTIMIZER_OPTION = "optimizer_values_per_parameter"
MAX_WIDTH = 1 << 20  # MLP sizes: far beyond the trainer's, small enough to stay sane
MAX_HIDDEN_LAYERS = 64


@dataclass(frozen=True)
class Builtin:
    """A built-in workload: its builder, its own options, its default number formats
    (``None``: fixed, as the MLP's float32) and a one-line summary."""

    build: Callable[..., Workload]
    options: tuple[str, ...]
    precision: Precision | None
    summary: str


def _hidden(value: Any) -> tuple[int, ...]:
    """MLP hidden widths: a number, a list of numbers, or text such as ``"128,64"``."""
    if isinstance(value, str):
        value = [part for part in value.replace(" ", "").split(",") if part] or [""]
    items = list(value) if isinstance(value, (list, tuple)) else [value]
    if len(items) > MAX_HIDDEN_LAYERS:
        raise SpecError(f"hidden: at most {MAX_HIDDEN_LAYERS} hidden layers, got {len(items)}")
    return tuple(whole("hidden", item, 1, MAX_WIDTH) for item in items)


def _mlp(input_size: Any = 64, hidden: Any = (128,), classes: Any = 10) -> Workload:
    """The trainer's MLP; the defaults are ``TrainConfig``'s (cluster/training/trainer.py)."""
    spec = MLPSpec(whole("input_size", input_size, 1, MAX_WIDTH), _hidden(hidden),
                   whole("classes", classes, 2, MAX_WIDTH))
    return mlp_workload(spec)


BUILTINS: dict[str, Builtin] = {
    "resnet50": Builtin(resnet50, ("image_size", "classes"), HALF,
                        "ResNet-50 v1.5, 224x224, 25.6 M parameters, per image"),
    "bert-base": Builtin(bert_base, ("sequence_length", "masked_positions"), HALF,
                         "BERT-Base pre-training, 110 M parameters, per sequence"),
    "bert-large": Builtin(bert_large, ("sequence_length", "masked_positions"), HALF,
                          "BERT-Large pre-training, 336 M parameters, per sequence"),
    "gpt2-xl": Builtin(gpt2_xl, ("sequence_length",), HALF,
                       "GPT-2 XL, 1.56 B parameters, 1024 tokens, per sequence"),
    "mlp": Builtin(_mlp, ("input_size", "hidden", "classes"), None,
                   "the trainer's NumPy MLP, float32, per sample"),
}


def workload_names() -> tuple[str, ...]:
    """The built-in workloads' names, sorted."""
    return tuple(sorted(BUILTINS))


def _looks_like_a_file(name: str) -> bool:
    return name.endswith((".yaml", ".yml")) or os.sep in name or "/" in name


def workload(name_or_path: str | os.PathLike[str], **options: Any) -> Workload:
    """The built-in named ``name_or_path`` with ``options``, or the workload file at that
    path (which takes no options: edit the file). A ``Path`` is always a file."""
    if isinstance(name_or_path, str) and name_or_path in BUILTINS:
        return _builtin(name_or_path, options)
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise SpecError(f"a workload is a built-in name or a file path, not "
                        f"{type(name_or_path).__name__}")
    path = os.fspath(name_or_path)
    if isinstance(name_or_path, os.PathLike) or _looks_like_a_file(path) or os.path.exists(path):
        if options:
            raise SpecError(f"{path}: options ({', '.join(sorted(options))}) apply to built-in "
                            "workloads only; change the file instead")
        return load_workload(path)
    close = difflib.get_close_matches(path, list(BUILTINS), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    shown = repr(path) if len(path) <= 60 else repr(path[:57] + "...")
    raise SpecError(f"no built-in workload is named {shown}{hint}: choose one of "
                    f"{', '.join(workload_names())}, or give a workload YAML file")


def _builtin(name: str, options: dict[str, Any]) -> Workload:
    entry = BUILTINS[name]
    allowed = entry.options + (PRECISION_OPTIONS if entry.precision else ()) + (OPTIMIZER_OPTION,)
    unknown = sorted(set(options) - set(allowed))
    if unknown:
        raise SpecError(f"{name} has no option {unknown[0]!r}; its options: {', '.join(allowed)}")
    own = {key: options[key] for key in entry.options if key in options}
    try:
        if entry.precision is None:
            built = entry.build(**own)
        else:
            weight, gradient, partials = (options.get(key) for key in PRECISION_OPTIONS)
            built = entry.build(**own, precision=Precision.of(
                weight, gradient, partials, default=entry.precision))
        if OPTIMIZER_OPTION in options:
            values = whole(OPTIMIZER_OPTION, options[OPTIMIZER_OPTION], 0, MAX_OPTIMIZER_VALUES)
            built = replace(built, optimizer_values_per_parameter=values)
    except SpecError as err:
        raise SpecError(f"{name}: {err}") from err
    return built
