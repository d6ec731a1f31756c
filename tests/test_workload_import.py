"""Imported networks count as the built-ins do: torchvision's ResNet-50 against the built-in
ResNet-50, a BERT-Large-shaped encoder stack against the built-in BERT-Large, an ONNX
export against the PyTorch import of the same network; and the reports take the result."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("torchvision")
pytest.importorskip("onnx")

from cluster.errors import UserError  # noqa: E402
from cluster.training.importers.notes import UncountedOpsWarning  # noqa: E402
from cluster.training.importers.onnx_import import import_onnx_file  # noqa: E402
from cluster.training.importers.torch_import import import_torch_module  # noqa: E402
from cluster.training.workloads import (  # noqa: E402
    SINGLE,
    LayerKind,
    Workload,
    bert_large,
    load_workload,
    memory_use,
    resnet50,
)

ROOT = Path(__file__).resolve().parent.parent
FACTORIES = ROOT / "examples" / "models" / "factories.py"


def factories() -> ModuleType:
    """examples/models/factories.py, loaded as a module."""
    spec = importlib.util.spec_from_file_location("factories_under_test", FACTORIES)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def export_onnx(module: Any, shape: tuple[int, ...], path: Path) -> Path:
    """``module`` exported as torch's dynamo exporter does, without its optimiser (which
    folds each batch norm into the convolution before it)."""
    module.eval()
    torch.onnx.export(module, (torch.randn(shape),), str(path), dynamo=True, optimize=False,
                      verbose=False)
    return path


def rows(workload: Workload) -> list[tuple[str, LayerKind, int, int]]:
    return [(layer.name, layer.kind, layer.parameters, layer.output_bytes)
            for layer in workload.layers]


def test_torchvision_resnet50_matches_the_builtin_resnet50() -> None:
    """Same 126 layers (names, kinds), the exact parameter count (25,557,032), FLOPs within
    1%, and the same bytes crossing each layer's cut: the built-in in float32, as the
    PyTorch model runs. Stashed bytes are not compared: PyTorch keeps a ReLU's float
    output where the built-in counts a one-byte mask."""
    imported = import_torch_module(factories().resnet50(), (1, 3, 224, 224), "resnet50")
    builtin = resnet50(precision=SINGLE)
    assert imported.parameter_count == builtin.parameter_count == 25_557_032
    assert abs(imported.forward_flops / builtin.forward_flops - 1) < 0.01
    assert rows(imported) == rows(builtin)
    assert imported.input_bytes == 3 * 224 * 224 * 4


def test_a_bert_large_shaped_encoder_stack_matches_the_builtin_bert_large_encoders() -> None:
    """What is comparable: ``torch.nn.TransformerEncoder`` has no embeddings, pre-training
    heads or tokens to mask, so it is compared with the built-in BERT-Large's 48 encoder
    layers (``encoder{i}.attention``, ``encoder{i}.ffn``) at 128 tokens, in float32:
    layer by layer the same kind, parameters and output bytes, and forward FLOPs within
    2% (they differ in the small change: PyTorch scales Q per element, the built-in
    scores per score and adds a mask it prices)."""
    imported = import_torch_module(factories().bert_large_encoder(), (1, 128, 1024), "enc")
    encoders = [layer for layer in bert_large(precision=SINGLE).layers
                if layer.name.startswith("encoder")]
    mine = imported.layers[:-1]  # the loss over the encoder's output aside
    assert [(m.kind, m.parameters, m.output_bytes) for m in mine] == \
        [(b.kind, b.parameters, b.output_bytes) for b in encoders]
    assert [m.name for m in mine[:2]] == ["layers.0.attention", "layers.0.ffn"]
    for m, b in zip(mine, encoders):
        assert abs(m.forward_flops / b.forward_flops - 1) < 0.02, (m, b)
    assert sum(m.parameters for m in mine) == 24 * 12_596_224


@pytest.fixture(scope="module")
def small_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Path]]:
    """The small CNN and the tiny transformer, each with its ONNX export."""
    folder = tmp_path_factory.mktemp("onnx")
    made = factories()
    return {name: (model, export_onnx(model, shape, folder / f"{name}.onnx"))
            for name, model, shape in [("cnn", made.small_cnn(), (1, 3, 32, 32)),
                                       ("transformer", made.tiny_transformer(), (1, 16, 64))]}


@pytest.mark.parametrize("name, shape", [("cnn", (1, 3, 32, 32)),
                                         ("transformer", (1, 16, 64))])
def test_an_onnx_export_imports_as_the_pytorch_module_does(small_models, name, shape) -> None:
    """Same layers (names, kinds, parameters, bytes crossing each cut) and forward FLOPs
    within 1% (the export runs in eval mode: no dropout)."""
    module, onnx_file = small_models[name]
    from_torch = import_torch_module(module, shape, name)
    from_onnx = import_onnx_file(str(onnx_file), name)
    assert rows(from_onnx) == rows(from_torch)
    assert from_onnx.input_bytes == from_torch.input_bytes
    assert abs(from_onnx.forward_flops / from_torch.forward_flops - 1) < 0.01


def test_layers_follow_the_builtin_grouping(small_models) -> None:
    module, _ = small_models["cnn"]
    names = [layer.name for layer in import_torch_module(module, (1, 3, 32, 32), "cnn").layers]
    assert names[:6] == ["stem", "bn", "block1.conv1", "block1.bn1", "block1.conv2",
                         "block1.bn2"]
    assert "block1.add" in names and names[-3:] == ["pool", "fc", "loss"]


def test_counts_are_per_sample_whatever_the_batch(small_models) -> None:
    module, _ = small_models["cnn"]
    one = import_torch_module(module, (1, 3, 32, 32), "cnn")
    four = import_torch_module(module, (4, 3, 32, 32), "cnn")
    assert [(a.forward_flops, a.output_bytes) for a in one.layers] == \
        [(b.forward_flops, b.output_bytes) for b in four.layers]


def test_an_import_leaves_the_module_as_it_was(small_models) -> None:
    module, _ = small_models["cnn"]
    module.eval()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    import_torch_module(module, (1, 3, 32, 32), "cnn")
    assert not module.training
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())


class Cumulative(torch.nn.Module):
    """A linear layer, then an op the importer has no price for."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(8, 8)

    def forward(self, x: Any) -> Any:
        return torch.cumsum(self.linear(x), dim=-1)


def test_an_op_without_a_price_is_named_in_a_warning_or_refused_when_strict() -> None:
    with pytest.warns(UncountedOpsWarning, match=r"not counted.*cumsum"):
        workload = import_torch_module(Cumulative(), (1, 8), "c")
    assert workload.layers[0].forward_flops == 2 * 8 * 8
    with pytest.raises(UserError, match=r"cumsum.*--strict"):
        import_torch_module(Cumulative(), (1, 8), "c", strict=True)


def test_a_counted_network_gives_no_warning(small_models) -> None:
    module, onnx_file = small_models["transformer"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UncountedOpsWarning)
        import_torch_module(module, (1, 16, 64), "t")
        import_onnx_file(str(onnx_file), "t")


def test_the_reports_run_on_an_imported_workload(small_models, tmp_path) -> None:
    """`workload import` writes a file that train, pipeline-report and scaling-report take,
    and whose memory use the memory model prices."""
    _, onnx_file = small_models["cnn"]
    net = tmp_path / "net.yaml"
    commands = [
        ["workload", "import", str(onnx_file), "--out", str(net)],
        ["train", "--mode", "phantom", "--model", str(net), "--topology", "pod16",
         "--steps", "1"],
        ["pipeline-report", "--model", str(net), "--topology", "pod16",
         "--ipus-per-replica", "2", "--micro-batches", "4", "--schedules", "1f1b",
         "--out", str(tmp_path / "pipeline")],
        ["scaling-report", "--model", str(net), "--topologies", "pod16,pod64",
         "--out", str(tmp_path / "scaling")],
    ]
    for argv in commands:
        run = subprocess.run([str(Path(sys.executable).with_name("ipupod")), *argv],
                             capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, (argv, run.stderr[-1500:])
    assert (tmp_path / "scaling" / "README.md").is_file()
    workload = load_workload(net)
    assert memory_use(workload, micro_batch=4).total_bytes > 4 * workload.parameter_count


def test_the_importers_load_without_torch_or_onnx() -> None:
    """The base install: importing the importers and the command imports neither."""
    code = ("import sys\n"
            "import cluster.cli.workload, cluster.training.importers.source\n"
            "import cluster.training.importers.torch_import\n"
            "import cluster.training.importers.onnx_import\n"
            "loaded = [m for m in ('torch', 'torchvision', 'onnx') if m in sys.modules]\n"
            "assert not loaded, loaded\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr


def hand_made_onnx(path: Path) -> Path:
    """A graph from elsewhere (no module names), a symbolic batch and an op without a
    price: Conv, Relu, GlobalAveragePool, Flatten, Gemm, CumSum."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = [numpy_helper.from_array(np.ones(shape, np.float32), name) for name, shape in
               [("w", (4, 3, 3, 3)), ("fc.w", (2, 4)), ("fc.b", (2,))]]
    axis = numpy_helper.from_array(np.array(1, np.int64), "axis")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("GlobalAveragePool", ["r"], ["p"], name="pool"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fc.w", "fc.b"], ["g"], name="fc", transB=1),
             helper.make_node("CumSum", ["g", "axis"], ["y"], name="cumsum")]
    graph = helper.make_graph(
        nodes, "hand", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])],
        [*weights, axis])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_an_onnx_file_from_elsewhere_is_grouped_node_by_node(tmp_path) -> None:
    path = str(hand_made_onnx(tmp_path / "hand.onnx"))
    with pytest.raises(UserError, match="has shape N,3,8,8: give --input-shape"):
        import_onnx_file(path, "hand")
    with pytest.warns(UncountedOpsWarning, match=r"for ops: CumSum \(x1\)"):
        workload = import_onnx_file(path, "hand", (1, 3, 8, 8))
    assert [(layer.name, layer.kind, layer.parameters, layer.forward_flops)
            for layer in workload.layers[:3]] == [
        ("conv", LayerKind.CONV, 108, 2 * 4 * 8 * 8 * 27 + 4 * 8 * 8),  # and the ReLU
        ("pool", LayerKind.POOL, 0, 4 * 8 * 8),
        ("fc", LayerKind.DENSE, 10, 2 * 4 * 2)]
    assert workload.input_bytes == 3 * 8 * 8 * 4
    with pytest.raises(UserError, match="CumSum"):
        import_onnx_file(path, "hand", (1, 3, 8, 8), strict=True)


class TokenModel(torch.nn.Module):
    """Token ids in, logits out: an embedding, a layer norm, a classifier."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(100, 32)
        self.norm = torch.nn.LayerNorm(32)
        self.head = torch.nn.Linear(32, 100)

    def forward(self, ids: Any) -> Any:
        return self.head(self.norm(self.embed(ids)))


def test_a_token_model_imports_alike_from_pytorch_and_onnx(tmp_path) -> None:
    """Integer inputs (``--input-dtype int64``): the int64 ids are the input bytes; the
    embedding is a layer of its own with the table's parameters."""
    model = TokenModel().eval()
    path = tmp_path / "tokens.onnx"
    torch.onnx.export(model, (torch.randint(0, 100, (1, 16)),), str(path), dynamo=True,
                      optimize=False, verbose=False)
    from_torch = import_torch_module(model, (1, 16), "tokens", integer_input=True)
    from_onnx = import_onnx_file(str(path), "tokens")
    assert from_onnx.name == "tokens"
    assert rows(from_torch) == rows(from_onnx) == [
        ("embed", LayerKind.EMBEDDING, 3200, 16 * 32 * 4), ("norm", LayerKind.NORM, 64, 2048),
        ("head", LayerKind.DENSE, 3300, 16 * 100 * 4), ("loss", LayerKind.LOSS, 0, 4)]
    assert from_torch.input_bytes == from_onnx.input_bytes == 16 * 8
    assert from_torch.forward_flops == from_onnx.forward_flops
