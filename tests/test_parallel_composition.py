"""Composing the parallelisms: pipeline stages of tensor groups, data-parallel replicas of
them (``--ipus-per-replica S x T --tensor-parallel T``). Each stage's all-reduces run over
its own tensor groups, the stages' sends go IPU to IPU, the placement puts tensor groups
innermost; T = 1 or S = 1 price as before. Phantom only."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from cluster.errors import SettingError
from cluster.model.routing import router_of
from cluster.training.config import TrainConfig
from cluster.training.optimizer_state import OptimizerState
from cluster.training.pipeline.stages import stage_layers
from cluster.training.plan import TrainPlan, plan_for
from cluster.training.step_collectives import TENSOR_PARALLEL, step_collectives
from cluster.training.step_timing import stage_senders, step_time
from cluster.training.tensor_parallel.layer_allreduces import micro_batch_collectives
from cluster.training.tensor_parallel.layout import OFF, TensorParallel
from cluster.training.tensor_parallel_time import (
    allreduce_seconds,
    axis_groups,
    tensor_parallel_time,
)
from cluster.training.workloads.tensor_shape import TensorRole
from gcl.modes import Mode

HIDDEN, SEQUENCE, FLOAT16 = 1024, 512, 2  # gpt3-350m at a sequence of 512
T, S, ACCUMULATION = 2, 2, 4
BLOCK_HALVES = (TensorRole.ATTENTION, TensorRole.FFN)
FITS = ("--model", "gpt3-350m", "--topology", "pod16", "--tensor-parallel", "2",
        "--ipus-per-replica", "4", "--micro-batch", "1", "--gradient-accumulation", "8",
        "--sequence-length", "512", "--optimizer-state", "streaming", "--steps", "1")


def composed(layout: TensorParallel = TensorParallel(T), ipus: int = T * S,
             **settings) -> TrainPlan:
    """gpt3-350m on a POD16: replicas of ``ipus`` IPUs, ``layout`` tensor groups."""
    config = TrainConfig(topology="pod16", model="gpt3-350m", mode=Mode.PHANTOM,
                         sequence_length=SEQUENCE, micro_batch=1, accumulation=ACCUMULATION,
                         replicas_per_server=0, ipus_per_replica=ipus, tensor_parallel=layout,
                         recompute=False, optimizer_state=OptimizerState.STREAMING,
                         **settings)
    return plan_for(config)


@pytest.fixture(scope="module")
def run() -> TrainPlan:
    return composed()


def test_a_replica_is_s_stages_of_t_ipus_and_the_pod_holds_replicas_of_them(run):
    assert run.config.pipeline_stages == S and run.config.stage_ipus == (0, T)
    assert run.config.replicas == 16 // (S * T) and run.chains.shape == (4, S * T)


def test_each_stage_runs_4_all_reduces_a_transformer_layer_of_its_own(run):
    stages = stage_layers([layer.training_flops for layer in run.rank_workload.layers], S)
    kinds = tensor_parallel_time(run).kinds
    for stage, layers in enumerate(stages):
        halves = sum(run.workload.layers[i].tensor is not None
                     and run.workload.layers[i].tensor.role in BLOCK_HALVES for i in layers)
        counted = sum(kind.count for kind in kinds
                      if kind.stage == stage and kind.role in BLOCK_HALVES)
        assert halves > 0 and counted == 2 * halves * ACCUMULATION  # 4 a layer of 2 halves
    per_block = Counter(c.layer.split(".")[0] for c in micro_batch_collectives(
        run.workload, run.config.tensor_parallel, False, stages[1]) if c.layer[:5] == "block")
    assert set(per_block.values()) <= {2, 4} and list(per_block.values()).count(2) <= 1


def test_embedding_all_reduce_is_the_first_stage_s_and_the_head_s_the_last_s(run):
    roles = {kind.role: kind.stage for kind in tensor_parallel_time(run).kinds
             if kind.role not in BLOCK_HALVES}
    assert roles[TensorRole.EMBEDDING] == 0 and roles[TensorRole.HEAD] == S - 1


def test_each_block_all_reduce_carries_micro_batch_x_sequence_x_hidden_x_bytes(run):
    sizes = {kind.nbytes for kind in tensor_parallel_time(run).kinds
             if kind.role in BLOCK_HALVES}
    assert sizes == {1 * SEQUENCE * HIDDEN * FLOAT16}


def test_each_stage_s_all_reduces_run_over_its_own_tensor_groups_and_the_busiest_is_the_part(
        run):
    found = tensor_parallel_time(run)
    for kind in found.kinds:
        groups = axis_groups(run.chains[:, kind.stage * T:(kind.stage + 1) * T],
                             run.config.tensor_parallel, kind.axis)
        assert kind.seconds == allreduce_seconds(run.topology, groups, kind.nbytes,
                                                 FLOAT16, run.config.algorithm)
    busiest = max(found.stage_seconds(s) for s in range(S))
    assert step_time(run).tensor_parallel_seconds == found.seconds == busiest > 0
    spans = [span for span in step_collectives(run) if span.track == TENSOR_PARALLEL]
    assert sum(span.seconds for span in spans) == pytest.approx(found.seconds, rel=1e-12)
    assert {span.args["stage"] for span in spans} == {found.busiest[0].stage}


def test_tensor_groups_are_consecutive_ipus_on_ipu_links_and_stages_next(run):
    router = router_of(run.topology)
    for r, chain in enumerate(run.chains):
        unit = run.topology.units[r].ipus  # a replica is an IPU-M2000's 4 IPUs
        assert sorted(chain.tolist()) == sorted(unit)
        for first in run.config.stage_ipus:
            a, b = chain[first:first + T]
            routes = router.route(np.array([a]), np.array([b]))
            assert len(routes.pair_link) == 1  # one IPU-Link between a group's IPUs


def test_each_ipu_of_a_stage_s_group_sends_to_its_counterpart_in_the_next(run):
    sends = stage_senders(run.config, run.chains)
    replicas = run.config.replicas
    assert sends.shape == (T * replicas, S)
    for i in range(T):
        for r in range(replicas):
            assert sends[i * replicas + r].tolist() == [run.chains[r, s * T + i]
                                                         for s in range(S)]


def test_one_stage_prices_every_all_reduce_over_the_whole_tensor_group_as_before():
    single = composed(TensorParallel(4), 4)
    found = tensor_parallel_time(single)
    assert {kind.stage for kind in found.kinds} == {0}
    whole = sum(kind.total_seconds for kind in found.kinds)
    assert found.seconds == whole == step_time(single).tensor_parallel_seconds
    assert stage_senders(single.config, single.chains).shape == (4 * single.config.replicas, 1)


def test_tensor_parallel_1_is_the_pipeline_it_was():
    off, one = composed(OFF, 4), composed(TensorParallel(1), 4)
    assert step_time(off) == step_time(one)
    assert tensor_parallel_time(one).kinds == ()
    assert (stage_senders(off.config, off.chains)
            == off.chains[:, list(off.config.stage_ipus)]).all()


def test_json_lists_every_stage_s_all_reduces_by_kind_and_group(ipupod_main):
    done = ipupod_main("train", *FITS, "--json")
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    found = record["collectives"]
    assert {each["stage"] for each in found} == {0, 1}
    assert all(each["group"].startswith(f"tensor groups of {T} IPUs of pipeline stage")
               for each in found)
    per_stage = Counter()
    for each in found:
        if each["layers"] in ("attention", "ffn") and each["phase"] != "recompute":
            per_stage[each["stage"]] += each["count"]
    assert sum(per_stage.values()) == 4 * 24 * 8  # 4 a layer, 24 layers, 8 micro-batches
    busiest = max(sum(e["count"] * e["seconds_each"] for e in found if e["stage"] == s)
                  for s in (0, 1))
    assert record["steps"][0]["tensor_parallel_seconds"] == pytest.approx(busiest, rel=1e-12)


def test_the_text_names_the_stages_and_their_tensor_groups(ipupod_main):
    done = ipupod_main("train", *FITS)
    assert done.returncode == 0, done.stderr
    assert "pipeline of 2 stages, each tensor-parallel 2" in done.stdout


@pytest.mark.parametrize("args, words", [
    (["--tensor-parallel", "4", "--ipus-per-replica", "2"], "a multiple of it"),
    (["--tensor-parallel", "2", "--ipus-per-replica", "4", "--final-stage-on-first-ipu"],
     "not in the emulator yet"),
])
def test_a_composition_that_does_not_fit_is_refused_in_one_line(ipupod_main, args, words):
    done = ipupod_main("train", "--model", "gpt3-125m", "--steps", "1", *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
    assert words in done.stderr and "Traceback" not in done.stderr


def test_a_tensor_group_wider_than_the_ipu_link_domain_is_refused():
    config = TrainConfig(model="gpt3-125m", mode=Mode.PHANTOM, ipus_per_replica=16,
                         replicas_per_server=1, tensor_parallel=TensorParallel(4, 4))
    with pytest.raises(SettingError, match="does not divide a server or rack of 8"):
        config.check_settings(8)


def test_layers_per_ipu_gives_each_stage_of_tensor_groups_its_layers():
    given = composed(layers_per_ipu=(20, 31))
    first = given.workload.layers[:20]
    halves = sum(layer.tensor is not None and layer.tensor.role in BLOCK_HALVES
                 for layer in first)
    counted = sum(kind.count for kind in tensor_parallel_time(given).kinds
                  if kind.stage == 0 and kind.role in BLOCK_HALVES)
    assert counted == 2 * halves * ACCUMULATION
