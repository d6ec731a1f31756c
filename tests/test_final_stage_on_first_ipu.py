"""The last pipeline stage back on the replica's first IPU, as Graphcore's BERT recipes
run it: two stages share IPU 0's time, memory and gradient, each by hand."""

import json
import subprocess
import sys
from dataclasses import replace
from itertools import accumulate, pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchmarks.mlperf_published import _v10_stages, _v11_stages
from cluster.errors import UserError
from cluster.model.spec import load_topology
from cluster.training.config import TrainConfig
from cluster.training.memory_plan import stage_memory
from cluster.training.pipeline.schedules import pipeline_schedule
from cluster.training.pipeline.timing import _earliest_start_order, _span, pipeline_time
from cluster.training.plan import plan_for
from cluster.training.step_timing import step_time
from cluster.training.workloads import forward_seconds, memory_use
from gcl import CommGroup, plan, simulate
from gcl.collectives import DType
from gcl.modes import Mode

COUNTS = (1, 13, 13, 13, 11)  # v1.1's POD16 recipe: embeddings, 3 x 13 halves, 9 + heads


def _bert(**changes):
    config = TrainConfig(model="bert-large", sequence_length=512, topology="pod16",
                         mode=Mode.PHANTOM, servers=1, replicas_per_server=4,
                         ipus_per_replica=4, micro_batch=2, accumulation=8,
                         pipeline_schedule="1f1b", optimizer_state="sharded",
                         layers_per_ipu=COUNTS, final_stage_on_first_ipu=True)
    return replace(config, **changes)


def test_two_stages_on_one_ipu_take_it_in_turns_by_hand():
    # stages 0 and 2 on IPU 0, stage 1 on IPU 1; forward 1 s, backward 2 s, sends 0.5 s:
    # F@0 0-1, F@1 1.5-2.5, F@2 3-4, B@2 4-6, B@1 6.5-8.5, B@0 9-11. IPU 0 computes
    # 3 + 3 s; without the sends the span is 9 s, so 3 s wait and the sends add 2 s.
    time = pipeline_time(pipeline_schedule("fill-drain", 3, 1), [1.0] * 3, [2.0] * 3,
                         [0.5, 0.5], [0.5, 0.5], stage_ipus=(0, 1, 0))
    assert (time.compute_seconds, time.bubble_seconds, time.inter_stage_seconds) == (6, 3, 2)
    assert time.stage_compute_seconds == (3.0, 3.0, 3.0)
    with pytest.raises(ValueError, match="stage_ipus"):
        pipeline_time(pipeline_schedule("fill-drain", 3, 1), [1.0] * 3, [2.0] * 3,
                      [0.0] * 2, [0.0] * 2, stage_ipus=(0, 1))


def test_the_shared_ipu_takes_the_op_that_can_start_soonest_and_keeps_that_order():
    # 1f1b, 3 stages (0 and 2 on IPU 0), 2 micro-batches, forward 1 s, backward 2 s. Free
    # transfers: F0@0 0-1, F1@0 1-2, F0@1 1-2, F1@1 2-3, F0@2 2-3, B0@2 3-5, B0@1 5-7,
    # F1@2 5-6, B1@2 6-8, B0@0 8-10, B1@1 8-10, B1@0 10-12: IPU 0 never idles (12 s).
    # Sends of 0.5 s, IPU 0 keeping that order: F0@1 1.5, F1@1 2.5, F0@2 3, B0@2 4,
    # B0@1 6.5, F1@2 6, B1@2 7, B0@0 9, B1@1 9.5, B1@0 12-14: they add 2 s.
    time = pipeline_time(pipeline_schedule("1f1b", 3, 2), [1.0] * 3, [2.0] * 3,
                         [0.5, 0.5], [0.5, 0.5], stage_ipus=(0, 1, 0))
    assert (time.compute_seconds, time.bubble_seconds, time.inter_stage_seconds) == (12, 0, 2)


@settings(deadline=None, max_examples=80)
@given(stages=st.integers(2, 6), micro=st.integers(1, 8),
       name=st.sampled_from(["fill-drain", "1f1b"]), data=st.data())
def test_transfers_never_shorten_a_wrapped_pipeline(stages, micro, name, data):
    durations = st.lists(st.floats(0.1, 5.0), min_size=stages + 1, max_size=stages + 1)
    sends = st.lists(st.floats(0.0, 2.0), min_size=stages, max_size=stages)
    forward, backward = data.draw(durations), data.draw(durations)
    ahead, back = data.draw(sends), data.draw(sends)
    schedule = pipeline_schedule(name, stages + 1, micro)
    ipus = (*range(stages), 0)
    order, _ = _earliest_start_order(schedule, ipus, forward, backward)
    with_sends = _span(schedule, order, ipus, forward, backward, ahead, back)
    free = _span(schedule, order, ipus, forward, backward, [0.0] * stages, [0.0] * stages)
    assert with_sends >= free - 1e-9
    time = pipeline_time(schedule, forward, backward, ahead, back, ipus)
    assert time.span_seconds == pytest.approx(with_sends, rel=1e-12)


def test_ipu_zero_computes_the_first_and_last_stages_and_reduces_both_gradients():
    config, topology = _bert(), load_topology("pod16")
    run = plan_for(config, topology)
    assert config.pipeline_stages == 5 and config.stage_ipus == (0, 1, 2, 3, 0)
    bert, gc200 = run.workload, topology.ipu_processors[0]
    bounds = list(pairwise([0, *accumulate(COUNTS)]))
    # each micro-batch: a forward, a backward (two forwards) and a recomputation
    stage = [8 * 4 * forward_seconds(bert, gc200, 2, config.efficiencies, bert.layers[a:b])
             for a, b in bounds]
    step = step_time(run)
    assert step.stage_compute_seconds == pytest.approx(stage, rel=1e-12)
    assert step.compute_seconds == pytest.approx(max(stage[0] + stage[4], *stage[1:4]),
                                                 rel=1e-12)
    params = [sum(layer.parameters for layer in bert.layers[a:b]) for a, b in bounds]
    ipu_params = [params[0] + params[4], *params[1:4]]
    chains = [0, 1, 3, 2]  # each replica's IPUs along the M2000's links, 4 replicas
    ipus = [4 * r + i for r in range(4) for i in chains]
    schedule = plan("allreduce", topology, max(ipu_params), dtype=DType.FLOAT16,
                    algorithm_name=config.algorithm, group=CommGroup.parse("orthogonal:4"),
                    ipus=ipus)
    assert step.local_allreduce_seconds + step.global_allreduce_seconds == pytest.approx(
        simulate(schedule, topology).sim_seconds, rel=1e-12)


def test_ipu_zero_holds_both_stages_memory_and_recomputes_one_at_a_time():
    config, topology = _bert(), load_topology("pod16")
    run = plan_for(config, topology)
    plan_ = stage_memory(run)
    assert [entry.ipu for entry in plan_] == [0, 1, 3, 2]
    bert = run.workload
    bounds = list(pairwise([0, *accumulate(COUNTS)]))
    in_flight = pipeline_schedule("1f1b", 5, 8).stashed()
    first, last = (memory_use(bert, bert.layers[a:b], 2, in_flight[s], True,
                              optimizer_shards=4) for s, (a, b) in ((0, bounds[0]),
                                                                     (4, bounds[4])))
    ipu0 = plan_[0].use
    assert ipu0.weights_bytes == first.weights_bytes + last.weights_bytes
    assert ipu0.stash_bytes == first.stash_bytes + last.stash_bytes
    assert ipu0.recompute_bytes == max(first.recompute_bytes, last.recompute_bytes)
    assert plan_[0].layers == "embeddings..embeddings + encoder19.ffn..loss"
    assert sum(entry.use.weights_bytes for entry in plan_) == memory_use(
        bert, None, 2, 1, True).weights_bytes


@pytest.mark.parametrize("changes, words", [
    ({"model": "mlp", "layers_per_ipu": None}, "--final-stage-on-first-ipu"),
    ({"ipus_per_replica": 1, "replicas_per_server": 16, "layers_per_ipu": None},
     "--ipus-per-replica 2 or more"),
    ({"layers_per_ipu": (1, 13, 13, 24)}, "it needs 5 counts"),
])
def test_a_placement_that_cannot_wrap_is_refused_naming_the_option(changes, words):
    with pytest.raises(UserError, match=words):
        plan_for(_bert(**changes), load_topology("pod16"))


def test_the_recipes_configs_give_their_stages_and_the_wrap():
    v11_pod16 = {"att_ffn_placement": [[1, [7, 6]], [2, [6, 7]], [3, [7, 6]], [0, [4, 5]]]}
    assert _v11_stages(v11_pod16) == ([1, 13, 13, 13, 11], [0, 1, 2, 3, 0])
    v11_tail = {"att_ffn_placement": [[1, [12, 12]], [2, [12, 12]]]}  # heads a stage more
    assert _v11_stages(v11_tail) == ([1, 24, 24, 2], [0, 1, 2, 0])
    v10_pod16 = {"encoder_start_ipu": 0, "layers_per_ipu": [3, 7, 7, 7]}
    assert _v10_stages(v10_pod16) == ([7, 14, 14, 14, 2], [0, 1, 2, 3, 0])
    v10_pod64 = {"encoder_start_ipu": 1, "layers_per_ipu": [3, 3, 3, 3, 4, 4, 4]}
    assert _v10_stages(v10_pod64) == ([1, 6, 6, 6, 6, 8, 8, 8, 2], [*range(8), 0])


def test_train_runs_the_wrapped_pipeline_and_reports_memory_per_ipu():
    args = ["train", "--model", "bert-large", "--topology", "pod16", "--mode", "phantom",
            "--ipus-per-replica", "4", "--micro-batch", "2", "--gradient-accumulation", "8",
            "--sequence-length", "512", "--optimizer-state", "sharded",
            "--pipeline-schedule", "1f1b", "--steps", "1", "--json",
            "--layers-per-ipu", ",".join(map(str, COUNTS)), "--final-stage-on-first-ipu"]
    result = subprocess.run([sys.executable, "-m", "cluster.cli.main", *args],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert len(record["memory_per_ipu"]) == 4
    assert len(record["steps"][0]["stage_compute_seconds"]) == 5
    wrong = subprocess.run([sys.executable, "-m", "cluster.cli.main", "train", "--mode",
                            "phantom", "--final-stage-on-first-ipu"],
                           capture_output=True, text=True, timeout=300)
    assert wrong.returncode != 0 and "Traceback" not in wrong.stderr
    assert "--final-stage-on-first-ipu" in wrong.stderr
