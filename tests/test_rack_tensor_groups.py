"""Tensor groups of 32 and 64 IPUs spanning the IPU-M2000s of one rack: Graphcore's GPT-3
175B layout, data-parallel 4 x tensor-parallel 8 x 8 on a POD256 (phased, the optimiser
state sharded over Streaming Memory). Where the groups go, the all-reduces a layer runs,
that the step prices, and what is refused. Phantom only."""

from __future__ import annotations

from collections import Counter

import pytest

from cluster.model.routing import router_of
from cluster.training.config import TrainConfig
from cluster.training.memory_plan import stage_memory, unfit_stage
from cluster.training.optimizer_state import OptimizerState
from cluster.training.plan import TrainPlan, plan_for
from cluster.training.planner.space import replica_shapes
from cluster.training.step_timing import step_time
from cluster.training.tensor_parallel.layer_allreduces import Axis, micro_batch_collectives
from cluster.training.tensor_parallel.layout import TensorParallel
from cluster.training.tensor_parallel_time import axis_groups
from cluster.training.workloads import workload
from gcl.modes import Mode

EIGHT_BY_EIGHT = TensorParallel(8, 8)
POD64_RACK = 64  # IPUs of a POD256's rack: 16 IPU-M2000s


@pytest.fixture(scope="module")
def recipe() -> TrainPlan:
    """Graphcore's GPT-3 175B recipe: 4 replicas x 8x8, micro-batch 1, 32 micro-batches a
    step (global batch 128), phased, sharded-streaming optimiser state."""
    return plan_for(TrainConfig(
        topology="pod256", model="gpt3-175b", mode=Mode.PHANTOM, micro_batch=1,
        accumulation=32, replicas_per_server=1, ipus_per_replica=64,
        tensor_parallel=EIGHT_BY_EIGHT, phased=True,
        optimizer_state=OptimizerState.SHARDED_STREAMING))


def test_an_8x8_group_is_64_consecutive_ipus_of_one_rack(recipe):
    router = router_of(recipe.topology)
    assert recipe.chains.shape == (4, 64)
    for group in recipe.chains:
        assert sorted(group) == list(range(min(group), min(group) + 64))
        assert min(group) % POD64_RACK == 0
        assert len(set(router.domain_of_ipu[group].tolist())) == 1
    for inner in axis_groups(recipe.chains, EIGHT_BY_EIGHT, Axis.T1):
        assert sorted(inner) == list(range(min(inner), min(inner) + 8))  # two IPU-M2000s


def test_8x8_runs_8_all_reduces_a_layer_1_for_the_embedding_5_for_the_head():
    found = micro_batch_collectives(workload("gpt3-175b"), EIGHT_BY_EIGHT, recomputes=False)
    counts = Counter(c.layer.split(".")[0] for c in found)
    assert {counts[f"block{i}"] for i in range(96)} == {8}
    assert counts["embeddings"] == 1 and counts["head"] + counts["loss"] == 5


def test_graphcores_175b_layout_fits_and_its_step_prices_every_part(recipe):
    assert unfit_stage(recipe, stage_memory(recipe)) is None
    time = step_time(recipe)
    assert recipe.config.replicas * recipe.config.accumulation == 128
    assert time.tensor_parallel_seconds > 0 and time.compute_seconds > 0
    assert time.phase_load_seconds > 0 and time.global_allreduce_seconds > 0
    assert time.sim_seconds == pytest.approx(sum(time.parts().values()))


def test_the_planner_tries_graphcores_8x8_on_a_rack_of_64():
    groups = {shape.tensor_parallel for shape in replica_shapes(64, 96)}
    assert EIGHT_BY_EIGHT in groups and TensorParallel(8, 4) in groups
    assert not {g for g in {shape.tensor_parallel for shape in replica_shapes(16, 96)}
                if g.size > 16}


@pytest.mark.parametrize("args, says", [
    (["--topology", "pod256", "--tensor-parallel", "8x16"], "IPUs of one server or rack"),
    (["--topology", "pod16", "--tensor-parallel", "8x8"],
     "does not divide a server or rack of 16"),
])
def test_a_group_larger_than_a_rack_is_refused_in_one_line(ipupod_main, args, says):
    done = ipupod_main("train", "--model", "gpt3-175b", "--phased", "--optimizer-state",
                       "sharded-streaming", "--micro-batch", "1", "--steps", "1", *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
    assert says in done.stderr and "Traceback" not in done.stderr
