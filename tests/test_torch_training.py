"""PyTorch models trained data-parallel on the emulated servers (real mode): the replicas end
with the weights of single-process training on the concatenated batch, stay identical, and
their step is priced as phantom mode prices the same workload; bad models and options are
refused in one line."""

import json
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import jsonschema
import numpy as np
import pytest

from cluster.errors import UserError
from cluster.model.trace import BOTH_CLOCKS
from cluster.training.config import TrainConfig
from cluster.training.placement import topology_for
from cluster.training.plan import plan_for
from cluster.training.step_trace import STEP
from cluster.training.trainer import train
from cluster.training.workloads import Workload, workload
from cluster.training.workloads.layers import Layer, LayerKind
from ipu_node.wall_trace import CARDS, DRIVER
from tests.extras import NEEDS_TORCH_EXTRA
from tests.test_trace import SCHEMA

torch = pytest.importorskip("torch", reason=NEEDS_TORCH_EXTRA)

from cluster.training.engines.torch_training import train_torch  # noqa: E402
from cluster.training.importers.torch_factory import load_factory  # noqa: E402
from cluster.training.torch_replicas import BeginBlock, Options, training_model  # noqa: E402
from cluster.training.torch_replicas.begin_block import (  # noqa: E402
    layers_per_stage,
    replica_ipus_needed,
    stage_marks,
)
from cluster.training.torch_replicas.pricing import simulated_step_time  # noqa: E402
from cluster.training.torch_replicas.replica_tasks import MODEL_LOSS  # noqa: E402
from cluster.training.torch_replicas.run import load_model, price  # noqa: E402
from cluster.training.torch_replicas.single_process import (  # noqa: E402
    relative_difference,
    train_reference,
)

FACTORIES = textwrap.dedent('''
    import torch

    class SmallCnn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.fc = torch.nn.Linear(4 * 8 * 8, 5)

        def forward(self, x):
            return self.fc(torch.relu(self.conv(x)).flatten(1))

    class WithLoss(SmallCnn):
        def forward(self, x, labels=None):
            logits = super().forward(x)
            if labels is None:
                return logits
            return logits, torch.nn.functional.cross_entropy(logits, labels)

    def small_cnn():
        torch.manual_seed(0)
        return SmallCnn()

    def with_loss():
        torch.manual_seed(1)
        return WithLoss()

    def raises():
        raise RuntimeError("no weights here")

    def not_a_module():
        return 42

    def vector_output():
        return torch.nn.Linear(3, 1)
''')


@pytest.fixture(scope="module")
def factories(tmp_path_factory):
    path = tmp_path_factory.mktemp("factories") / "models.py"
    path.write_text(FACTORIES)
    return path


@pytest.fixture(scope="module")
def two_servers(ray_session):
    from ipu_node.pod import EmulatedPod

    pod = EmulatedPod.launch("dss8440x2")
    yield pod
    pod.shutdown()


def test_replicas_on_two_servers_end_with_the_weights_of_single_process_training(
        factories, two_servers):
    model = load_model(f"{factories}:small_cnn", (3, 8, 8))
    config = TrainConfig(servers=2, replicas_per_server=2, micro_batch=4, accumulation=2,
                         steps=3, check=True)
    parts = price(model, config, two_servers.topology)
    bytes_before = two_servers.link_bytes().sum()
    record = train_torch(model, plan_for(config, two_servers.topology), two_servers, parts)
    assert record["replicas_identical"] is True
    assert record["reference_max_rel_error"] < 1e-5
    assert [round(s["loss"], 4) for s in record["steps"]] == [
        round(loss, 4) for loss in record["reference_losses"]]
    assert all(s["sim_seconds"] == parts.sim_seconds > 0 for s in record["steps"])
    assert record["global_batch"] == 2 * 2 * 2 * 4 and record["replicas"] == 4
    assert two_servers.link_bytes().sum() > bytes_before  # the gradients crossed the links


def test_the_poptorch_shaped_model_trains_like_one_process_and_copies_weights_back(
        factories, two_servers):
    model = load_factory(f"{factories}:with_loss")()
    BeginBlock(model.fc, ipu_id=1)
    start = [p.detach().clone() for p in model.parameters()]
    options = Options().replicationFactor(4).deviceIterations(2)
    options.Training.gradientAccumulation(2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    rng = np.random.default_rng(3)
    batches = [(rng.standard_normal((64, 3, 8, 8), dtype=np.float32),
                rng.integers(0, 5, 64)) for _ in range(2)]
    wrapped = training_model(model, options, optimizer, pod=two_servers)
    assert wrapped.config.ipus_per_replica == 2  # BeginBlock: a replica spans 2 IPUs
    with pytest.raises(UserError, match="micro-batches of equal size"):
        wrapped(torch.zeros(30, 3, 8, 8), torch.zeros(30, dtype=torch.int64))
    for x, y in batches:
        loss = wrapped(torch.from_numpy(x), torch.from_numpy(y))
        assert loss.ndim == 0 and wrapped.last_step["replicas_identical"] is True
        assert wrapped.last_step["sim_seconds"] > 0
    wrapped.detachFromDevice()  # copies the weights to the host model
    trained = np.concatenate([p.detach().reshape(-1).numpy() for p in model.parameters()])
    expected, _ = train_reference(
        load_factory(f"{factories}:with_loss")(), torch.optim.SGD, {"lr": 0.1, "momentum": 0.9},
        MODEL_LOSS, [(x[i * 32:(i + 1) * 32], y[i * 32:(i + 1) * 32])
                     for x, y in batches for i in range(2)])  # a step per device iteration
    assert relative_difference(trained, expected) < 1e-5
    assert not np.allclose(trained, np.concatenate([v.reshape(-1).numpy() for v in start]))


def test_a_step_is_priced_as_phantom_mode_prices_the_same_workload():
    placement = TrainConfig(servers=2, micro_batch=2)
    priced = simulated_step_time(workload("resnet50"), placement, topology_for(placement))
    phantom = train(plan_for(TrainConfig(servers=2, micro_batch=2, model="resnet50",
                                         mode="phantom", recompute=False, steps=1)))
    assert priced.sim_seconds == phantom["steps"][0]["sim_seconds"] > 0


def test_a_model_too_big_for_an_ipu_is_refused_before_anything_starts():
    placement = TrainConfig(servers=1, micro_batch=32)
    with pytest.raises(UserError, match="In-Processor-Memory"):
        simulated_step_time(workload("resnet50"), placement, topology_for(placement))


def test_begin_block_marks_give_the_ipus_of_a_replica_and_the_layers_of_each_stage():
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    assert replica_ipus_needed(stage_marks(model)) == 1
    BeginBlock(model[2], ipu_id=1)
    marks = stage_marks(model)
    assert marks == [("2", 1)] and replica_ipus_needed(marks) == 2
    layers = [Layer(name, LayerKind.DENSE, 20, 40, 16, 16) for name in ("0", "1", "2.lin")]
    net = Workload(name="n", layers=tuple(layers), input_bytes=16)
    assert layers_per_stage(net, marks, 2) == (2, 1)
    BeginBlock(model[1], ipu_id=2)
    with pytest.raises(UserError, match="0, 1, 2"):
        replica_ipus_needed(stage_marks(model))  # ipu_ids 0, 2, 1 in module order


@pytest.mark.parametrize("count", [0, -1, 1.5, True])
def test_options_refuse_counts_that_are_not_whole_numbers_of_one_or_more(count):
    with pytest.raises(UserError, match="whole number"):
        Options().replicationFactor(count)
    with pytest.raises(UserError, match="whole number"):
        Options().Training.gradientAccumulation(count)


def test_training_model_refuses_what_is_not_a_module_or_an_optimizer():
    with pytest.raises(UserError, match="torch.nn.Module"):
        training_model(object(), Options(), None)
    with pytest.raises(UserError, match="optimizer"):
        training_model(torch.nn.Linear(2, 2), Options(), None)


@pytest.mark.parametrize("factory, extra, words", [
    ("raises", [], "raised RuntimeError: no weights here"),
    ("not_a_module", [], "not a torch.nn.Module"),
    ("small_cnn", ["--sample-shape", "3,9,8"], "cannot take samples of shape (3, 9, 8)"),
    ("vector_output", ["--sample-shape", "3"], "(batch, classes)"),
    ("small_cnn", ["--sample-shape", "3,x"], "--sample-shape takes"),
    ("small_cnn", ["--mode", "phantom"], "--torch trains in real mode"),
    ("small_cnn", ["--hidden", "8"], "--hidden does not apply with --torch"),
    ("small_cnn", ["--tensor-parallel", "2"], "--tensor-parallel does not apply with --torch"),
    ("small_cnn", ["--expert-parallel", "2"], "--expert-parallel does not apply with --torch"),
    ("missing", [], "has no 'missing'"),
])
def test_a_bad_model_or_option_is_one_line_and_exit_2(factories, factory, extra, words,
                                                     capsys):
    """Run in this process, which has imported torch already (a subprocess each would pay
    for that import again); the command in a process of its own is docs/torch-training.md's
    runnable block (tests/test_docs_run.py)."""
    from cluster.cli.main import main

    shape = [] if "--sample-shape" in extra else ["--sample-shape", "3,8,8"]
    with pytest.raises(SystemExit) as ended:
        main(["train", "--torch", f"{factories}:{factory}", *shape, *extra])
    err = capsys.readouterr().err
    assert ended.value.code == 2, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert words in err and "Traceback" not in err


def test_the_train_command_trains_a_torch_factory_prints_the_json_and_traces_both_clocks(
        factories, ipupod_here, tmp_path):
    """One run for both (a run costs the most here): the documented JSON, and the trace
    `--trace` writes of the real run: the priced step on the simulated clock, what the
    driver and the cards did on the wall clock."""
    path = tmp_path / "torch.json"
    run = ipupod_here("train", "--torch", f"{factories}:small_cnn", "--sample-shape", "3,8,8",
                      "--servers", "2", "--replicas-per-server", "1", "--steps", "2",
                      "--micro-batch", "4", "--check", "--json", "--trace", str(path))
    assert run.returncode == 0, run.stderr[-2000:]
    record = json.loads(run.stdout)
    assert record["replicas_identical"] is True and record["reference_max_rel_error"] < 1e-5
    assert record["replicas"] == 2 and record["classes"] == 5
    assert record["sim_step_seconds"] > 0 and record["wall_step_seconds"] > 0
    assert all(step.keys() >= {"loss", "sim_seconds", "wall_seconds"}
               for step in record["steps"])

    document = json.loads(path.read_text())
    jsonschema.validate(document, SCHEMA)
    assert document["metadata"]["clock"] == BOTH_CLOCKS
    processes = {e["pid"]: e["args"]["name"] for e in document["traceEvents"]
                 if e["name"] == "process_name"}
    spans = [(processes[e["pid"]], e) for e in document["traceEvents"] if e["ph"] == "X"]
    for step in (0, 1):  # the simulated parts of each step add up to the priced step
        parts = [e["dur"] for name, e in spans if name == STEP and e["args"].get("part")
                 and e["args"]["step"] == step]
        assert sum(parts) == pytest.approx(record["sim_step_seconds"] * 1e6, abs=1e-5)  # to the ps
    assert [e["name"] for name, e in spans if name == DRIVER] == ["step 1", "step 2"]
    tasks = {e["args"].get("task") for name, e in spans if name == CARDS}
    assert {"gradients", "update"} <= tasks  # the cards' replicas, on the wall clock


def test_without_torch_the_command_says_which_extra_to_install(factories):
    probe = ("import sys\nsys.modules['torch'] = None\n"
             "import cluster.cli.main, cluster.training.torch_replicas\n"
             "from cluster.cli.main import main\n"
             f"main(['train', '--torch', {str(factories)!r} + ':small_cnn', "
             "'--sample-shape', '3,8,8'])\n")
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 2 and "pip install -e '.[torch]'" in run.stderr, run.stderr
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr


def test_the_poptorch_style_example_trains_as_one_process_would():
    root = Path(__file__).resolve().parent.parent
    run = subprocess.run([sys.executable, str(root / "examples" / "poptorch_style_training.py")],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.count("replicas identical: True") == 4 and "ms simulated" in run.stdout
    difference = re.search(r"relative difference (\S+)", run.stdout)
    assert difference and float(difference.group(1)) < 1e-5


def test_a_model_that_fails_on_its_card_is_one_line_without_the_cards_traceback(
        factories, two_servers):
    model = load_factory(f"{factories}:small_cnn")()  # forward(x): takes no labels
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with training_model(model, Options().replicationFactor(2), optimizer,
                        pod=two_servers) as wrapped, pytest.raises(UserError) as refused:
        wrapped(torch.zeros(4, 3, 8, 8), torch.zeros(4, dtype=torch.int64))
    assert "forward pass failed: TypeError" in str(refused.value)
    assert "\n" not in str(refused.value) and "ray::" not in str(refused.value)
