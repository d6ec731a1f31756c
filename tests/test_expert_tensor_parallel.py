"""Expert parallelism composed with tensor parallelism (``--expert-parallel E
--tensor-parallel T``): each expert's FFN split over the tensor group, the all-to-alls
over the same tensor rank of ``E`` replicas carrying ``1/T`` of the tokens, the tensor
group's all-gathers and reduce-scatters, what each IPU holds, and what is refused.
Phantom only."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from cluster.errors import SpecError
from cluster.model.routing import router_of
from cluster.training.config import TrainConfig
from cluster.training.expert_parallel_time import (
    expert_groups,
    expert_parallel_time,
    layer_all_to_alls,
)
from cluster.training.plan import TrainPlan, plan_for
from cluster.training.step_collectives import (
    EXPERT_PARALLEL,
    TENSOR_PARALLEL,
    collective_records,
    step_collectives,
)
from cluster.training.step_timing import step_time
from cluster.training.tensor_parallel.layer_allreduces import Axis, Phase, layer_collectives
from cluster.training.tensor_parallel.layout import TensorParallel
from cluster.training.tensor_parallel_time import tensor_parallel_time
from cluster.training.workloads import to_yaml, workload
from cluster.training.workloads.layers import DType
from cluster.training.workloads.tensor_shape import TensorRole, TensorShape
from cluster.training.workloads.workload_yaml import load_workload
from gcl.collectives import CollectiveName
from gcl.modes import Mode

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "workloads" / "moe-small.yaml"
MIXTRAL_TOKENS, MIXTRAL_HIDDEN = 4096, 4096  # moe-8x7b: sequence 4096, hidden 4096
SMALL_TOKENS, SMALL_HIDDEN = 256, 512  # moe-small.yaml
GATHER, SCATTER = CollectiveName.ALL_GATHER, CollectiveName.REDUCE_SCATTER


def ep_tp_plan(model: str, degree: int, layout: TensorParallel, topology: str = "pod16",
               **settings) -> TrainPlan:
    """``model`` with expert groups of ``degree`` replicas, each replica one tensor group
    of ``layout``, as many replicas as fit."""
    config = TrainConfig(topology=topology, model=model, mode=Mode.PHANTOM,
                         replicas_per_server=0, ipus_per_replica=layout.size,
                         tensor_parallel=layout, expert_parallel=degree, **settings)
    return plan_for(config)


def moe_layer(model: str):
    """The first mixture-of-experts layer of ``model``."""
    return next(layer for layer in workload(model).layers if layer.experts is not None)


def test_each_all_to_all_carries_a_tensor_rank_s_share_of_the_tokens_by_hand():
    layer = moe_layer("moe-8x7b")
    # micro-batch 1 x tokens x top-2 x hidden x 2 bytes (float16) x capacity 1.25 / T
    for ranks in (1, 2, 4, 8):
        hand = 1 * MIXTRAL_TOKENS * 2 * MIXTRAL_HIDDEN * 2 * 1.25 / ranks
        assert {c.nbytes for c in layer_all_to_alls(layer, 1, False, ranks)} == {hand}
    assert 83_886_080 // 4 == 20_971_520 == layer_all_to_alls(layer, 1, False, 4)[0].nbytes
    assert len(layer_all_to_alls(layer, 1, True, 4)) == 6  # still 4, 6 with recomputation


def test_a_moe_layer_runs_3_tensor_group_collectives_a_pass_with_1d_by_hand():
    found = layer_collectives(moe_layer("moe-8x7b"), TensorParallel(4), DType.FLOAT16)
    n = MIXTRAL_TOKENS * MIXTRAL_HIDDEN * 2  # a micro-batch's activation, float16 bytes
    buffers = n * 2 * 1.25  # the experts' buffers: top-2, capacity factor 1.25
    assert [(c.phase, c.axis, c.collective, c.nbytes(1)) for c in found] == [
        (Phase.FORWARD, Axis.TENSOR, GATHER, buffers),
        (Phase.FORWARD, Axis.TENSOR, SCATTER, buffers),
        (Phase.FORWARD, Axis.TENSOR, GATHER, n),
        (Phase.BACKWARD, Axis.TENSOR, GATHER, buffers),
        (Phase.BACKWARD, Axis.TENSOR, SCATTER, buffers),
        (Phase.BACKWARD, Axis.TENSOR, GATHER, n)]
    assert found[0].nbytes(2) == 2 * buffers == 167_772_160


def test_a_moe_layer_runs_4_a_pass_with_2d_the_first_over_t2():
    found = layer_collectives(moe_layer("moe-8x7b"), TensorParallel(2, 4), DType.FLOAT16)
    assert [(c.phase, c.axis, c.collective) for c in found][:4] == [
        (Phase.FORWARD, Axis.T2, GATHER), (Phase.FORWARD, Axis.TENSOR, GATHER),
        (Phase.FORWARD, Axis.TENSOR, SCATTER), (Phase.FORWARD, Axis.TENSOR, GATHER)]
    assert Counter(c.phase for c in found) == {Phase.FORWARD: 4, Phase.BACKWARD: 4}
    assert found[0].nbytes(1) == MIXTRAL_TOKENS * MIXTRAL_HIDDEN * 2  # the whole input


def test_a_step_counts_each_kind_per_moe_layer_and_micro_batch():
    run = ep_tp_plan(str(EXAMPLE), 4, TensorParallel(2), micro_batch=4, accumulation=2)
    layers, micro = 4, 2  # moe-small: 4 MoE layers; 2 micro-batches a step
    experts = [k for k in tensor_parallel_time(run).kinds if str(k.role) == "experts"]
    assert Counter(str(k.phase) for k in experts) == {"forward": 3, "backward": 3,
                                                      "recompute": 3}
    assert {k.count for k in experts} == {layers * micro}
    dense = [k for k in tensor_parallel_time(run).kinds if str(k.role) == "attention"]
    assert {k.collective for k in dense} == {CollectiveName.ALLREDUCE}  # unchanged
    all_to_alls = expert_parallel_time(run).kinds
    assert len(all_to_alls) == 6 and {k.count for k in all_to_alls} == {layers * micro}
    hand = 4 * SMALL_TOKENS * 2 * SMALL_HIDDEN * 2 * 1.25 / 2
    assert {k.nbytes for k in all_to_alls} == {hand}


def test_expert_groups_are_the_same_tensor_rank_of_e_consecutive_replicas_in_one_rack():
    run = ep_tp_plan(str(EXAMPLE), 4, TensorParallel(2), micro_batch=4)
    chains = run.chains  # 8 replicas of 2 IPUs
    groups = expert_groups(chains, 4, 0, 2)
    assert [list(g) for g in groups] == [
        list(chains[0:4, 0]), list(chains[4:8, 0]), list(chains[0:4, 1]), list(chains[4:8, 1])]
    assert sorted(int(i) for g in groups for i in g) == sorted(chains.ravel().tolist())
    domains = router_of(run.topology).domain_of_ipu
    assert all(len(set(domains[g].tolist())) == 1 for g in groups)  # on IPU-Links


def test_each_ipu_holds_an_e_t_th_of_the_experts_and_their_buffers_whole():
    run = ep_tp_plan(str(EXAMPLE), 4, TensorParallel(2), micro_batch=1)
    for whole, share in zip(run.workload.layers, run.rank_workload.layers):
        if whole.experts is None:
            continue
        tensor_share = -(-whole.parameters // 2)  # rounded up, then the expert group's
        assert share.parameters == -(-tensor_share // 4)
        assert share.parameters * 8 == pytest.approx(whole.parameters, rel=1e-6)
        assert share.forward_flops == -(-whole.forward_flops // 2)
        buffers = whole.experts.slots(SMALL_TOKENS) * SMALL_HIDDEN * 2
        assert share.stashed_bytes == buffers + -(-(whole.stashed_bytes - buffers) // 2)


def test_the_step_adds_both_parts_and_every_collective_is_listed_by_kind_and_group():
    run = ep_tp_plan(str(EXAMPLE), 4, TensorParallel(2), micro_batch=4)
    time = step_time(run)
    assert time.tensor_parallel_seconds == tensor_parallel_time(run).seconds > 0
    assert time.expert_parallel_seconds == expert_parallel_time(run).seconds > 0
    assert time.sim_seconds == pytest.approx(sum(time.parts().values()))
    spans = step_collectives(run)
    for track, part in ((TENSOR_PARALLEL, time.tensor_parallel_seconds),
                        (EXPERT_PARALLEL, time.expert_parallel_seconds)):
        assert sum(s.seconds for s in spans if s.track == track) == pytest.approx(part)
    assert "forward all-gather of the MoE layers' dispatched tokens" in {s.name for s in spans}
    records = collective_records(run)
    assert {r["collective"] for r in records} == {"all-reduce", "all-gather",
                                                  "reduce-scatter", "all-to-all"}
    to_all = [r for r in records if r["collective"] == "all-to-all"]
    assert all("tensor rank" in r["group"] and "4 groups at once" in r["group"]
               for r in to_all)


def test_the_command_line_runs_it_with_its_trace_and_json(ipupod_main, tmp_path):
    trace = tmp_path / "ep-tp.json"
    args = ("train", "--model", str(EXAMPLE), "--topology", "pod16", "--steps", "1",
            "--expert-parallel", "4", "--tensor-parallel", "2", "--micro-batch", "4")
    done = ipupod_main(*args, "--trace", str(trace))
    assert done.returncode == 0, done.stderr
    assert "8 replicas (2 IPUs each: tensor-parallel 2" in done.stdout
    assert "experts over 4 replicas" in done.stdout
    assert "2 on each IPU of its group (each 1/2 of it: split over the tensor group)" in \
        done.stdout
    names = {event["name"] for event in json.loads(trace.read_text())["traceEvents"]
             if event.get("ph") == "X"}
    assert {"forward reduce-scatter of the MoE layers' experts' partial outputs",
            "forward all-to-all: MoE dispatch"} <= names
    record = json.loads(ipupod_main(*args, "--json").stdout)
    kinds = {(c["collective"], c.get("layers")) for c in record["collectives"]}
    assert {("all-gather", "experts"), ("reduce-scatter", "experts"),
            ("all-to-all", None)} <= kinds


def test_a_moe_layer_without_a_tensor_shape_is_refused_naming_it(ipupod_main, tmp_path):
    old = load_workload(EXAMPLE)
    text = to_yaml(old).replace(", tensor: {role: experts, hidden: 512, tokens: 256}", "")
    path = tmp_path / "old-moe.yaml"
    path.write_text(text)
    done = ipupod_main("train", "--model", str(path), "--topology", "pod16", "--steps", "1",
                       "--tensor-parallel", "2")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
    assert "block0.moe" in done.stderr and "role: experts" in done.stderr


def test_an_experts_role_goes_with_experts_only():
    layer = moe_layer("moe-8x7b")
    with pytest.raises(SpecError, match="role experts goes with"):
        replace(layer, experts=None)
    with pytest.raises(SpecError, match="role experts goes with"):
        replace(layer, tensor=TensorShape(TensorRole.FFN, 4096, 4096, inner=28_672))


@pytest.mark.parametrize("layout, hint", [
    (["--tensor-parallel", "2", "--expert-parallel", "8"], "try --tensor-parallel 4 ("),
    (["--tensor-parallel", "4", "--expert-parallel", "2"],
     "try --expert-parallel 4, or --tensor-parallel 8 ("),
])
def test_a_layout_that_does_not_fit_names_the_smallest_change(ipupod_main, layout, hint):
    done = ipupod_main("train", "--model", "moe-8x7b", "--topology", "pod64", "--steps", "1",
                       *layout, "--phased", "--optimizer-state", "sharded-streaming",
                       "--micro-batch", "1", "--gradient-accumulation", "16")
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "block0.moe" in done.stderr
    assert done.stderr.rstrip().endswith(hint + "each checked: it fits)")


def test_an_expert_group_a_rack_cannot_hold_is_refused_naming_what_would(ipupod_main):
    done = ipupod_main("train", "--model", str(EXAMPLE), "--topology", "pod16", "--steps", "1",
                       "--tensor-parallel", "4", "--expert-parallel", "8")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "an --expert-parallel that divides 4" in done.stderr


def test_data_tensor_pipeline_and_expert_parallelism_run_in_one_step():
    config = TrainConfig(topology="pod16", model=str(EXAMPLE), mode=Mode.PHANTOM,
                         replicas_per_server=4, ipus_per_replica=4,
                         tensor_parallel=TensorParallel(2), expert_parallel=2, micro_batch=2,
                         accumulation=4)
    run = plan_for(config)  # 4 replicas of 2 stages of tensor groups of 2; experts over 2
    time = step_time(run)
    assert min(time.compute_seconds, time.tensor_parallel_seconds,
               time.expert_parallel_seconds, time.local_allreduce_seconds) > 0
    stages = {k.stage for k in tensor_parallel_time(run).kinds if str(k.role) == "experts"}
    assert stages == {0, 1}
    kinds = expert_parallel_time(run).kinds  # the busiest stage's: 2 MoE layers on each
    assert {k.count for k in kinds} == {2 * 4} and {k.tensor_ranks for k in kinds} == {2}
    first = kinds[0].ipu
    groups = expert_groups(run.chains, 2, first, 2)
    assert [list(g) for g in groups] == [
        list(run.chains[r:r + 2, first + rank]) for rank in (0, 1) for r in (0, 2)]
