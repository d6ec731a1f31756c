"""Data-parallel training on real emulated servers equals single-process training, keeps
replicas identical, and reports where the simulated step time goes."""

import json
import subprocess
import sys

import pytest

from cluster.errors import UserError
from cluster.model.hardware import pcie_gen3_x16
from cluster.training.engines import train
from cluster.training.numpy_mlp import training_flops
from cluster.training.plan import plan_for
from cluster.training.trainer import TrainConfig, step_time
from ipu_node.pod import EmulatedPod

STEP_KEYS = {"step", "loss", "sim_seconds", "compute_seconds", "host_io_seconds",
             "local_allreduce_seconds", "global_allreduce_seconds"}


@pytest.fixture(scope="module")
def two_servers(ray_session):
    pod = EmulatedPod.launch("dss8440x2")
    yield pod
    pod.shutdown()


@pytest.mark.parametrize("gcd, accumulation", [(1, 1), (2, 2)])
def test_training_on_two_servers_equals_single_process_training(two_servers, gcd, accumulation):
    config = TrainConfig(servers=2, ipus_per_replica=gcd, replicas_per_server=16 // gcd,
                         steps=6, accumulation=accumulation, micro_batch=16, check=True)
    record = train(plan_for(config, two_servers.topology), pod=two_servers)
    assert record["replicas_identical"] is True
    assert record["reference_max_rel_error"] < 1e-6
    losses = [s["loss"] for s in record["steps"]]
    assert losses[-1] < losses[0]
    # the weights live on the replicas' IPUs (a stage on each, when pipelined)
    held = two_servers.tensor_info("model.params" if gcd == 1 else "pipe.params")
    assert set(held) >= set(range(32))
    assert all(s.keys() >= STEP_KEYS for s in record["steps"])


def test_step_time_parts_follow_the_catalogue_and_the_cost_model():
    config = TrainConfig(servers=2, micro_batch=32)
    parts = step_time(plan_for(config))
    assert parts.compute_seconds == pytest.approx(
        training_flops(config.spec, 32) / 31.1e12, rel=1e-12)  # GC2 fp32 peak
    # 16 replicas per server share the PCIe fabric's four x16 Gen3 uplinks.
    input_bytes = 32 * (config.input_size * 4 + 4)
    fabric_share = 4 * pcie_gen3_x16().bandwidth_Bps / 16
    assert parts.host_io_seconds == pytest.approx(input_bytes / fabric_share + 3e-6, rel=1e-9)
    assert parts.local_allreduce_seconds > 0 and parts.global_allreduce_seconds > 0
    assert parts.pipeline_bubble_seconds == parts.inter_stage_seconds == 0  # one stage
    # the update: SGD with momentum, 4 FLOPs per parameter at the fp32 peak, and 20 bytes
    # per parameter (read weights, gradient, velocity; write weights, velocity) at 45 TB/s
    parameters = config.spec.parameter_count
    assert parts.update_seconds == pytest.approx(4 * parameters / 31.1e12
                                                 + 20 * parameters / 45e12, rel=1e-12)
    assert parts.sim_seconds == pytest.approx(
        parts.compute_seconds + parts.host_io_seconds + parts.local_allreduce_seconds
        + parts.global_allreduce_seconds + parts.update_seconds)


def test_one_server_has_no_global_allreduce():
    config = TrainConfig(servers=1)
    assert step_time(plan_for(config)).global_allreduce_seconds == 0


def test_phantom_throughput_grows_with_servers_and_needs_no_devices():
    rates = [train(plan_for(TrainConfig(servers=n, steps=2, mode="phantom")))[
        "throughput_samples_per_sim_second"] for n in (1, 2, 4, 8)]
    assert rates == sorted(rates)
    record = train(plan_for(TrainConfig(servers=8, steps=2, mode="phantom")))
    assert record["replicas_identical"] is None and record["steps"][0]["loss"] is None


@pytest.mark.parametrize("changes, words", [
    ({"ipus_per_replica": 3}, "--ipus-per-replica"), ({"replicas_per_server": 17}, "1 to 16"),
    ({"ipus_per_replica": 2, "replicas_per_server": 9}, "1 to 8"), ({"steps": 0}, "steps"),
    ({"ipus_per_replica": 4, "replicas_per_server": 4, "hidden": (128,)},
     "2 layers: 4 pipeline stages"),
    ({"pipeline_schedule": "zigzag"}, "fill-drain or 1f1b"),
    ({"ipus_per_replica": 2, "replicas_per_server": 8, "split": "shard", "recompute": True},
     "not to a sharded layer"),
    ({"servers": 0}, "--servers"), ({"momentum": 1.0}, "momentum"),
    ({"check": True, "mode": "phantom"}, "--check"),
    ({"accumulation": 0}, "--gradient-accumulation must be 1 or more"),
    ({"accumulation": 10**8}, "--gradient-accumulation runs to 65536"),
    ({"steps": 10**30}, "--steps runs to 1,000,000"),
])
def test_bad_training_options_are_refused(changes, words):
    with pytest.raises(UserError, match=words):
        train(plan_for(TrainConfig(**{"mode": "phantom", **changes})))


def test_the_train_command_prints_the_documented_json(ipupod_here):
    run = ipupod_here("train", "--servers", "1", "--steps", "3", "--check", "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    record = json.loads(run.stdout)
    assert len(record["steps"]) == 3 and record["steps"][0].keys() >= STEP_KEYS
    assert record["replicas_identical"] is True and record["reference_max_rel_error"] < 1e-6


def test_the_train_command_refuses_bad_options_in_one_line():
    run = subprocess.run([sys.executable, "-m", "cluster.cli.main", "train", "--mode", "phantom",
                          "--hidden", "12,x"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "--hidden" in run.stderr and "Traceback" not in run.stderr


def test_training_runs_on_an_ipu_pod_too(ray_session):
    pod = EmulatedPod.launch("pod16")
    try:
        record = train(plan_for(TrainConfig(topology="pod16", steps=3, micro_batch=8,
                                            check=True), pod.topology), pod=pod)
    finally:
        pod.shutdown()
    assert (record["topology"], record["replicas"]) == ("pod16", 16)
    assert record["replicas_identical"] is True and record["reference_max_rel_error"] < 1e-6


def test_phantom_training_on_a_large_pod_with_a_replica_per_ipu_pair():
    record = train(plan_for(TrainConfig(topology="pod256", ipus_per_replica=2,
                                        replicas_per_server=32, steps=1, mode="phantom")))
    assert (record["servers"], record["replicas"]) == (4, 128)
    assert record["steps"][0]["global_allreduce_seconds"] > 0
