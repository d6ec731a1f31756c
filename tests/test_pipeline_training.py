"""Pipelined replicas on real emulated devices train exactly as one process does: the
stages' activations and gradients cross the emulated links as real bytes."""

import json

import pytest

from cluster.training.config import TrainConfig
from cluster.training.engines import train
from cluster.training.numpy_mlp import MLPSpec
from cluster.training.pipeline.stage_math import stage_offsets
from cluster.training.pipeline.stages import split_layers
from cluster.training.plan import plan_for
from cluster.training.workloads import mlp_workload
from ipu_node.pod import EmulatedPod

PIPELINE_KEYS = {"pipeline_bubble_seconds", "inter_stage_seconds", "stage_compute_seconds"}


@pytest.fixture(scope="module")
def server(ray_session):
    pod = EmulatedPod.launch("dss8440")
    yield pod
    pod.shutdown()


@pytest.mark.parametrize("stages, schedule, recompute, micro_batches, replicas", [
    (2, "fill-drain", False, 2, 8),
    (4, "fill-drain", True, 1, 4),
    (4, "1f1b", True, 3, 2),
    (4, "1f1b", False, 4, 4),
    (4, "popart", True, 7, 2),
])
def test_pipelined_training_equals_single_process_training(server, stages, schedule,
                                                           recompute, micro_batches, replicas):
    config = TrainConfig(servers=1, ipus_per_replica=stages, replicas_per_server=replicas,
                         pipeline_schedule=schedule, recompute=recompute,
                         accumulation=micro_batches, micro_batch=8, steps=3, check=True)
    record = train(plan_for(config, server.topology), pod=server)
    assert record["replicas_identical"] is True
    assert record["reference_max_rel_error"] < 1e-6
    step = record["steps"][0]
    assert step.keys() >= PIPELINE_KEYS and len(step["stage_compute_seconds"]) == stages
    assert step["pipeline_bubble_seconds"] > 0 and step["inter_stage_seconds"] > 0
    assert step["sim_seconds"] == pytest.approx(
        sum(step[k] for k in ("compute_seconds", "pipeline_bubble_seconds",
                              "inter_stage_seconds", "host_io_seconds",
                              "local_allreduce_seconds", "global_allreduce_seconds",
                              "update_seconds")))


def test_after_a_pipelined_step_each_ipu_holds_only_its_stage(server):
    config = TrainConfig(servers=1, ipus_per_replica=4, replicas_per_server=4,
                         accumulation=3, micro_batch=8, steps=2)
    train(plan_for(config, server.topology), pod=server)
    spec = MLPSpec(config.input_size, config.hidden_widths, config.classes)
    ranges = split_layers([l.training_flops for l in mlp_workload(spec).layers], 4)
    sizes = [stage_offsets(spec, r)[1] - stage_offsets(spec, r)[0] for r in ranges]
    memory = {}
    for device in server.stats():
        memory.update(device["memory"])
    chain = [0, 1, 3, 2]  # replica 0's stages, along the ladder
    for stage, ipu in enumerate(chain):
        # weights and velocity of its stage, and a gradient padded to the largest stage:
        # every activation and stashed input is gone
        assert memory[ipu]["used_bytes"] == 4 * (2 * sizes[stage] + max(sizes))


def test_the_train_command_pipelines_with_recomputation_and_checks_it(ipupod_here):
    run = ipupod_here("train", "--servers", "1", "--ipus-per-replica", "4", "--recompute",
                      "--steps", "3", "--check", "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    record = json.loads(run.stdout)
    assert (record["ipus_per_replica"], record["recompute"], record["replicas"]) == (4, True, 4)
    assert record["replicas_identical"] is True and record["reference_max_rel_error"] < 1e-6
    assert all(step.keys() >= PIPELINE_KEYS for step in record["steps"])


def test_sharded_replicas_train_like_one_process_through_the_trainer(server):
    config = TrainConfig(servers=1, ipus_per_replica=4, replicas_per_server=4, split="shard",
                         accumulation=2, micro_batch=8, steps=3, check=True)
    record = train(plan_for(config, server.topology), pod=server)
    assert record["split"] == "shard" and record["replicas_identical"] is True
    assert record["reference_max_rel_error"] < 1e-6
    step = record["steps"][0]
    assert step["shard_exchange_seconds"] > 0 and step["pipeline_bubble_seconds"] == 0
    assert len(step["stage_compute_seconds"]) == 4 and len(record["memory_per_ipu"]) == 4
