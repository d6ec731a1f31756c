"""Workloads by name: :func:`workload` builds a built-in or reads a workload file.

Built-ins (their builders decorated by :func:`builtin_workload` in their own modules, which
:data:`BUILTINS` finds by walking this package): ``resnet50``, ``bert-base``,
``bert-large``, ``gpt2-xl``, the GPT-3 family ``gpt3-125m`` ... ``gpt3-175b``, ``gpt-j-6b``,
``llama-7b``, ``llama-70b``, ``moe-8x7b`` and ``mlp`` (the trainer's NumPy MLP). Options are keyword
arguments: each built-in's own, read from its builder's signature (``sequence_length=384``),
and for those whose builder takes a ``precision`` (all but ``mlp``) the
number formats ``weight_dtype``, ``gradient_dtype``, ``partials_dtype`` (``"float16"``
or ``"float32"``); ``optimizer_values_per_parameter`` for every built-in. An unknown
name, option or value is a :class:`SpecError` saying what to write instead.
"""

from __future__ import annotations

import difflib
import inspect
import os
import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from cluster.errors import SpecError
from cluster.model.plugins import Registry
from cluster.training.numpy_mlp import MLPSpec
from cluster.training.workloads.arithmetic import Precision, whole, whole_numbers
from cluster.training.workloads.layers import Workload
from cluster.training.workloads.mlp import mlp_workload
from cluster.training.workloads.workload_yaml import MAX_OPTIMIZER_VALUES, load_workload

PRECISION = "precision"  # the builder parameter that takes the number formats
PRECISION_OPTIONS = ("weight_dtype", "gradient_dtype", "partials_dtype")
OPTIMIZER_OPTION = "optimizer_values_per_parameter"
MAX_WIDTH = 1 << 20  # MLP sizes: far beyond the trainer's, small enough to stay sane
MAX_HIDDEN_LAYERS = 64


@dataclass(frozen=True)
class Builtin:
    """A built-in workload: its builder, a one-line summary and the name it is registered
    by. The builder's keyword parameters are the built-in's options; a ``precision``
    parameter, if it has one, takes the number formats, and its default is the built-in's."""

    build: Callable[..., Workload]
    summary: str
    name: str

    @property
    def options(self) -> tuple[str, ...]:
        """The built-in's own options: its builder's parameters but ``precision``."""
        return tuple(name for name in inspect.signature(self.build).parameters
                     if name != PRECISION)

    @property
    def precision(self) -> Precision | None:
        """The default number formats (``None``: fixed, as the MLP's float32)."""
        parameter = inspect.signature(self.build).parameters.get(PRECISION)
        return None if parameter is None else parameter.default


def _check(entry: Builtin) -> None:
    """A TypeError unless the builder can build with no arguments, by keyword, and a
    ``precision`` parameter defaults to a :class:`Precision`."""
    name = getattr(entry.build, "__name__", repr(entry.build))
    for parameter in inspect.signature(entry.build).parameters.values():
        if parameter.default is inspect.Parameter.empty or parameter.kind not in (
                inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY):
            raise TypeError(f"workload builder {name}: every parameter is a keyword with a "
                            f"default, not {parameter.name}")
    if entry.precision is not None and not isinstance(entry.precision, Precision):
        raise TypeError(f"workload builder {name}: precision defaults to a Precision")


def _size(entry: Builtin) -> int:
    """The built-in's parameters as built by default: the registry lists the smallest
    network first."""
    return entry.build().parameter_count


BUILTINS: Registry[Builtin] = Registry("built-in workload", "cluster.training.workloads",
                                       check=_check, order=_size)
_B = TypeVar("_B", bound=Callable[..., Workload])


def builtin_workload(name: str, summary: str) -> Callable[[_B], _B]:
    """Decorator: register a builder ``(**options) -> Workload`` as built-in ``name``."""

    def register(build: _B) -> _B:
        BUILTINS.register(name, Builtin(build, summary, name), build.__module__)
        return build

    return register


def hidden_widths(option: str, value: Any) -> tuple[int, ...]:
    """MLP hidden widths: a number, a list of numbers, or text such as ``"128,64"``; a
    SpecError naming ``option`` (``hidden``, or the CLI's ``--hidden``) otherwise."""
    return whole_numbers(option, value, MAX_WIDTH, MAX_HIDDEN_LAYERS, "128,64")


@builtin_workload("mlp", "the trainer's NumPy MLP, float32, per sample")
def _mlp(input_size: Any = 64, hidden: Any = (128,), classes: Any = 10) -> Workload:
    """The trainer's MLP; the defaults are ``TrainConfig``'s (cluster/training/trainer.py)."""
    spec = MLPSpec(whole("input_size", input_size, 1, MAX_WIDTH), hidden_widths("hidden", hidden),
                   whole("classes", classes, 2, MAX_WIDTH))
    return mlp_workload(spec)


_SIZE = re.compile(r"(\d+(?:\.\d+)?)([kmb]?)")
_UNITS = {"": 1.0, "k": 1e3, "m": 1e6, "b": 1e9}


def _by_size(name: str) -> tuple[tuple[str, float], ...]:
    """A sort key reading sizes as people do: ``gpt3-125m`` before ``gpt3-1.3b``."""
    parts = _SIZE.split(name)  # text, number, unit, text, number, unit, ..., text
    return tuple((parts[i], float(parts[i + 1]) * _UNITS[parts[i + 2]] if i + 1 < len(parts)
                  else 0.0) for i in range(0, len(parts), 3))


def workload_names() -> tuple[str, ...]:
    """The built-in workloads' names, sorted by family, then size."""
    return tuple(sorted(BUILTINS, key=_by_size))


def _looks_like_a_file(name: str) -> bool:
    return name.endswith((".yaml", ".yml")) or os.sep in name or "/" in name


def workload(name_or_path: str | os.PathLike[str], **options: Any) -> Workload:
    """The built-in named ``name_or_path`` with ``options``, or the workload file at that
    path (which takes no options: edit the file). A ``Path`` is always a file."""
    if isinstance(name_or_path, str) and name_or_path in BUILTINS:
        return builtin_workload_of(BUILTINS[name_or_path], options)
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


def builtin_workload_of(entry: Builtin, options: dict[str, Any]) -> Workload:
    """The built-in of registry ``entry`` (already looked up) built with ``options``; a
    SpecError for an option it does not take or a value it refuses."""
    name = entry.name
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
