"""Sharding: the widest layer split by columns over a replica's IPUs computes what the whole
model computes (to float32 rounding: the partial input gradients add in another order),
its exchanges cost what the cost model gives by hand, and sharded replicas on real
emulated devices train exactly as one process does."""

from itertools import pairwise

import numpy as np
import pytest

from cluster.errors import UserError
from cluster.model.costmodel import REDUCE_MEMORY_PASSES
from cluster.model.hardware import IPU_LINK_LATENCY_SECONDS, LOCAL_SYNC_SECONDS, c2_rung, gc2
from cluster.model.presets import build_preset
from cluster.training.config import TrainConfig
from cluster.training.data import make_dataset, train_reference
from cluster.training.engines.sharded import ShardedEngine
from cluster.training.numpy_mlp import MLPSpec, init_params, loss_and_grad
from cluster.training.plan import TrainPlan
from cluster.training.sharding import (
    ColumnSplit,
    shard_columns,
    sharded_loss_and_grad,
    sharded_time,
    widest_layer,
)
from cluster.training.sharding.exchange import LAYER_IN
from cluster.training.workloads import mlp_workload
from ipu_node.pod import EmulatedPod

DSS8440 = build_preset("dss8440")


# -- the arithmetic -------------------------------------------------------------------------

def test_columns_split_contiguously_the_first_shards_taking_the_remainder():
    assert [len(c) for c in shard_columns(10, 4)] == [3, 3, 2, 2]
    assert [len(c) for c in shard_columns(77, 16)] == [5] * 13 + [4] * 3
    for fan_out, k in [(10, 4), (77, 16), (128, 8), (5, 5)]:
        columns = shard_columns(fan_out, k)
        assert columns[0].start == 0 and columns[-1].stop == fan_out
        assert all(a.stop == b.start for a, b in pairwise(columns))
    with pytest.raises(UserError, match="9 output columns"):
        shard_columns(9, 16)


def test_the_widest_layer_has_the_most_parameters_and_ties_go_to_the_first():
    assert widest_layer(MLPSpec(64, (128,), 10)) == 0
    assert widest_layer(MLPSpec(8, (16, 16), 4)) == 1
    assert widest_layer(MLPSpec(8, (16,), 40)) == 1  # the logits layer
    assert widest_layer(MLPSpec(10, (10,), 10)) == 0  # 110 parameters each


def test_split_join_pack_and_unpack_undo_each_other():
    spec = MLPSpec(12, (9, 23), 5)
    split = ColumnSplit.of(spec, 4)
    params = init_params(spec, 1)
    rest, shards = split.split(params)
    assert (split.layer, [len(c) for c in split.columns]) == (1, [6, 6, 6, 5])
    assert [s.size for s in shards] == [split.shard_size(k) for k in range(4)]
    assert sum(split.ipu_parameters) == spec.parameter_count == rest.size + sum(
        s.size for s in shards)
    assert np.array_equal(split.join(rest, shards), params)
    values = np.arange(3 * 23, dtype=np.float32).reshape(3, 23)
    assert split.pack(values).size == 4 * 3 * split.width
    assert np.array_equal(split.unpack(split.pack(values)), values)


SPECS = [MLPSpec(64, (128,), 10),  # the first layer split: no partial sums
         MLPSpec(20, (37, 29), 10),  # a middle layer, 37 x 29
         MLPSpec(16, (96, 77), 6),  # a middle layer, 77 columns
         MLPSpec(5, (7,), 41)]  # the logits layer: no ReLU, the loss on IPU 0


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.input_size}-{s.hidden}-{s.classes}")
@pytest.mark.parametrize("ipus", [2, 3, 4, 8, 16])
def test_the_sharded_loss_and_gradient_equal_the_whole_models(spec, ipus):
    rng = np.random.default_rng(ipus)
    params = init_params(spec, 7)
    x = rng.normal(size=(13, spec.input_size)).astype(np.float32)
    y = rng.integers(0, spec.classes, size=13)
    loss, grad = loss_and_grad(spec, params, x, y)
    sharded_loss, sharded_grad = sharded_loss_and_grad(spec, ipus, params, x, y)
    assert sharded_grad.dtype == np.float32 and sharded_grad.shape == grad.shape
    # not bit for bit: the partials of the input's gradient add in another order than
    # inside one matrix product (and BLAS may block a slice of columns differently)
    assert abs(sharded_loss - loss) <= 1e-6 * abs(loss)
    assert np.abs(sharded_grad - grad).max() <= 1e-6 * np.abs(grad).max()


@pytest.mark.parametrize("spec", SPECS[1:], ids=lambda s: f"{s.input_size}-{s.hidden}")
def test_one_shard_is_the_whole_models_arithmetic_bit_for_bit(spec):
    rng = np.random.default_rng(0)
    params = init_params(spec, 3)
    x = rng.normal(size=(8, spec.input_size)).astype(np.float32)
    y = rng.integers(0, spec.classes, size=8)
    loss, grad = loss_and_grad(spec, params, x, y)
    sharded_loss, sharded_grad = sharded_loss_and_grad(spec, 1, params, x, y)
    assert sharded_loss == loss and np.array_equal(sharded_grad, grad)


# -- phantom costing ------------------------------------------------------------------------

def rung_seconds(nbytes, reduced=False):
    """One superstep over a C2 card's rung (cluster/model/hardware.py: 96 GB/s each way,
    300 ns, 0.5 us local sync; GC2 memory at 45 TB/s for a reduction)."""
    reduce = REDUCE_MEMORY_PASSES * nbytes / gc2().memory_bandwidth_Bps if reduced else 0.0
    return LOCAL_SYNC_SECONDS + IPU_LINK_LATENCY_SECONDS + nbytes / c2_rung().bandwidth_Bps + reduce


def test_two_ipus_of_a_c2_card_exchange_over_its_rung_as_costed_by_hand():
    # 64 -> 32 -> 256 -> 10: layer 1 (32 x 256) is split, 128 columns on each IPU
    config = TrainConfig(servers=1, ipus_per_replica=2, replicas_per_server=1, micro_batch=8,
                         accumulation=2, hidden=(32, 256))
    time = sharded_time(config, DSS8440)
    micro = 8
    expected = {"broadcast": rung_seconds(4 * micro * 32),  # the layer's input, 1,024 B
                "all_gather": rung_seconds(4 * micro * 128),  # one slice each way
                "reduce_scatter": rung_seconds(4 * micro * 128, reduced=True),
                # a ring of two: reduce-scatter then all-gather of half the 8 x 32 partials
                "allreduce": rung_seconds(4 * micro * 16, reduced=True)
                + rung_seconds(4 * micro * 16)}
    for label, seconds in expected.items():
        assert time.by_collective[label] == pytest.approx(2 * seconds, rel=1e-12)
    assert time.exchange_seconds == pytest.approx(2 * sum(expected.values()), rel=1e-12)
    peak = gc2().fp32_flops_per_second  # 31.1 TFLOPS (public docs)
    shard, rest = 2 * 32 * 128, 2 * 64 * 32 + 2 * 256 * 10  # forward FLOPs per sample
    assert time.ipu_compute_seconds == pytest.approx(
        (2 * micro * 3 * (shard + rest) / peak, 2 * micro * 3 * shard / peak), rel=1e-12)
    assert time.compute_seconds == time.ipu_compute_seconds[0]
    assert time.span_seconds == time.compute_seconds + time.exchange_seconds


def test_the_first_layer_split_needs_no_partial_sums():
    config = TrainConfig(servers=1, ipus_per_replica=2, replicas_per_server=8, micro_batch=8,
                         hidden=(256,))
    time = sharded_time(config, DSS8440)
    assert time.allreduce_seconds == 0.0
    assert time.broadcast_seconds == pytest.approx(rung_seconds(4 * 8 * 64), rel=1e-12)


def shard_config(k, **changes):
    settings = dict(servers=1, ipus_per_replica=k, replicas_per_server=16 // k, micro_batch=16,
                    accumulation=2, hidden=(64, 512, 64))
    settings.update(changes)
    return TrainConfig(**settings)


def test_more_ipus_mean_less_compute_on_each_and_more_exchange():
    times = [sharded_time(shard_config(k), DSS8440) for k in (2, 4, 8, 16)]
    for fewer, more in pairwise(times):
        assert more.compute_seconds < fewer.compute_seconds
        assert more.exchange_seconds > fewer.exchange_seconds
    for time in times:  # IPU 0 holds every other layer and the widest shard
        assert time.compute_seconds == max(time.ipu_compute_seconds) == time.ipu_compute_seconds[0]
        assert sum(time.by_collective.values()) == pytest.approx(time.exchange_seconds)


def test_bigger_micro_batches_cost_more_and_micro_batches_add_up():
    small, big = (sharded_time(shard_config(4, micro_batch=m), DSS8440) for m in (8, 64))
    assert all(big.by_collective[c] > small.by_collective[c] for c in small.by_collective)
    one, three = (sharded_time(shard_config(4, accumulation=a), DSS8440) for a in (1, 3))
    assert three.exchange_seconds == pytest.approx(3 * one.exchange_seconds, rel=1e-12)
    assert three.compute_seconds == pytest.approx(3 * one.compute_seconds, rel=1e-12)


def test_replicas_on_other_cards_and_servers_add_no_exchange_time():
    alone = sharded_time(shard_config(2, replicas_per_server=1), DSS8440)
    full = sharded_time(shard_config(2, servers=2, replicas_per_server=8),
                        build_preset("dss8440x2"))
    assert full.exchange_seconds == pytest.approx(alone.exchange_seconds, rel=1e-12)


def test_an_ipu_m2000_computes_at_the_gc200s_peak():
    on_m2000 = sharded_time(shard_config(4, topology="pod16", replicas_per_server=4),
                            build_preset("pod16"))
    on_c2 = sharded_time(shard_config(4), DSS8440)
    # 62.5 against 31.1 TFLOPS fp32 (public docs, cluster/model/hardware.py)
    assert on_m2000.compute_seconds == pytest.approx(on_c2.compute_seconds * 31.1 / 62.5)


# -- real mode ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server(ray_session):
    pod = EmulatedPod.launch("dss8440")
    yield pod
    pod.shutdown()


def sharded_engine(config, pod):
    """The sharded engine on ``config`` as given (not resolved: its widths are the ones
    written, whatever ``split`` would default them to)."""
    return ShardedEngine(TrainPlan(config, pod.topology, mlp_workload(config.spec)), pod)


def reference_max_rel_error(config, losses):
    """As ``ipupod train --check`` computes it (cluster/training/trainer.py)."""
    x, y = make_dataset(config.seed, config.samples, config.input_size, config.classes)
    reference = train_reference(config.spec, x, y, replicas=config.replicas,
                                micro_batch=config.micro_batch, accumulation=config.accumulation,
                                steps=config.steps, lr=config.lr, momentum=config.momentum,
                                seed=config.seed)
    return max(abs(a - b) / abs(b) for a, b in zip(losses, reference))


@pytest.mark.parametrize("ipus, replicas, hidden, classes", [
    (2, 4, None, 10),  # 64 -> 128 -> 10: the first layer split
    (4, 2, None, 10),  # 64 -> 128 -> 128 -> 128 -> 10: a middle layer
    (4, 2, (96, 77), 10),  # 77 columns: 20, 19, 19, 19
    (2, 2, (16,), 40),  # the logits layer split
    (8, 2, (33,), 10),  # 33 columns: 5, 4, 4, 4, 4, 4, 4, 4
    (16, 1, (64, 200), 10),  # a whole DSS 8440, one replica
])
def test_sharded_training_equals_single_process_training(server, ipus, replicas, hidden,
                                                         classes):
    config = TrainConfig(servers=1, ipus_per_replica=ipus, replicas_per_server=replicas,
                         accumulation=2, micro_batch=8, steps=3, hidden=hidden, classes=classes)
    steps = []
    ran = sharded_engine(config, server).run(lambda step, of: steps.append(step))
    losses, identical = ran.losses, ran.identical
    assert identical is True and steps == [1, 2, 3]
    assert reference_max_rel_error(config, losses) < 1e-6


def test_real_exchanges_take_the_phantom_times_and_leave_only_parameters(server, monkeypatch):
    config = TrainConfig(servers=1, ipus_per_replica=4, replicas_per_server=2, accumulation=2,
                         micro_batch=8, steps=1, hidden=(96, 77))
    run = server.collective
    seconds: dict[str, float] = {}

    def recorded(collective, tensor, **options):
        result = run(collective, tensor, **options)
        seconds[tensor] = seconds.get(tensor, 0.0) + result.timing.sim_seconds
        return result

    monkeypatch.setattr(server, "collective", recorded)
    sharded_engine(config, server).run()
    time = sharded_time(config, server.topology)
    assert seconds.pop(LAYER_IN) == pytest.approx(time.broadcast_seconds, rel=1e-12)
    assert seconds.pop("shard.out") == pytest.approx(time.all_gather_seconds, rel=1e-12)
    assert seconds.pop("shard.delta") == pytest.approx(time.reduce_scatter_seconds, rel=1e-12)
    assert seconds.pop("shard.partial") == pytest.approx(time.allreduce_seconds, rel=1e-12)
    assert list(seconds) == ["shard.grad"]  # and the replicas' gradient allreduce
    split = ColumnSplit.of(config.spec, 4)
    memory = {}
    for device in server.stats():
        memory.update(device["memory"])
    for k, ipu in enumerate([0, 1, 3, 2]):  # replica 0's IPUs, along the ladder
        # parameters and velocity, a gradient padded to IPU 0's: nothing else is left
        assert memory[ipu]["used_bytes"] == 4 * (2 * split.ipu_parameters[k]
                                                 + split.ipu_parameters[0])
