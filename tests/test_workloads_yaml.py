"""Workload files: built-ins read back equal, the examples load, and every bad file is a
SpecError naming the file and the field."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.errors import SpecError, UserError
from cluster.training.config import TrainConfig
from cluster.training.plan import plan_for
from cluster.training.workloads import (
    DType,
    Layer,
    LayerKind,
    Workload,
    dump_workload,
    load_workload,
    parse_workload,
    to_yaml,
    workload,
    workload_names,
    workload_yaml,
)
from cluster.training.workloads.workload_yaml import MAX_FILE_BYTES, MAX_LAYERS, MAX_PARAMETERS
from gcl.modes import Mode

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "workloads"


def layer(name: str = "a", **changes: Any) -> dict[str, Any]:
    entry = {"name": name, "kind": "dense", "parameters": 10, "forward_flops": 20,
             "output_bytes": 4, "stashed_bytes": 8}
    entry.update(changes)
    return entry


def spec(**changes: Any) -> dict[str, Any]:
    data = {"version": 1, "name": "w", "input_bytes": 4, "layers": [layer("a"), layer("b")]}
    data.update(changes)
    return data


def write(tmp_path: Path, data: Any, name: str = "w.yaml") -> Path:
    path = tmp_path / name
    if isinstance(data, bytes):
        path.write_bytes(data)
    else:
        path.write_text(data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False))
    return path


def load_error(tmp_path: Path, data: Any) -> str:
    """The SpecError message of loading ``data`` from a file (it names the file)."""
    path = write(tmp_path, data)
    with pytest.raises(SpecError) as info:
        load_workload(path)
    message = str(info.value)
    assert str(path) in message
    return message


# -- reading and writing --------------------------------------------------------------


@pytest.mark.parametrize("name", workload_names())
def test_every_built_in_reads_back_equal(name, tmp_path):
    built = workload(name)
    assert parse_workload(to_yaml(built)) == built
    dump_workload(built, tmp_path / f"{name}.yaml", comment=f"{name}\nwritten by a test")
    assert load_workload(tmp_path / f"{name}.yaml") == built
    assert (tmp_path / f"{name}.yaml").read_text().startswith(f"# {name}\n# written by")


def test_the_exported_bert_large_example_is_the_built_in():
    assert load_workload(EXAMPLES / "bert-large.yaml") == workload("bert-large")


def test_tiny_example_expands_its_repeated_group():
    w = load_workload(EXAMPLES / "tiny.yaml")
    assert [l.name for l in w.layers] == ["embed", "block0.attention", "block0.ffn",
                                          "block1.attention", "block1.ffn", "loss"]
    assert w.layers[3] == Layer("block1.attention", LayerKind.ATTENTION, 4000, 110_000, 64, 256)
    assert (w.weight_dtype, w.optimizer_values_per_parameter) == (DType.FLOAT16, 2)


def test_a_single_layer_repeats_and_defaults_are_workloads():
    w = parse_workload(yaml.safe_dump(spec(layers=[layer("l{i}", repeat=3)])))
    assert [l.name for l in w.layers] == ["l0", "l1", "l2"]
    assert (w.weight_dtype, w.gradient_dtype, w.partials_dtype) == (DType.FLOAT32,) * 3
    assert w.optimizer_values_per_parameter == 1


def test_a_description_may_run_over_several_lines():
    w = parse_workload(yaml.safe_dump(spec(description="first line\nsecond line\n")))
    assert w.name == "w"


def test_a_layer_with_uncounted_ops_is_a_version_2_file_that_reads_back_equal():
    """An importer's ops of unknown FLOPs stay with their layer; a file without any stays
    version 1 (an older ipupod reads it)."""
    counted = parse_workload(yaml.safe_dump(spec()))
    assert to_yaml(counted).startswith("version: 1\n") and not counted.uncounted
    short = Workload("w", (Layer("a", LayerKind.DENSE, 1, 2, 3, 4, ("cumsum", "mkldnn_rnn")),
                           *counted.layers[1:]), 4)
    text = to_yaml(short)
    assert text.startswith("version: 2\n") and "uncounted_ops: [cumsum, mkldnn_rnn]" in text
    assert parse_workload(text) == short
    assert parse_workload(text).uncounted == {"a": ("cumsum", "mkldnn_rnn")}


def test_integral_floats_and_underscores_are_whole_numbers():
    text = yaml.safe_dump(spec()).replace("forward_flops: 20", "forward_flops: 1.5e+9")
    text = text.replace("parameters: 10", "parameters: 1_000", 1)
    w = parse_workload(text)
    assert w.layers[0].forward_flops == 1_500_000_000 and w.layers[0].parameters == 1000


printable = st.characters(codec="utf-8", categories=("L", "N", "P"), include_characters=" ")
layer_names = st.text(printable, min_size=1, max_size=30).filter(
    lambda s: s.strip() and "{i}" not in s)


@st.composite
def workloads(draw: st.DrawFn) -> Workload:
    names = draw(st.lists(layer_names, min_size=1, max_size=8, unique=True))
    within = st.integers(0, MAX_PARAMETERS)  # the lowest of the fields' bounds
    layers = tuple(Layer(n, draw(st.sampled_from(list(LayerKind))), draw(within), draw(within),
                         draw(within), draw(within)) for n in names)
    dtypes = st.sampled_from(list(DType))
    return Workload(draw(layer_names), layers, draw(st.integers(0, 2**40)), draw(dtypes),
                    draw(dtypes), draw(dtypes), draw(st.integers(0, 16)))


@given(workloads())
def test_any_workload_reads_back_equal(w):
    assert parse_workload(to_yaml(w)) == w


# -- hostile files ----------------------------------------------------------------------


def with_layer(**changes: Any) -> dict[str, Any]:
    """A file whose second layer has ``changes``."""
    second = layer("b")
    second.update(changes)
    return spec(layers=[layer("a"), second])


@pytest.mark.parametrize("data, words", [
    (spec(version=5), ["version", "supported versions: 1, 2, 3, 4", "version: 1"]),
    (spec(version="1"), ["version", "'1'"]),
    (spec(version=True), ["version"]),
    ({k: v for k, v in spec().items() if k != "version"}, ["version", "missing"]),
    ({k: v for k, v in spec().items() if k != "name"}, ["name", "missing"]),
    (spec(nmae="x"), ["nmae", "unknown field", "allowed here"]),
    (spec(layers=[]), ["layers", "non-empty list"]),
    (spec(layers={"a": 1}), ["layers", "non-empty list"]),
    (spec(name=""), ["name", "non-empty"]),
    (spec(name="x" * 300), ["name", "at most 200"]),
    (spec(name="bad\x07name"), ["name", "printable"]),
    (spec(name="two\nlines"), ["name", "on one line"]),
    (spec(description="bell\x07"), ["description", "printable"]),
    (spec(**{"k" * 5000: 1}), ["unknown field"]),
    (spec(input_bytes=-1), ["input_bytes", "from 0"]),
    (spec(weight_dtype="bfloat16"), ["weight_dtype", "float16, float32"]),
    (spec(optimizer_values_per_parameter=17), ["optimizer_values_per_parameter", "0 to 16"]),
    (with_layer(parameters=-5), ["layers[1].parameters", "from 0 to"]),
    (with_layer(forward_flops=10**20), ["layers[1].forward_flops", "10,000,000,000,000,000"]),
    (with_layer(output_bytes=2**41), ["layers[1].output_bytes"]),
    (with_layer(stashed_bytes=1.5), ["layers[1].stashed_bytes", "whole number"]),
    (with_layer(parameters="many"), ["layers[1].parameters", "whole number"]),
    (with_layer(parameters="1e9"), ["write 1.0e+9"]),
    (with_layer(parameters=None), ["layers[1].parameters"]),
    (with_layer(parameters=True), ["layers[1].parameters"]),
    (with_layer(kind="lstm"), ["layers[1].kind", "'lstm'", "dense, conv, attention"]),
    (with_layer(kind=3), ["layers[1].kind"]),
    (with_layer(name=["x"]), ["layers[1].name", "non-empty text"]),
    (with_layer(name="a"), ["layers[1].name", "already used by layers[0]"]),
    (with_layer(param=1), ["layers[1].param", "unknown field"]),
    (with_layer(uncounted_ops=["cumsum"]), ["layers[1].uncounted_ops", "version: 2"]),
    (spec(version=2, layers=[layer("a", uncounted_ops="cumsum")]),
     ["layers[0].uncounted_ops", "list of at most 100 op names"]),
    (spec(version=2, layers=[layer("a", uncounted_ops=[""])]),
     ["layers[0].uncounted_ops[0]", "non-empty text"]),
    (spec(layers=[layer("a"), {k: v for k, v in layer("b").items() if k != "stashed_bytes"}]),
     ["layers[1].stashed_bytes", "missing"]),
    (spec(layers=[layer("a"), "b"]), ["layers[1]", "expected a mapping"]),
    (spec(layers=[layer("l", repeat=2)]), ["layers[0].name", "{i}"]),
    (spec(layers=[layer("l{i}")]), ["layers[0].name", "repeat: N"]),
    (spec(layers=[layer("l{i}", repeat=0)]), ["layers[0].repeat", "from 1"]),
    (spec(layers=[layer("l{i}", repeat=10**9)]), ["layers[0].repeat", "10,000"]),
    (spec(layers=[{"repeat": 5000, "layers": [layer("a{i}"), layer("b{i}"), layer("c{i}")]}]),
     ["layers[0].repeat", "limit"]),
    (spec(layers=[{"repeat": 2, "layers": [layer("a")]}]), ["layers[0].layers[0].name", "{i}"]),
    (spec(layers=[{"repeat": 2, "layers": [layer("a{i}", repeat=2)]}]),
     ["layers[0].layers[0].repeat", "unknown field"]),
    (spec(layers=[{"repeat": 2, "layers": []}]), ["layers[0].layers", "non-empty"]),
    (spec(layers=[{"repeat": 2, "layers": [{"repeat": 2, "layers": [layer("a{i}")]}]}]),
     ["layers[0].layers[0]"]),
    (spec(layers=[layer("x{i}", repeat=6000), layer("y{i}", repeat=6000)]),
     ["layers[1]", "10,000-layer limit"]),
    (spec(layers=[layer("l{i}", repeat=2), layer("l1")]), ["layers[1].name", "already used"]),
    ([1, 2, 3], ["top level", "expected a mapping"]),
    ("just text", ["top level", "expected a mapping"]),
    ("", ["empty"]),
    ("version: 1\nversion: 1\n", ["twice"]),
    ("{{{", ["not valid YAML", "line 1"]),
    ("version: 1\nname: !!python/object/apply:os.system ['true']\n", ["not valid YAML"]),
    ("a: &x [1, 2]\nb: *x\n", ["alias", "write the value out"]),
    ("[" * 100_000, ["YAML"]),
])
def test_bad_files_are_spec_errors_naming_the_field(tmp_path, data, words):
    message = load_error(tmp_path, data)
    for word in words:
        assert word in message, message
    assert len(message) < 600


def test_a_100_mb_file_is_refused_unread(tmp_path):
    path = tmp_path / "huge.yaml"
    with open(path, "wb") as handle:
        handle.truncate(100 * 1024 * 1024)  # sparse: nothing written
    with pytest.raises(SpecError) as info:
        load_workload(path)
    message = str(info.value)
    assert "104,857,600 bytes" in message and f"{MAX_FILE_BYTES:,}-byte limit" in message


def test_non_utf8_and_unreadable_paths_are_spec_errors(tmp_path):
    assert "not UTF-8" in load_error(tmp_path, b"version: 1\nname: \xff\xfe\n")
    with pytest.raises(SpecError, match="is a directory"):
        load_workload(tmp_path)
    with pytest.raises(SpecError, match="cannot read"):
        load_workload(tmp_path / "missing.yaml")


def test_a_long_text_is_refused_before_parsing():
    with pytest.raises(SpecError, match="limit"):
        parse_workload("#" * (MAX_FILE_BYTES + 1))


def test_ten_thousand_layers_are_the_limit():
    data = spec(layers=[layer("l{i}", repeat=MAX_LAYERS)])
    assert len(parse_workload(yaml.safe_dump(data)).layers) == MAX_LAYERS


def mutations(data: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """``data`` with one value, anywhere, replaced by something odd."""
    odd = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(),
                    st.text(max_size=20), st.lists(st.integers(), max_size=3),
                    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2))
    paths: list[tuple[Any, ...]] = [(k,) for k in data]
    paths += [("layers", i, k) for i, entry in enumerate(data["layers"]) for k in entry]

    def apply(path: tuple[Any, ...], value: Any) -> dict[str, Any]:
        changed = copy.deepcopy(data)
        target = changed
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return changed

    return st.builds(apply, st.sampled_from(paths), odd)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(mutations(spec(layers=[layer("a"), layer("b{i}", repeat=2)])))
def test_any_odd_value_is_a_workload_or_a_spec_error(data):
    try:
        text = yaml.safe_dump(data)
    except yaml.YAMLError:
        return
    try:
        assert isinstance(parse_workload(text), Workload)
    except SpecError as err:
        assert "<workload>: " in str(err) and len(str(err)) < 600


@settings(max_examples=300)
@given(st.text(max_size=200))
def test_any_text_is_a_workload_or_a_spec_error(text):
    try:
        parse_workload(text)
    except SpecError:
        pass


def test_a_workload_without_parameters_is_refused_before_training(tmp_path):
    path = tmp_path / "empty-weights.yaml"
    path.write_text("version: 1\nname: relu-only\ninput_bytes: 4\nlayers:\n"
                    "- {name: relu, kind: elementwise, parameters: 0, forward_flops: 8, "
                    "output_bytes: 4, stashed_bytes: 4}\n")
    config = TrainConfig(model=str(path), topology="pod16", mode=Mode.PHANTOM)
    with pytest.raises(UserError, match="no parameters, so there is nothing to train"):
        plan_for(config)


def test_a_workload_file_changed_on_disk_is_read_anew(tmp_path):
    path = tmp_path / "net.yaml"
    dump_workload(workload("resnet50"), path)
    first = load_workload(path)
    assert load_workload(path) == first
    changed = dataclasses.replace(first, layers=first.layers[:3])
    dump_workload(changed, path)
    assert load_workload(path) == changed
    path.write_text("version: 1\n", encoding="utf-8")
    with pytest.raises(SpecError, match="net.yaml"):
        load_workload(path)


@pytest.mark.parametrize("options, status", [((), 0), (("--micro-batch", "64"), 2)])
def test_one_train_reads_its_workload_file_once(ipupod_main, monkeypatch, options, status):
    # resolved once: the defaults that fit, the checks and (when it does not fit) the
    # hint's every candidate all price the one workload read from the file
    read = []
    read_text = workload_yaml.read_text

    def counted(file: str, *args: str) -> str:
        read.append(file)
        return read_text(file, *args)

    monkeypatch.setattr(workload_yaml, "read_text", counted)
    run = ipupod_main("train", "--model", str(EXAMPLES / "bert-large.yaml"), "--steps", "1",
                      *options)
    assert run.returncode == status, run.stderr[-2000:]
    assert len(read) == 1 and read[0].endswith("bert-large.yaml")
