"""Tensor parallelism in real mode (``--tensor-parallel T`` on the MLP): each rank's share
of the Megatron block computes what the whole MLP computes, and replicas of a tensor group
on the emulated devices, their activations and gradients summed over real links, train as
one process does."""

import json

import numpy as np
import pytest

from cluster.errors import SettingError
from cluster.training.config import TrainConfig
from cluster.training.data import make_dataset, train_reference
from cluster.training.engines.tensor_parallel import TensorParallelEngine
from cluster.training.numpy_mlp import MLPSpec, init_params, loss_and_grad
from cluster.training.plan import TrainPlan, plan_for
from cluster.training.step_timing import step_time
from cluster.training.tensor_parallel.layer_allreduces import Phase
from cluster.training.tensor_parallel.layout import TensorParallel
from cluster.training.tensor_parallel.mlp_block import (
    MegatronSplit,
    block_backward,
    block_forward,
    head_backward,
    head_forward,
    tail_forward_backward,
)
from cluster.training.tensor_parallel_time import tensor_parallel_time
from cluster.training.workloads import mlp_workload
from gcl.modes import Mode
from ipu_node.pod import EmulatedPod


def ranks_loss_and_grads(split, params, x, y):
    """Every rank's loss and gradient, the allreduces summed here (float64)."""
    ranks = range(split.ranks)
    flats = [split.rank_params(params, k).astype(np.float64) for k in ranks]
    grads = [np.zeros_like(flat) for flat in flats]
    parts = [split.parts(k, flat) for k, flat in enumerate(flats)]
    grad_parts = [split.parts(k, grad) for k, grad in enumerate(grads)]
    heads = [head_forward(split, p, x) for p in parts]
    blocks = [block_forward(p, a) for p, (a, _) in zip(parts, heads)]
    summed = sum(partial for _, partial in blocks)
    tails = [tail_forward_backward(split, p, g, summed, y) for p, g in zip(parts, grad_parts)]
    partial_in = [block_backward(p, g, a, h, delta) for p, g, (a, _), (h, _), (_, delta)
                  in zip(parts, grad_parts, heads, blocks, tails)]
    for p, g, (a, inputs) in zip(parts, grad_parts, heads):
        head_backward(p, g, inputs, a, sum(partial_in))
    return [loss for loss, _ in tails], grads


@pytest.mark.parametrize("hidden, ranks", [((16,), 2), ((12, 45, 20), 2), ((9, 30), 4)])
def test_each_ranks_share_of_the_block_computes_the_whole_mlps_loss_and_gradient(hidden,
                                                                                  ranks):
    spec = MLPSpec(7, hidden, 5)
    split = MegatronSplit.of(spec, ranks)
    params = init_params(spec, 3).astype(np.float64)
    rng = np.random.default_rng(1)
    x, y = rng.normal(size=(6, 7)), rng.integers(0, 5, 6)
    loss, grad = loss_and_grad(spec, params, x, y)
    losses, grads = ranks_loss_and_grads(split, params, x, y)
    assert losses == pytest.approx([loss] * ranks, rel=1e-12)
    for k in range(ranks):  # each rank's gradient is the whole one's, cut as its params
        assert np.allclose(grads[k], split.rank_params(grad, k), rtol=1e-10, atol=1e-12)


def test_the_block_is_the_pair_around_the_widest_hidden_layer():
    split = MegatronSplit.of(MLPSpec(8, (12, 45, 20), 3), 2)
    assert split.layer == 1
    assert [len(split.columns(k)) for k in range(2)] == [23, 22]


@pytest.fixture(scope="module")
def server(ray_session):
    pod = EmulatedPod.launch("dss8440")
    yield pod
    pod.shutdown()


def reference_max_rel_error(config, losses):
    """As ``ipupod train --check`` computes it (cluster/training/trainer.py)."""
    x, y = make_dataset(config.seed, config.samples, config.input_size, config.classes)
    reference = train_reference(config.spec, x, y, replicas=config.replicas,
                                micro_batch=config.micro_batch, accumulation=config.accumulation,
                                steps=config.steps, lr=config.lr, momentum=config.momentum,
                                seed=config.seed)
    return max(abs(a - b) / abs(b) for a, b in zip(losses, reference))


@pytest.mark.parametrize("ipus, hidden", [
    (2, (64, 96, 32)),  # the block in the middle: both allreduces, replicated head and tail
    (4, (30,)),  # the block first (no backward allreduce), 8 columns then 7
])
def test_tensor_parallel_training_equals_single_process_training(server, ipus, hidden):
    config = TrainConfig(servers=1, ipus_per_replica=ipus, replicas_per_server=2,
                         tensor_parallel=TensorParallel(ipus), accumulation=2, micro_batch=8,
                         steps=3, hidden=hidden)
    config.check_settings(8)
    plan = TrainPlan(config, server.topology, mlp_workload(config.spec))
    ran = TensorParallelEngine(plan, server).run()
    assert ran.identical is True and len(ran.losses) == 3
    assert reference_max_rel_error(config, ran.losses) < 1e-5


def test_train_check_runs_tensor_parallel_2_times_data_parallel_2(ipupod_here):
    done = ipupod_here("train", "--servers", "1", "--tensor-parallel", "2",
                       "--ipus-per-replica", "2", "--replicas-per-server", "2", "--steps", "2",
                       "--check", "--json")
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["replicas_identical"] is True
    assert record["reference_max_rel_error"] < 1e-5


@pytest.mark.parametrize("settings", [
    {"mode": Mode.PHANTOM, "ipus_per_replica": 2, "tensor_parallel": TensorParallel(2)},
    {"ipus_per_replica": 4, "tensor_parallel": TensorParallel(2, 2)},
    {"ipus_per_replica": 4, "tensor_parallel": TensorParallel(2)},
    {"ipus_per_replica": 4, "tensor_parallel": TensorParallel(4), "hidden": (3,)},
])
def test_an_mlp_tensor_split_real_mode_cannot_run_is_refused(settings):
    config = TrainConfig(servers=1, replicas_per_server=2, **settings)
    with pytest.raises(SettingError, match="the MLP's widest hidden layer"):
        config.check_settings(8)


def test_each_micro_batch_sums_the_blocks_output_and_input_gradient_over_its_group(
        server, monkeypatch):
    config = TrainConfig(servers=1, ipus_per_replica=2, replicas_per_server=2,
                         tensor_parallel=TensorParallel(2), accumulation=2, micro_batch=8,
                         steps=1, hidden=(64, 96, 32))
    run, calls = server.collective, []

    def recorded(collective, tensor, **options):
        result = run(collective, tensor, **options)
        calls.append((tensor, str(options["group"]), sum(result.link_type_bytes.values())))
        return result

    monkeypatch.setattr(server, "collective", recorded)
    plan = TrainPlan(config, server.topology, mlp_workload(config.spec))
    TensorParallelEngine(plan, server).run()
    forward, backward = ("tp.out.partial", "consecutive:2"), ("tp.din.partial", "consecutive:2")
    assert [call[:2] for call in calls] == [forward, backward, forward, backward,
                                            ("tp.grad", "orthogonal:2")]
    # every rank receives at least half of its group's sum: 2 replicas x 2 ranks x half of
    # micro-batch x width x 4 bytes (the block's output is 32 wide, its input 64)
    for (tensor, _, sent), width in zip(calls[:4], (32, 64, 32, 64)):
        assert sent >= 2 * 2 * 8 * width * 4 / 2, tensor


def test_the_mlp_blocks_two_all_reduces_are_priced_in_its_step():
    config = TrainConfig(servers=1, ipus_per_replica=2, replicas_per_server=2,
                         tensor_parallel=TensorParallel(2), accumulation=2, micro_batch=8,
                         hidden=(64, 96, 32))
    plan = plan_for(config)
    kinds = tensor_parallel_time(plan).kinds
    # the block (64 -> 96 -> 32): its output summed forward, its input's gradient backward,
    # micro-batch x width x 4 bytes each, once per micro-batch
    assert sorted((kind.phase, kind.what, kind.nbytes, kind.count) for kind in kinds) == [
        (Phase.BACKWARD, "input gradient", 8 * 64 * 4, 2), (Phase.FORWARD, "output", 8 * 32 * 4, 2)]
    seconds = step_time(plan).tensor_parallel_seconds
    assert seconds == pytest.approx(sum(kind.total_seconds for kind in kinds)) and seconds > 0
