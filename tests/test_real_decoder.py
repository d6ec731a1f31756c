"""The decoder real mode trains (``--model gpt-tiny``): its hand-written backward is its
loss's gradient, each rank's share of a 1-D or 2-D tensor group computes what the whole
decoder computes, the all-reduces between them are the ones the phantom pricing counts,
and replicas of tensor groups on the emulated devices train as one process does."""

import json
from collections import Counter

import numpy as np
import pytest

from cluster.errors import SettingError
from cluster.training.config import TrainConfig
from cluster.training.decoder.flat_params import DecoderLayout, RankSplit, init_params
from cluster.training.decoder.group import axis_ranks, group_loss_and_grads, loss_and_grad
from cluster.training.decoder.program import program
from cluster.training.decoder.tokens import make_token_dataset, train_decoder_reference
from cluster.training.engines.decoder_engine import DecoderEngine
from cluster.training.plan import TrainPlan
from cluster.training.tensor_parallel.layer_allreduces import micro_batch_collectives
from cluster.training.tensor_parallel.layout import TensorParallel
from cluster.training.workloads import workload
from cluster.training.workloads.decoder import DecoderConfig
from cluster.training.workloads.gpt_tiny import GPT_TINY
from cluster.training.workloads.transformer import BlockShape
from ipu_node.pod import EmulatedPod

SMALL = DecoderConfig("small", layers=2, block=BlockShape(8, 4, ffn=32, dropout=False),
                      vocabulary=12, context=5, learned_positions=True, tied_head=True)


def small_batch(config=SMALL, sequences=3):
    return make_token_dataset(0, sequences, config.context, config.vocabulary)


def test_the_decoders_backward_is_its_losss_gradient():
    params = init_params(SMALL, 1).astype(np.float64) * 5  # away from the flat start
    tokens, labels = small_batch()
    _, grad = loss_and_grad(SMALL, params, tokens, labels)
    step = 1e-6
    for name, view in DecoderLayout(SMALL).views(np.arange(params.size)).items():
        for index in view.ravel()[:: max(1, view.size // 5)]:  # 5 or so of every block
            moved = [params.copy(), params.copy()]
            moved[0][index] += step
            moved[1][index] -= step
            up, down = (loss_and_grad(SMALL, p, tokens, labels)[0] for p in moved)
            assert (up - down) / (2 * step) == pytest.approx(grad[index], rel=1e-5, abs=1e-7), \
                name


@pytest.mark.parametrize("layout", [TensorParallel(2), TensorParallel(4), TensorParallel(2, 2),
                                    TensorParallel(1, 2)])
def test_each_ranks_share_computes_the_whole_decoders_loss_and_gradient(layout):
    params = init_params(SMALL, 3).astype(np.float64) * 5
    tokens, labels = small_batch()
    loss, grad = loss_and_grad(SMALL, params, tokens, labels)
    ranks_loss, ranks_grads = group_loss_and_grads(SMALL, layout, params, tokens, labels)
    assert ranks_loss == pytest.approx(loss, rel=1e-12)
    for k, rank_grad in enumerate(ranks_grads):  # each rank's is the whole one's, cut
        expected = DecoderLayout(SMALL, RankSplit.of(layout, k)).cut(grad)
        assert np.allclose(rank_grad, expected, rtol=1e-10, atol=1e-12)


def test_gpt_tiny_is_graphcores_tiny_shape_and_its_workload_counts_its_parameters():
    assert (GPT_TINY.layers, GPT_TINY.block.hidden, GPT_TINY.block.heads, GPT_TINY.context,
            GPT_TINY.vocabulary) == (2, 64, 4, 8, 128)
    assert workload("gpt-tiny").parameter_count == DecoderLayout(GPT_TINY).size == 108_800


def counted(collectives):
    return Counter((c.layer, c.phase, c.axis, c.what) for c in collectives)


@pytest.mark.parametrize("layout, per_layer", [(TensorParallel(2), 4),
                                               (TensorParallel(2, 2), 8)])
def test_the_program_runs_the_all_reduces_the_phantom_pricing_counts(layout, per_layer):
    ran = [reduce for segment in program(GPT_TINY.layers, layout.two_d)
           for reduce in segment.reduces if len(axis_ranks(layout, reduce.axis)[0]) > 1]
    priced = micro_batch_collectives(workload("gpt-tiny"), layout, recomputes=False)
    assert counted(ran) == counted(priced)
    by_layer = Counter(reduce.layer for reduce in ran)
    assert by_layer["block0.attention"] + by_layer["block0.mlp"] == per_layer
    head = by_layer["head"] + by_layer["loss"]
    assert (by_layer["embeddings"], head) == ((1, 4) if per_layer == 4 else (1, 5))


@pytest.fixture(scope="module")
def server(ray_session):
    pod = EmulatedPod.launch("dss8440")
    yield pod
    pod.shutdown()


def real_bytes(priced, layout, micro_batch):
    """What the real run sums in an all-reduce the pricing counts as ``priced``: the same
    with 1-D; with 2-D, the norms' statistics ride along (2 float32 values a token, and 2
    a column of the first products or the logits), and the attention's backward sums the heads'
    context's gradient, a third of its queries', keys' and values' (docs/training.md)."""
    nbytes, tokens = priced.nbytes(micro_batch), micro_batch * GPT_TINY.context
    if not layout.two_d:
        return nbytes
    if priced.what in ("first products' partial sums", "logits' partial sums"):
        return nbytes + 4 * (2 * nbytes // (4 * tokens) + 2 * tokens)
    if priced.what == "input gradient":
        return nbytes + 4 * 2 * tokens
    if priced.what == "first products' output gradient" and priced.layer.endswith("attention"):
        return nbytes // 3
    return nbytes


@pytest.mark.parametrize("layout", [TensorParallel(2), TensorParallel(2, 2)])
def test_tensor_parallel_decoder_training_equals_single_process_training(server, monkeypatch,
                                                                         layout):
    config = TrainConfig(servers=1, model="gpt-tiny", ipus_per_replica=layout.size,
                         replicas_per_server=2, tensor_parallel=layout, accumulation=2,
                         micro_batch=4, steps=2, check=True)
    config.check_settings(8)
    run, ran_collectives = server.collective, []

    def recorded(collective, tensor, **options):
        result = run(collective, tensor, **options)
        ran_collectives.append((tensor, str(options["group"]),
                                result.schedule.count * result.schedule.itemsize))
        return result

    monkeypatch.setattr(server, "collective", recorded)
    plan = TrainPlan(config, server.topology, workload("gpt-tiny"))
    ran = DecoderEngine(plan, server, GPT_TINY).run()
    x, y = make_token_dataset(config.seed, config.samples, 8, 128)
    reference = train_decoder_reference(GPT_TINY, x, y, global_batch=config.global_batch,
                                        steps=2, lr=config.lr, momentum=config.momentum,
                                        seed=config.seed)
    assert ran.identical is True
    assert np.max(np.abs(np.subtract(ran.losses, reference)) / reference) < 1e-5
    per_layer, head_and_loss = (8, 5) if layout.two_d else (4, 4)
    per_micro_batch = GPT_TINY.layers * per_layer + 1 + head_and_loss  # 1: the embedding
    tensor = [(name, nbytes) for name, group, nbytes in ran_collectives
              if group.startswith("consecutive")]
    assert len(tensor) == 2 * 2 * per_micro_batch  # 2 steps of 2 micro-batches
    priced = {(c.layer, c.phase, c.axis, c.what): c for c in micro_batch_collectives(
        workload("gpt-tiny"), layout, recomputes=False)}
    reduces = {"dec.s." + r.name: (r.layer, r.phase, r.axis, r.what)
               for segment in program(GPT_TINY.layers, layout.two_d) for r in segment.reduces}
    for name, nbytes in tensor:  # each moved what its priced kind says (2-D: and its extras)
        assert nbytes == real_bytes(priced[reduces[name]], layout, config.micro_batch), name
    assert [group for name, group, _ in ran_collectives if name == "dec.grad"] == [
        "orthogonal:2"] * 2  # a step's gradient allreduce


def test_train_check_runs_gpt_tiny_tensor_parallel_2_times_data_parallel_2_and_prices_it(
        ipupod_here):
    done = ipupod_here("train", "--model", "gpt-tiny", "--mode", "real", "--servers", "1",
                       "--tensor-parallel", "2", "--ipus-per-replica", "2",
                       "--replicas-per-server", "2", "--steps", "2", "--micro-batch", "4",
                       "--check", "--json")
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["replicas_identical"] is True
    assert record["reference_max_rel_error"] < 1e-5
    assert record["steps"][0]["tensor_parallel_seconds"] > 0


@pytest.mark.parametrize("settings, words", [
    ({"ipus_per_replica": 4, "tensor_parallel": TensorParallel(2)}, "one tensor group"),
    ({"ipus_per_replica": 2}, "one tensor group"),
    ({"ipus_per_replica": 2, "tensor_parallel": TensorParallel(2), "recompute": True},
     "activations and weights on the IPUs"),
])
def test_a_decoder_layout_real_mode_cannot_run_is_refused(settings, words):
    config = TrainConfig(servers=1, replicas_per_server=2, model="gpt-tiny", **settings)
    with pytest.raises(SettingError, match=words):
        config.check_settings(8)


def test_a_refused_decoder_layout_is_one_error_line(ipupod_here):
    done = ipupod_here("train", "--model", "gpt-tiny", "--mode", "real", "--servers", "1",
                       "--tensor-parallel", "2", "--ipus-per-replica", "4")
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
