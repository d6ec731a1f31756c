"""Phased execution (``--phased``): a replica's layers run phase by phase, each phase's
weights streamed from an IPU-M2000's Streaming Memory; what is loaded, how it is priced,
what fits, and what is refused. Phantom only, no Ray."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from cluster.model.hardware import pcie_gen4_x16
from cluster.training.config import TrainConfig
from cluster.training.fit import fits
from cluster.training.memory_plan import stage_memory
from cluster.training.optimizer_state import OptimizerState
from cluster.training.phased import consecutive_groups, grouped_phases, phase_loads, phases_of
from cluster.training.placement import gradient_group
from cluster.training.plan import TrainPlan, plan_for
from cluster.training.step_timing import gradient_allreduce_timing, step_time
from cluster.training.tensor_parallel.layout import TensorParallel
from gcl import plan, simulate
from gcl.collectives import CollectiveName, DType
from gcl.modes import Mode

STREAMING, SHARDED = OptimizerState.STREAMING, OptimizerState.SHARDED_STREAMING
GPT3_2_7B_POD64 = ("train", "--model", "gpt3-2.7b", "--topology", "pod64", "--mode", "phantom",
                   "--tensor-parallel", "4x4", "--micro-batch", "1", "--steps", "1",
                   "--optimizer-state", "streaming")


def phased_plan(model: str = "gpt3-2.7b", topology: str = "pod64",
                layout: TensorParallel = TensorParallel(4, 4), **settings) -> TrainPlan:
    """``model`` on ``topology`` as ``layout`` tensor groups, as many replicas as fit,
    micro-batch 1, phased with its optimiser state streamed unless ``settings`` say."""
    config = TrainConfig(topology=topology, model=model, mode=Mode.PHANTOM, micro_batch=1,
                         replicas_per_server=0, ipus_per_replica=layout.size,
                         tensor_parallel=layout,
                         **{"phased": True, "optimizer_state": STREAMING, **settings})
    return plan_for(config)


@pytest.fixture(scope="module")
def recipe() -> TrainPlan:
    """Graphcore's GPT-3 2.7B POD64 layout (data-parallel 4 x tensor-parallel 4x4), phased."""
    return phased_plan(accumulation=4)


def test_each_phase_loads_its_weights_forward_and_backward_and_stores_them_once(recipe):
    loads = phase_loads(recipe)
    layers = recipe.rank_workload.layers
    per_phase = [2 * sum(layers[i].parameters for i in group)  # float16 weights
                 for group in loads.phases.layers]
    assert sum(per_phase) == 2 * recipe.rank_workload.parameter_count
    activations = [4 * use.stash_bytes for use in loads.phases.use]  # 4 micro-batches
    assert all(activations)
    # the last forward phase is still resident when the backward begins
    assert loads.load_bytes == 2 * sum(per_phase) - per_phase[-1] + sum(activations)
    assert loads.store_bytes == sum(per_phase) + sum(activations)


def test_loads_and_stores_are_priced_at_the_gc200s_pcie_to_its_ipu_m2000():
    assert pcie_gen4_x16().bandwidth_Bps == 32e9  # 64 GB/s both ways, the catalogue's


def test_without_a_prefetch_buffer_every_load_and_store_is_the_steps(recipe):
    loads = phase_loads(recipe)
    serial = replace(loads, phases=replace(loads.phases, prefetch=False))
    assert serial.seconds == pytest.approx((loads.load_bytes + loads.store_bytes) / 32e9)
    assert 0 < loads.seconds < serial.seconds  # the prefetch buffer hides some behind compute
    idle = replace(loads, forward_compute=(0.0,) * loads.phases.count,
                   backward_compute=(0.0,) * loads.phases.count)
    assert loads.seconds < idle.seconds <= serial.seconds  # each way of the link at once


def test_sharded_streaming_loads_each_replicas_share_of_a_phase_and_all_gathers_it():
    plan = phased_plan(optimizer_state=SHARDED)
    loads = phase_loads(plan)
    assert loads.shards == plan.config.replicas_per_server == 4
    shares = [-(-w // 4) for w in loads.phases.weights_bytes]
    assert loads.load_bytes == 2 * sum(shares) - shares[-1] + sum(loads.activation_bytes)
    assert all(seconds > 0 for seconds in loads.gather_seconds)
    assert step_time(plan).weight_gather_seconds == 0  # each phase's load gathers instead


def test_the_phases_are_the_fewest_that_fit_with_a_prefetch_buffer(recipe):
    phases = phases_of(recipe)
    capacity = stage_memory(recipe)[0].capacity_bytes
    assert phases.prefetch and phases.count > 1
    assert max(use.total_bytes for use in phases.use) <= capacity
    params = [layer.parameters for layer in recipe.rank_workload.layers]
    fewer = grouped_phases(recipe, consecutive_groups(params, phases.count - 1), True)
    assert max(use.total_bytes for use in fewer.use) > capacity


def test_consecutive_groups_cover_every_layer_once_none_empty():
    for params, count in (([0, 0, 0, 10], 4), ([10, 0, 0, 0], 4), ([1] * 10, 3),
                          ([0, 5, 5, 5, 0], 3)):
        groups = consecutive_groups(params, count)
        assert len(groups) == count and all(len(group) for group in groups)
        assert [i for group in groups for i in group] == list(range(len(params)))


def test_graphcores_gpt3_2_7b_pod64_recipe_fits_only_phased(recipe, ipupod_main):
    assert fits(recipe)
    assert not fits(recipe.changed(phased=False))
    refused = ipupod_main(*GPT3_2_7B_POD64)
    assert refused.returncode == 2 and ", or --phased (each checked" in refused.stderr
    ran = ipupod_main(*GPT3_2_7B_POD64, "--phased", "--json")
    assert ran.returncode == 0, ran.stderr
    step = json.loads(ran.stdout)["steps"][0]
    assert step["phase_load_seconds"] > 0
    assert sum(step[key] for key in step if key.endswith("_seconds") and key not in (
        "sim_seconds", "stage_compute_seconds")) == pytest.approx(step["sim_seconds"])


def test_gpt3_175b_runs_phased_on_a_pod256_as_tensor_groups_of_4x4():
    plan = phased_plan("gpt3-175b", "pod256", optimizer_state=SHARDED, accumulation=2)
    assert fits(plan)
    time = step_time(plan)
    assert time.phase_load_seconds > 0 and time.compute_seconds > 0


def test_without_phased_no_step_spends_time_in_phase_loads(ipupod_main):
    ran = ipupod_main("train", "--model", "gpt3-125m", "--topology", "pod16", "--mode",
                      "phantom", "--steps", "1")
    assert ran.returncode == 0, ran.stderr
    assert "phase-io" not in ran.stdout


@pytest.mark.parametrize("args, says", [
    (("--topology", "dss8440", "--optimizer-state", "streaming"),
     "error: --phased streams weights from an IPU-M2000's Streaming Memory"),
    (("--topology", "pod16"), "error: --phased keeps the optimiser state in Streaming Memory"),
    (("--topology", "pod16", "--optimizer-state", "streaming", "--ipus-per-replica", "2"),
     "error: --phased streams one stage's layers phase by phase"),
])
def test_phased_is_refused_in_one_line_where_it_cannot_run(ipupod_main, args, says):
    refused = ipupod_main("train", "--model", "gpt3-125m", "--mode", "phantom", "--phased",
                          "--micro-batch", "1", *args)
    assert refused.returncode == 2
    assert refused.stderr.startswith(says) and refused.stderr.count("\n") == 1
    assert refused.stdout == ""


def test_phased_gradients_are_reduced_phase_by_phase_one_allreduce_a_phase(recipe):
    phases = phases_of(recipe).count
    whole = recipe.changed(phased=False)
    params = recipe.rank_workload.parameter_count
    one = plan(CollectiveName.ALLREDUCE, recipe.topology, -(-params // phases),
               dtype=DType(recipe.workload.gradient_dtype.value),
               algorithm_name=recipe.config.algorithm,
               group=gradient_group(recipe.config), ipus=recipe.chains.ravel())
    timing = gradient_allreduce_timing(recipe)
    assert timing is not None and gradient_allreduce_timing(whole) is not None
    assert len(timing.phases) == phases * len(gradient_allreduce_timing(whole).phases)
    assert timing.sim_seconds == pytest.approx(phases * simulate(one, recipe.topology).sim_seconds)
    time = step_time(recipe)
    assert time.local_allreduce_seconds + time.global_allreduce_seconds == pytest.approx(
        timing.sim_seconds)
