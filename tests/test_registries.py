"""Every plugin registry: each module of a plugin package registers itself, every entry
loads and builds, and a wrong or forgotten registration is an error."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
import textwrap

import pytest

from cluster.model.plugins import Registry
from cluster.model.presets import _PRESETS, build_preset, presets
from cluster.model.topology import Topology
from cluster.training.pipeline.schedules import DEFAULT, ONE_STAGE, SCHEDULES, pipeline_schedule
from cluster.training.workloads import BUILTINS, Workload, workload
from cluster.training.workloads.registry import Builtin, builtin_workload
from gcl.algorithms import _REGISTRY as ALGORITHMS
from gcl.algorithms import Algorithm, register
from gcl.planner import plan
from ipu_node.links.mailbox import Mailbox
from ipu_node.links.transport import TRANSPORTS

PLUGIN_PACKAGES = {"algorithms": ALGORITHMS, "presets": _PRESETS, "schedules": SCHEDULES,
                   "transports": TRANSPORTS}


@pytest.mark.parametrize("registry", PLUGIN_PACKAGES.values(), ids=PLUGIN_PACKAGES.keys())
def test_every_module_of_a_plugin_package_registers_something(registry: Registry) -> None:
    assert registry.modules(), registry.package
    assert registry.unregistered() == []
    for module in registry.modules():
        assert registry.registered_by(module), module


def test_a_plugin_module_that_forgets_to_register_is_found(tmp_path, monkeypatch) -> None:
    package = tmp_path / "fake_plugins"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent("""
        from cluster.model.plugins import Registry
        REGISTRY = Registry("thing", __name__)
    """))
    (package / "good.py").write_text(
        "from fake_plugins import REGISTRY\nREGISTRY.register('good', 1, __name__)\n")
    (package / "forgotten.py").write_text("def thing():\n    return 2\n")
    (package / "_helpers.py").write_text("HELPER = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    registry = importlib.import_module("fake_plugins").REGISTRY
    try:
        assert dict(registry) == {"good": 1}
        assert registry.unregistered() == ["fake_plugins.forgotten"]
    finally:
        for name in [n for n in sys.modules if n.startswith("fake_plugins")]:
            del sys.modules[name]


def test_every_built_in_workload_builder_in_the_package_is_registered() -> None:
    registered = {entry.build for entry in BUILTINS.values()}
    builders = []
    for module_name in BUILTINS.modules():
        module = importlib.import_module(module_name)
        for _, fn in inspect.getmembers(module, inspect.isfunction):
            signature = inspect.signature(fn)
            if fn.__module__ == module_name and signature.return_annotation in (
                    Workload, "Workload") and all(
                    p.default is not inspect.Parameter.empty
                    for p in signature.parameters.values()):
                builders.append(fn)
    assert builders and set(builders) == registered


def test_every_registered_entry_builds() -> None:
    for name in BUILTINS:
        assert isinstance(workload(name), Workload), name
    for name in SCHEDULES:
        assert pipeline_schedule(name, 2, 4).stages == 2, name
    for entry in presets():
        spec = entry.example.split(" / ")[0]
        assert isinstance(build_preset(spec), Topology), spec
    topology = build_preset("pod16")
    for name, algorithm in ALGORITHMS.items():
        collective = sorted(algorithm.collectives)[0]
        assert plan(collective, topology, 1 << 12, algorithm_name=name).algorithm == name
    for name, transport in TRANSPORTS.items():  # a server listens, a client reaches it
        server = transport.server("d0", Mailbox(), "127.0.0.1", "secret")
        address = server.start()
        try:
            transport.client("d1", address, "secret").close()
            assert address.startswith("127.0.0.1:"), name
        finally:
            server.stop()


def test_the_named_schedules_are_registered() -> None:
    assert DEFAULT in SCHEDULES and ONE_STAGE in SCHEDULES


def test_a_name_registered_twice_is_an_error() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        SCHEDULES.register(DEFAULT, SCHEDULES[DEFAULT], __name__)
    with pytest.raises(ValueError, match="registered twice"):
        builtin_workload("mlp", "again")(BUILTINS["mlp"].build)


def test_an_entry_of_the_wrong_kind_is_an_error() -> None:
    class NoOrder(Algorithm):
        name = "no_order"
        collectives = frozenset({"allreduce"})

    with pytest.raises(TypeError, match="auto_order"):
        register(NoOrder)
    with pytest.raises(TypeError, match="subclasses Algorithm"):
        ALGORITHMS.register("not_an_algorithm", object(), __name__)  # type: ignore[arg-type]

    def needs_an_argument(width: int) -> Workload:
        raise AssertionError("never built")

    with pytest.raises(TypeError, match="keyword with a default"):
        BUILTINS.register("needs-an-argument",
                          Builtin(needs_an_argument, "x", "needs-an-argument"), __name__)
    assert "no_order" not in ALGORITHMS and "needs-an-argument" not in BUILTINS


def test_workload_options_come_from_the_builders_signature() -> None:
    assert BUILTINS["resnet50"].options == ("image_size", "classes")
    assert BUILTINS["gpt2-xl"].options == ("sequence_length",)
    assert BUILTINS["mlp"].options == ("input_size", "hidden", "classes")
    assert BUILTINS["mlp"].precision is None and BUILTINS["bert-base"].precision is not None


@pytest.mark.parametrize("first", ["cluster.training.pipeline.schedules.popart",
                                   "cluster.training.workloads.gpt2",
                                   "cluster.model.presets.ipu_pod"])
def test_a_registry_is_complete_whichever_plugin_was_imported_first(first: str) -> None:
    code = (f"import {first}\n"
            "from cluster.training.pipeline.schedules import SCHEDULES\n"
            "from cluster.training.workloads import BUILTINS\n"
            "from cluster.model.presets import presets\n"
            "print(len(SCHEDULES), len(BUILTINS), len(presets()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == [str(len(SCHEDULES)), str(len(BUILTINS)), str(len(presets()))]


@pytest.mark.parametrize("first", ["cluster.training.pipeline.schedules.popart",
                                   "cluster.training.fidelity.published",
                                   "gcl.algorithms.ring"])
def test_a_registry_keeps_its_modules_order_whichever_plugin_was_imported_first(
        first: str) -> None:
    code = (f"import {first}\n"
            "from cluster.training.pipeline.schedules import SCHEDULES\n"
            "from gcl.algorithms import _REGISTRY\n"
            "print(','.join(SCHEDULES), ','.join(_REGISTRY))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out == [",".join(SCHEDULES), ",".join(ALGORITHMS)]


def test_built_in_workloads_are_listed_smallest_first() -> None:
    sizes = [workload(name).parameter_count for name in BUILTINS]
    assert sizes == sorted(sizes) and list(BUILTINS)[:3] == ["mlp", "gpt-tiny", "resnet50"]
