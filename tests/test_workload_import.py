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

from tests.extras import NEEDS_TORCH_EXTRA

torch = pytest.importorskip("torch", reason=NEEDS_TORCH_EXTRA)
pytest.importorskip("torchvision", reason=NEEDS_TORCH_EXTRA)
pytest.importorskip("onnx", reason=NEEDS_TORCH_EXTRA)

from cluster.errors import UserError  # noqa: E402
from cluster.training.importers.forward_memory import forward_bytes  # noqa: E402
from cluster.training.importers.notes import (  # noqa: E402
    ImportNote,
    InferenceGraphWarning,
    NumberFormatWarning,
    UncountedOpsWarning,
    UnusedParametersWarning,
)
from cluster.training.importers.onnx_import import import_onnx_file  # noqa: E402
from cluster.training.importers.recurrent import step_flops  # noqa: E402
from cluster.training.importers.torch_import import import_torch_module  # noqa: E402
from cluster.training.workloads import (  # noqa: E402
    SINGLE,
    LayerKind,
    Workload,
    bert_large,
    load_workload,
    memory_use,
    resnet50,
    to_yaml,
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
    with warnings.catch_warnings():  # the exporter's remarks on an LSTM's weights
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (torch.randn(shape),), str(path), dynamo=True,
                          optimize=False, verbose=False)
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


def hand_made_onnx(path: Path, weight: str = "w") -> Path:
    """A graph from elsewhere (no module names), a symbolic batch and an op without a
    price: Conv, Relu, GlobalAveragePool, Flatten, Gemm, CumSum; ``weight`` names the
    convolution's weight."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    weights = [numpy_helper.from_array(np.ones(shape, np.float32), name) for name, shape in
               [(weight, (4, 3, 3, 3)), ("fc.w", (2, 4)), ("fc.b", (2,))]]
    axis = numpy_helper.from_array(np.array(1, np.int64), "axis")
    nodes = [helper.make_node("Conv", ["x", weight], ["c"], name="conv", pads=[1, 1, 1, 1]),
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


# -- what the importer counts, and what it says it could not ----------------------------


class Recurrent(torch.nn.Module):
    """A recurrent layer (``torch.nn.LSTM`` or ``GRU``, batch first) and a classifier."""

    def __init__(self, cell: Any, **sizes: Any) -> None:
        super().__init__()
        self.rnn = cell(8, 16, batch_first=True, **sizes)
        self.head = torch.nn.Linear(16 * (2 if sizes.get("bidirectional") else 1), 4)

    def forward(self, x: Any) -> Any:
        return self.head(self.rnn(x)[0][:, -1])


LSTM_FLOPS = 5 * (  # 5 steps; per step, layer 0 (I=8, H=16), then layer 1 (I=16, H=16):
    2 * 4 * 16 * (8 + 16) + 4 * 16 + 5 * 8 * 16 + 4 * 16      # products, gate sums,
    + 2 * 4 * 16 * (16 + 16) + 4 * 16 + 5 * 8 * 16 + 4 * 16)  # 5 activations, c and h
GRU_FLOPS = 5 * 2 * (  # 5 steps, 2 directions; per step (I=8, H=16):
    2 * 3 * 16 * (8 + 16) + 8 * 16 + 3 * 8 * 16)  # products, elementwise, 3 activations


@pytest.fixture(scope="module")
def recurrent_models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, Path]]:
    """A 2-layer LSTM and a bidirectional GRU, each with its ONNX export."""
    folder = tmp_path_factory.mktemp("rnn")
    made = {"lstm": Recurrent(torch.nn.LSTM, num_layers=2),
            "gru": Recurrent(torch.nn.GRU, bidirectional=True)}
    return {name: (model, export_onnx(model, (1, 5, 8), folder / f"{name}.onnx"))
            for name, model in made.items()}


@pytest.mark.parametrize("name, flops", [("lstm", LSTM_FLOPS), ("gru", GRU_FLOPS)])
def test_a_recurrent_layer_counts_its_gate_formulas_from_pytorch_and_onnx(
        recurrent_models, name, flops) -> None:
    """PyTorch runs the LSTM as one fused op (``mkldnn_rnn_layer``) and the GRU through
    views (``unsafe_split``); ONNX has LSTM and GRU nodes: all are priced by the gate
    formulas of PyTorch's documentation, hand-computed above, with no warning (the GRU
    imports under --strict)."""
    module, onnx_file = recurrent_models[name]
    with warnings.catch_warnings():
        warnings.simplefilter("error", ImportNote)
        from_torch = import_torch_module(module, (1, 5, 8), name, strict=True)
        from_onnx = import_onnx_file(str(onnx_file), name, strict=True)
    assert from_torch.layers[0].name == from_onnx.layers[0].name == "rnn"
    assert from_torch.layers[0].kind is LayerKind.DENSE
    assert from_torch.layers[0].forward_flops == flops
    assert abs(from_onnx.layers[0].forward_flops / flops - 1) < 0.001  # and a shape op
    assert from_torch.parameter_count == from_onnx.parameter_count


def test_a_layer_of_unknown_flops_is_named_in_the_workload() -> None:
    with pytest.warns(UncountedOpsWarning):
        workload = import_torch_module(Cumulative(), (1, 8), "c")
    assert workload.uncounted == {"linear": ("cumsum",)}
    assert "uncounted_ops: [cumsum]" in to_yaml(workload)


class Branches(torch.nn.Module):
    """Data-dependent control flow: ``big`` runs only for a large input; ``spare`` never."""

    def __init__(self) -> None:
        super().__init__()
        self.small = torch.nn.Linear(8, 8)
        self.big = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.Linear(64, 8))
        self.add_module("spare", torch.nn.Linear(8, 8))

    def forward(self, x: Any) -> Any:
        return self.big(x) if x.sum() > 1e9 else self.small(x)


def test_modules_the_traced_forward_did_not_use_are_named() -> None:
    with pytest.warns(UnusedParametersWarning, match=r"^2 modules, 1,168 parameters, were not "
                                                     r"used by the traced forward: big, spare"):
        workload = import_torch_module(Branches(), (1, 8), "b")
    assert workload.parameter_count == 72


def test_an_onnx_graph_with_folded_batch_norms_is_said_to_be_for_inference(
        small_models, tmp_path) -> None:
    """The dynamo exporter's optimiser, and the legacy exporter (its folded convolution
    weights are named ``onnx::Conv_N``), fold each batch norm into its convolution."""
    module, training_graph = small_models["cnn"]
    optimized = tmp_path / "optimized.onnx"
    torch.onnx.export(module.eval(), (torch.randn(1, 3, 32, 32),), str(optimized),
                      dynamo=True, optimize=True, verbose=False)
    legacy = hand_made_onnx(tmp_path / "legacy.onnx", weight="onnx::Conv_7")
    warnings.simplefilter("ignore", UncountedOpsWarning)  # the hand-made graph's CumSum
    for path in (optimized, legacy):
        with pytest.warns(InferenceGraphWarning, match="inference graph.*optimize=False"):
            import_onnx_file(str(path), "folded", (1, 3, 8, 8) if path == legacy else None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InferenceGraphWarning)
        import_onnx_file(str(training_graph), "cnn")


@pytest.mark.parametrize("dtype, priced", [("bfloat16", "float16"), ("float64", "float32")])
def test_a_format_the_ipu_has_not_is_priced_as_its_nearest_with_a_note(dtype, priced) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", ImportNote)
        plain = import_torch_module(torch.nn.Linear(8, 4).to(getattr(torch, priced)), (1, 8),
                                    "l")
    with pytest.warns(NumberFormatWarning, match=f"runs in {dtype}.*priced as {priced}"):
        odd = import_torch_module(torch.nn.Linear(8, 4).to(getattr(torch, dtype)), (1, 8), "l")
    assert odd == plain


class Widening(torch.nn.Module):
    """No parameters, and an output 10^10 times its input: 640 GB from 64 bytes."""

    def forward(self, x: Any) -> Any:
        return torch.nn.functional.interpolate(x, scale_factor=100_000)


def test_a_forward_that_cannot_fit_in_memory_is_refused_before_it_runs() -> None:
    with pytest.raises(UserError, match=r"input of shape 1,1,4,4 needs about 640\.0 GB \(the "
                                        r"input 64 bytes, its tensors 640\.0 GB\), more than"):
        import_torch_module(Widening(), (1, 1, 4, 4), "w")


def test_resnet50_at_batch_128_needs_about_11_gb_counted_on_the_meta_device() -> None:
    """What the refusal compares with the memory available: every tensor the training
    forward makes, here counted from shapes alone (an import at batch 8 grew this
    process's peak memory by 0.77 GB: 8 x 0.092 GB and the input)."""
    made = forward_bytes(factories().resnet50(),
                         (torch.empty(128, 3, 224, 224, device="meta"),), torch)
    assert made is not None and 11e9 < made < 12.5e9


class CellsAndPacking(torch.nn.Module):
    """An LSTM cell, a ReLU RNN, and a GRU over a packed batch of lengths 5 and 3."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = torch.nn.LSTMCell(8, 16)
        self.relu_rnn = torch.nn.RNN(8, 16, nonlinearity="relu", batch_first=True)
        self.gru = torch.nn.GRU(8, 16, batch_first=True)

    def forward(self, x: Any) -> Any:
        packed = torch.nn.utils.rnn.pack_padded_sequence(x, [5, 3], batch_first=True)
        return (self.cell(x[:, 0])[0] + self.relu_rnn(x)[0][:, -1]
                + self.gru(packed)[1][0])


def test_cells_relu_rnns_and_packed_sequences_count_by_the_same_formulas() -> None:
    """Per sample of a batch of 2: the cell runs once, the RNN 5 steps, the GRU the 8
    positions of the packed batch (4 a sample)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", ImportNote)
        workload = import_torch_module(CellsAndPacking(), (2, 5, 8), "cells")
    flops = {layer.name: layer.forward_flops for layer in workload.layers}
    assert flops["cell"] == step_flops("lstm", 8, 16) == 2 * 4 * 16 * 24 + 4 * 16 + 40 * 16 \
        + 4 * 16
    assert flops["relu_rnn"] == 5 * step_flops("rnn_relu", 8, 16) == 5 * (2 * 16 * 24 + 2 * 16)
    assert flops["gru"] == 4 * step_flops("gru", 8, 16)
