"""The gradient's reduction when the optimiser state is sharded over each rack's replicas
and the replicas span racks (PopART's reduce-scatter in each rack, allreduce of each shard
across the racks, all-gather in each rack: :mod:`cluster.training.sharded_reduction`),
against hand computations from the hardware catalogue."""

import math
from dataclasses import replace

import pytest

from cluster.model import hardware as hw
from cluster.model.costmodel import REDUCE_MEMORY_PASSES
from cluster.model.spec import load_topology
from cluster.training.config import TrainConfig
from cluster.training.pipeline.stages import stage_layers
from cluster.training.placement import gradient_group, replica_ipus
from cluster.training.plan import plan_for
from cluster.training.step_timing import step_time
from cluster.training.workloads import DType, workload
from gcl import plan, simulate
from gcl.collectives import DType as GclDType
from gcl.modes import Mode

RESNET = TrainConfig(model="resnet50", topology="pod128", mode=Mode.PHANTOM, servers=2,
                     replicas_per_server=64, micro_batch=20, accumulation=2,
                     optimizer_state="sharded", algorithm="clockwise_ring")
BERT = TrainConfig(model="bert-large", sequence_length=512, topology="pod128",
                   mode=Mode.PHANTOM, servers=2, replicas_per_server=8, ipus_per_replica=8,
                   micro_batch=2, accumulation=96, pipeline_schedule="1f1b", recompute=True,
                   optimizer_state="sharded", layers_per_ipu=(4, 4, 6, 7, 7, 7, 7, 9),
                   algorithm="clockwise_ring")


def _in_rack_ring(nbytes: int, reduce: bool) -> float:
    """A ring reduce-scatter (``reduce``) or all-gather round a rack's 64 IPUs, every
    rack at once: 63 supersteps, each IPU sending ``nbytes`` one IPU-Link hop (the racks'
    rings use disjoint links, so they cost what one does)."""
    link = hw.ipu_link_mk2()
    reduce_seconds = (REDUCE_MEMORY_PASSES * nbytes / hw.gc200().memory_bandwidth_Bps
                      if reduce else 0)
    return 63 * (hw.LOCAL_SYNC_SECONDS + link.latency_seconds + nbytes / link.bandwidth_Bps
                 + reduce_seconds)


def _cross_rack_pairs(shard: int) -> float:
    """A clockwise-ring allreduce of a ``shard`` of float16 elements between the two IPUs
    at the same position of the two racks of an IPU-POD128, all 64 positions at once
    (every IPU of both racks in one pair).

    Two supersteps (the ring's reduce-scatter and all-gather over 2), each moving half the
    shard (rounded up to whole elements) both ways between the two IPUs of each pair. The
    route is IPU -> its IPU-M2000's gateway (PCIe Gen4 x16) -> the GW-Link switch (the
    gateway's 2 GW-Link ports, one bundle) -> the other rack's gateway -> IPU: four hops'
    latency. It leaves the IPU-Link domain, so each superstep pays the global sync. Each
    gateway's 4 IPUs send through its 2 GW-Link ports at once (and 4 flows arrive on the
    far side), so each flow gets a quarter of 2 x 12.5 GB/s; its own PCIe link (32 GB/s)
    is not the bottleneck. The reduce-scatter's receiver reduces the half it gets."""
    pcie, gw_link, m2000 = hw.pcie_gen4_x16(), hw.gw_link_100g(), hw.ipu_m2000()
    half = math.ceil(shard / 2) * 2  # bytes: float16
    latency = 2 * pcie.latency_seconds + 2 * gw_link.latency_seconds
    rate = min(pcie.bandwidth_Bps, m2000.gw_link_ports * gw_link.bandwidth_Bps / m2000.ipus)
    superstep = hw.GLOBAL_SYNC_SECONDS + latency + half / rate
    return 2 * superstep + REDUCE_MEMORY_PASSES * half / hw.gc200().memory_bandwidth_Bps


def test_sharded_state_across_racks_reduces_in_each_rack_then_across_then_gathers_by_hand():
    resnet = workload("resnet50")
    assert resnet.gradient_dtype == resnet.weight_dtype == DType.FLOAT16
    shard = math.ceil(resnet.parameter_count / 64)
    step = step_time(plan_for(RESNET, load_topology("pod128")))
    assert step.local_allreduce_seconds == pytest.approx(_in_rack_ring(2 * shard, True),
                                                         rel=1e-12)
    assert step.global_allreduce_seconds == pytest.approx(_cross_rack_pairs(shard),
                                                          rel=1e-12)
    assert step.weight_gather_seconds == pytest.approx(_in_rack_ring(2 * shard, False),
                                                       rel=1e-12)
    assert step.sim_seconds == pytest.approx(sum(step.parts().values()), rel=1e-12)


def test_on_one_rack_the_sharded_state_costs_one_allreduce_and_no_gather():
    one_rack = replace(RESNET, topology="pod64", servers=1)
    step = step_time(plan_for(one_rack, load_topology("pod64")))
    # a ring allreduce round the rack's 64 IPUs: its reduce-scatter, then its all-gather,
    # each of 1/64 of the gradient (the shard)
    chunk = 2 * math.ceil(workload("resnet50").parameter_count / 64)
    assert step.local_allreduce_seconds == pytest.approx(
        _in_rack_ring(chunk, True) + _in_rack_ring(chunk, False), rel=1e-12)
    assert step.global_allreduce_seconds == 0.0
    assert step.weight_gather_seconds == 0.0


def test_unsharded_state_across_racks_is_still_one_ring_through_every_rack():
    config = replace(RESNET, optimizer_state="in-processor")
    topology = load_topology("pod128")
    step = step_time(plan_for(config, topology))
    ring = plan("allreduce", topology, workload("resnet50").parameter_count, dtype=GclDType.FLOAT16,
                algorithm_name="clockwise_ring", ipus=replica_ipus(config, topology))
    assert step.local_allreduce_seconds == 0.0 and step.weight_gather_seconds == 0.0
    assert step.global_allreduce_seconds == pytest.approx(simulate(ring, topology).sim_seconds,
                                                          rel=1e-12)


def test_pipelined_sharded_bert_across_racks_reduces_each_stage_shard_across_racks():
    topology = load_topology("pod128")
    run = plan_for(BERT, topology)
    bert = run.workload
    stages = stage_layers([layer.training_flops for layer in bert.layers], 8,
                          BERT.layers_per_ipu)
    largest = max(sum(bert.layers[i].parameters for i in layers) for layers in stages)
    shard = math.ceil(largest / 8)  # each stage's gradient padded to the largest stage's
    assert bert.gradient_dtype == DType.FLOAT16
    step = step_time(run)
    # stage s of the replicas at the same position of both racks: 64 pairs, each M2000's 4
    # IPUs all in one, as with one IPU per replica
    assert step.global_allreduce_seconds == pytest.approx(_cross_rack_pairs(shard),
                                                          rel=1e-12)
    old_ring = plan("allreduce", topology, largest, dtype=GclDType.FLOAT16,
                    algorithm_name="clockwise_ring", group=gradient_group(BERT),
                    ipus=replica_ipus(BERT, topology))
    assert step.global_allreduce_seconds < simulate(old_ring, topology).sim_seconds
    # in each rack the reduce-scatter and the all-gather are one rack's allreduce's halves
    one_rack = step_time(plan_for(replace(BERT, topology="pod64", servers=1),
                                  load_topology("pod64")))
    assert step.local_allreduce_seconds + step.weight_gather_seconds == pytest.approx(
        one_rack.local_allreduce_seconds, rel=1e-9)
    assert 0 < step.weight_gather_seconds < step.local_allreduce_seconds
    assert step.sim_seconds == pytest.approx(sum(step.parts().values()), rel=1e-12)
