"""Workload files: :func:`load_workload` reads a ``version: 1`` to ``4`` YAML file,
:func:`to_yaml` writes one that reads back equal.

The format (``docs/workloads.md``; ``examples/workloads/`` has files)::

    version: 1
    name: tiny
    input_bytes: 16                       # one sample from the host
    weight_dtype: float32                 # float16 or float32; these four are optional,
    gradient_dtype: float32               # defaulting to float32 and
    partials_dtype: float32               # one optimiser value per parameter
    optimizer_values_per_parameter: 1
    layers:                               # per sample, in order
    - {name: dense0, kind: dense, parameters: 40, forward_flops: 64,
       output_bytes: 32, stashed_bytes: 16}
    - repeat: 2                           # a group repeated; {i} in a name counts 0, 1, ...
      layers:
      - {name: "block{i}", kind: dense, parameters: 72, forward_flops: 128,
         output_bytes: 32, stashed_bytes: 32}

A single layer may carry ``repeat: N`` too. Version 2 adds one optional field per layer,
``uncounted_ops: [cumsum]``: the ops an importer met in it without knowing their FLOPs
(taken as 0), which ``train`` names. Version 3 adds ``experts: {count: 8, top_k: 2,
capacity_factor: 1.25}`` to a mixture-of-experts layer (:class:`.Experts`). Version 4
adds ``tensor: {role: attention, hidden: 2560, tokens: 2048, heads: 32, inner: 7680}`` to a
layer tensor parallelism can split (:class:`.TensorShape`; ``heads`` for attention only,
``inner`` for attention, ffn and head).
:func:`to_yaml` writes the lowest version that holds the workload (1 unless a layer has
such ops, experts or a tensor shape), so that a file without them reads in an older
ipupod too.

Files are at most 4 MiB, 10,000 layers once repeats are expanded; counts are whole numbers
within the bounds below; YAML aliases (``*name``) are refused, so a small file cannot
expand into a huge one. Every mistake is a :class:`SpecError` naming the file, the field
(``layers[3].parameters``) and what to write instead: never a traceback.
"""

from __future__ import annotations

import math
import os
from typing import Any

import yaml

from cluster.errors import SpecError
from cluster.model.strict_yaml import (
    MAX_FILE_BYTES,
    FieldReader,
    parse_yaml,
    read_text,
    show,
    shown_path,
)
from cluster.training.workloads.experts import MAX_EXPERTS, Experts
from cluster.training.workloads.layers import DType, Layer, LayerKind, Workload
from cluster.training.workloads.tensor_shape import INNER_ROLES, TensorRole, TensorShape

VERSIONS = (1, 2, 3, 4)
UNCOUNTED_VERSION = 2  # the first version with a layer's uncounted_ops
EXPERTS_VERSION = 3  # the first version with a layer's experts
TENSOR_VERSION = 4  # the first version with a layer's tensor shape
MAX_UNCOUNTED_OPS = 100  # per layer
MAX_LAYERS = 10_000  # after repeats: a typo like 100000000 fails instead of eating memory
MAX_NAME_CHARS = 200
MAX_DESCRIPTION_CHARS = 10_000
MAX_PARAMETERS = 10**12  # per layer: 2 TB of float16 weights, beyond any IPU-POD
MAX_FLOPS = 10**16  # per layer and sample: a thousand times a GPT-3 layer's
MAX_BYTES = 2**40  # per layer and sample, and per input sample: 1 TiB
MAX_OPTIMIZER_VALUES = 16
LAYER_FIELDS = ("name", "kind", "parameters", "forward_flops", "output_bytes",
                "stashed_bytes")
_BOUNDS = {"parameters": MAX_PARAMETERS, "forward_flops": MAX_FLOPS,
           "output_bytes": MAX_BYTES, "stashed_bytes": MAX_BYTES}
_TOP_REQUIRED = ("version", "name", "input_bytes", "layers")
_TOP_OPTIONAL = ("description", "weight_dtype", "gradient_dtype", "partials_dtype",
                 "optimizer_values_per_parameter")
_COUNTER = "{i}"
UNCOUNTED_FIELD = "uncounted_ops"
EXPERTS_FIELD = "experts"
EXPERTS_FIELDS = ("count", "top_k", "capacity_factor")
TENSOR_FIELD = "tensor"
TENSOR_FIELDS = ("role", "hidden", "tokens")
MAX_TENSOR_SIZE = 1 << 24  # a hidden size or tokens per sample: far past any model's


class _Reader(FieldReader):
    """The workload file's checks, on top of the shared ones; ``version``: the file's."""

    version = VERSIONS[0]

    def whole(self, value: Any, path: str, high: int, low: int = 0) -> int:
        """A whole number from ``low`` to ``high``; an integral float such as 1.5e+9 too."""
        if isinstance(value, float) and math.isfinite(value) and value.is_integer():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            hint = ""
            if isinstance(value, str) and value.replace("e", "", 1).replace(".", "", 1).isdigit():
                hint = " (YAML reads 1e9 as text: write 1.0e+9 or 1000000000)"
            self.fail(path, f"expected a whole number, got {show(value)}{hint}")
        if not low <= value <= high:
            self.fail(path, f"must be from {low:,} to {high:,}, got {show(value)}")
        return value

    def text(self, value: Any, path: str, limit: int = MAX_NAME_CHARS,
             lines: bool = False) -> str:
        """Printable text of at most ``limit`` characters (on several ``lines`` if allowed)."""
        if not isinstance(value, str) or not value.strip():
            self.fail(path, f"expected a non-empty text, got {show(value)}")
        shown = value.replace("\n", " ") if lines else value
        if len(value) > limit or not shown.isprintable():
            self.fail(path, f"expected printable text of at most {limit:,} characters"
                            + ("" if lines else " on one line"))
        return value

    def choice(self, value: Any, path: str,
               choices: type[DType] | type[LayerKind] | type[TensorRole]) -> Any:
        names = [c.value for c in choices]
        if not isinstance(value, str) or value not in names:
            self.fail(path, f"{show(value)} is not one of {', '.join(names)}")
        return choices(value)


def _uncounted(r: _Reader, value: Any, path: str) -> tuple[str, ...]:
    """A layer's ``uncounted_ops``: a list of op names, in a version 2 file."""
    if r.version < UNCOUNTED_VERSION:
        r.fail(path, f"this field needs 'version: {UNCOUNTED_VERSION}' at the top of the file")
    if not isinstance(value, list) or len(value) > MAX_UNCOUNTED_OPS:
        r.fail(path, f"expected a list of at most {MAX_UNCOUNTED_OPS} op names, got "
                     f"{show(value)}")
    return tuple(r.text(op, f"{path}[{k}]") for k, op in enumerate(value))


def _experts(r: _Reader, value: Any, path: str) -> Experts:
    """A layer's ``experts``: count, top_k and capacity_factor, in a version 3 file."""
    if r.version < EXPERTS_VERSION:
        r.fail(path, f"this field needs 'version: {EXPERTS_VERSION}' at the top of the file")
    entry = r.fields(value, path, EXPERTS_FIELDS)
    count = r.whole(entry["count"], f"{path}.count", MAX_EXPERTS, 1)
    top_k = r.whole(entry["top_k"], f"{path}.top_k", count, 1)
    factor, low, high = entry["capacity_factor"], top_k / count, count / top_k
    if (isinstance(factor, bool) or not isinstance(factor, (int, float))
            or not low <= factor <= high):
        r.fail(f"{path}.capacity_factor", f"expected a number from {low:g} to {high:g} "
                                          f"for top-{top_k} of {count}, got {show(factor)}")
    return Experts(count, top_k, factor)


def _tensor(r: _Reader, value: Any, path: str) -> TensorShape:
    """A layer's ``tensor``: role, hidden, tokens (and heads for attention), in a version
    4 file."""
    if r.version < TENSOR_VERSION:
        r.fail(path, f"this field needs 'version: {TENSOR_VERSION}' at the top of the file")
    entry = r.fields(value, path, TENSOR_FIELDS, ("heads", "inner"))
    role = r.choice(entry["role"], f"{path}.role", TensorRole)
    hidden = r.whole(entry["hidden"], f"{path}.hidden", MAX_TENSOR_SIZE, 1)
    tokens = r.whole(entry["tokens"], f"{path}.tokens", MAX_TENSOR_SIZE, 1)
    attention = role is TensorRole.ATTENTION
    if attention != ("heads" in entry):
        r.fail(f"{path}.heads", "an attention layer gives its heads (1 or more), no other "
                                "role does")
    heads = r.whole(entry["heads"], f"{path}.heads", hidden, 1) if attention else 0
    widened = role in INNER_ROLES
    if widened != ("inner" in entry):
        r.fail(f"{path}.inner", "attention, ffn and head give their first products' width "
                                "(1 or more), the embedding, the experts and the loss "
                                "do not")
    inner = r.whole(entry["inner"], f"{path}.inner", MAX_TENSOR_SIZE, 1) if widened else 0
    return TensorShape(role, hidden, tokens, heads, inner)


def _layer(r: _Reader, entry: dict[str, Any], path: str, name: str) -> Layer:
    counts = {key: r.whole(entry[key], f"{path}.{key}", high) for key, high in _BOUNDS.items()}
    uncounted = (_uncounted(r, entry[UNCOUNTED_FIELD], f"{path}.{UNCOUNTED_FIELD}")
                 if UNCOUNTED_FIELD in entry else ())
    experts = (_experts(r, entry[EXPERTS_FIELD], f"{path}.{EXPERTS_FIELD}")
               if EXPERTS_FIELD in entry else None)
    tensor = (_tensor(r, entry[TENSOR_FIELD], f"{path}.{TENSOR_FIELD}")
              if TENSOR_FIELD in entry else None)
    return Layer(name=name, kind=r.choice(entry["kind"], f"{path}.kind", LayerKind),
                 uncounted_ops=uncounted, experts=experts, tensor=tensor, **counts)


def _expand(r: _Reader, entry: Any, path: str) -> list[Layer]:
    """The layers of one entry of a ``layers`` list: a layer, or a repeated group."""
    if isinstance(entry, dict) and "layers" in entry:
        group = r.fields(entry, path, ("repeat", "layers"))
        repeat = r.whole(group["repeat"], f"{path}.repeat", MAX_LAYERS, 1)
        inner = group["layers"]
        if not isinstance(inner, list) or not inner:
            r.fail(f"{path}.layers", f"expected a non-empty list of layers, got {show(inner)}")
        if repeat * len(inner) > MAX_LAYERS:
            r.fail(f"{path}.repeat", f"{repeat:,} x {len(inner)} layers is over the "
                                     f"{MAX_LAYERS:,}-layer limit")
        templates = [(_checked(r, e, f"{path}.layers[{k}]", in_group=True),
                      f"{path}.layers[{k}]") for k, e in enumerate(inner)]
        return [_layer(r, e, p, e["name"].replace(_COUNTER, str(i)))
                for i in range(repeat) for e, p in templates]
    entry = _checked(r, entry, path, in_group=False)
    if "repeat" not in entry:
        return [_layer(r, entry, path, entry["name"])]
    repeat = r.whole(entry["repeat"], f"{path}.repeat", MAX_LAYERS, 1)
    return [_layer(r, entry, path, entry["name"].replace(_COUNTER, str(i)))
            for i in range(repeat)]


def _checked(r: _Reader, entry: Any, path: str, in_group: bool) -> dict[str, Any]:
    """A layer mapping whose name has ``{i}`` exactly when it is repeated (in a group,
    or by its own ``repeat``)."""
    optional = (UNCOUNTED_FIELD, EXPERTS_FIELD, TENSOR_FIELD)
    entry = r.fields(entry, path, LAYER_FIELDS, optional if in_group else ("repeat", *optional))
    name = r.text(entry["name"], f"{path}.name")
    repeated = in_group or "repeat" in entry
    if repeated and _COUNTER not in name:
        r.fail(f"{path}.name", f"a repeated layer's name needs {_COUNTER} (which counts 0, "
                               f"1, ...) so that every copy has its own name, e.g. "
                               f"{(name[:40] + _COUNTER)!r}")
    if not repeated and _COUNTER in name:
        r.fail(f"{path}.name", f"{_COUNTER} counts the copies of a repeated layer: add "
                               "'repeat: N' or take it out of the name")
    return entry


def _workload(r: _Reader, data: Any) -> Workload:
    if isinstance(data, dict) and "version" in data and (
            isinstance(data["version"], bool) or data["version"] not in VERSIONS):
        r.fail("version", f"supported versions: {', '.join(map(str, VERSIONS))} (got "
                          f"{show(data['version'])}): write 'version: 1' (2 for a layer's "
                          f"{UNCOUNTED_FIELD}, 3 for its {EXPERTS_FIELD}, 4 for its "
                          f"{TENSOR_FIELD})")
    top = r.fields(data, "", _TOP_REQUIRED, _TOP_OPTIONAL)
    r.version = top["version"]
    if "description" in top:
        r.text(top["description"], "description", MAX_DESCRIPTION_CHARS, lines=True)
    entries = top["layers"]
    if not isinstance(entries, list) or not entries:
        r.fail("layers", f"expected a non-empty list of layers, got {show(entries)}")
    if len(entries) > MAX_LAYERS:
        r.fail("layers", f"{len(entries):,} entries is over the {MAX_LAYERS:,}-layer limit")
    layers: list[Layer] = []
    first_path: dict[str, str] = {}
    for i, entry in enumerate(entries):
        expanded = _expand(r, entry, f"layers[{i}]")
        if len(layers) + len(expanded) > MAX_LAYERS:
            r.fail(f"layers[{i}]", f"the layers come to over the {MAX_LAYERS:,}-layer limit")
        for layer in expanded:
            if layer.name in first_path:
                r.fail(f"layers[{i}].name", f"the layer name {show(layer.name)} is already "
                                            f"used by {first_path[layer.name]}; rename one")
            first_path[layer.name] = f"layers[{i}]"
        layers += expanded
    dtypes = {key: r.choice(top[key], key, DType) for key in
              ("weight_dtype", "gradient_dtype", "partials_dtype") if key in top}
    optimizer = r.whole(top.get("optimizer_values_per_parameter", 1),
                        "optimizer_values_per_parameter", MAX_OPTIMIZER_VALUES)
    return Workload(name=r.text(top["name"], "name"), layers=tuple(layers),
                    input_bytes=r.whole(top["input_bytes"], "input_bytes", MAX_BYTES),
                    optimizer_values_per_parameter=optimizer, **dtypes)


def parse_workload(text: str, file: str = "<workload>") -> Workload:
    """A workload from the text of a workload file; ``file`` names it in messages."""
    if len(text) > MAX_FILE_BYTES:
        raise SpecError(f"{file}: {len(text):,} characters is over the {MAX_FILE_BYTES:,}-byte "
                        "limit of a workload file; use 'repeat' for repeated layers")
    data = parse_yaml(text, file, "workload")
    r = _Reader(file)
    if data is None:
        r.fail("", "the file is empty; see examples/workloads/ for the format")
    return _workload(r, data)


def load_workload(path: str | os.PathLike[str]) -> Workload:
    """Read and parse a workload file (UTF-8 YAML, at most 4 MiB), every time: a run
    reads it once, when it is resolved (:func:`cluster.training.plan.plan_for`)."""
    file = os.fspath(path)
    text = read_text(file, "workload", "; use 'repeat' for repeated layers")
    return parse_workload(text, shown_path(file))


class _OneLine(dict[str, Any]):
    """A mapping :func:`to_yaml` writes on one line (a layer), whatever it holds."""


class _Dumper(yaml.SafeDumper):
    """YAML's safe dumper, writing a :class:`_OneLine` in flow style."""


_Dumper.add_representer(_OneLine, lambda dumper, data: dumper.represent_mapping(
    "tag:yaml.org,2002:map", data, flow_style=True))


def _layer_data(layer: Layer) -> dict[str, Any]:
    data = _OneLine(name=layer.name, kind=layer.kind.value,
                    **{key: getattr(layer, key) for key in _BOUNDS})
    if layer.uncounted_ops:
        data[UNCOUNTED_FIELD] = list(layer.uncounted_ops)
    if layer.experts is not None:
        data[EXPERTS_FIELD] = {key: getattr(layer.experts, key) for key in EXPERTS_FIELDS}
    if layer.tensor is not None:
        data[TENSOR_FIELD] = {"role": layer.tensor.role.value, "hidden": layer.tensor.hidden,
                              "tokens": layer.tensor.tokens,
                              **({"heads": layer.tensor.heads} if layer.tensor.heads else {}),
                              **({"inner": layer.tensor.inner} if layer.tensor.inner else {})}
    return data


def _version(workload: Workload) -> int:
    """The lowest version that holds ``workload``."""
    if any(layer.tensor is not None for layer in workload.layers):
        return TENSOR_VERSION
    if any(layer.experts is not None for layer in workload.layers):
        return EXPERTS_VERSION
    return UNCOUNTED_VERSION if workload.uncounted else VERSIONS[0]


def to_yaml(workload: Workload, comment: str = "") -> str:
    """``workload`` as a file of the lowest version that holds it (1; 2 if a layer has
    ``uncounted_ops``; 3 if one has ``experts``; 4 if one has a ``tensor`` shape), one
    layer a line, that reads back equal;
    ``comment`` (lines of text) goes on top after ``# ``."""
    data = {"version": _version(workload), "name": workload.name,
            "input_bytes": workload.input_bytes,
            "weight_dtype": workload.weight_dtype.value,
            "gradient_dtype": workload.gradient_dtype.value,
            "partials_dtype": workload.partials_dtype.value,
            "optimizer_values_per_parameter": workload.optimizer_values_per_parameter,
            "layers": [_layer_data(layer) for layer in workload.layers]}
    head = "".join(f"# {line}\n" for line in comment.splitlines())
    return head + yaml.dump(data, Dumper=_Dumper, sort_keys=False, default_flow_style=None,
                            width=1000, allow_unicode=True)


def dump_workload(workload: Workload, path: str | os.PathLike[str], comment: str = "") -> None:
    """Write ``workload`` to ``path`` as :func:`to_yaml` gives it."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(to_yaml(workload, comment))
