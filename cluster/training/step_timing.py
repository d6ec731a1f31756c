"""Where a training step's simulated time goes.

A step is: the host streams each replica its input (PCIe, or RoCE to an IPU-M2000), every
replica runs forward and backward on its micro-batches (through its pipeline stages when
it spans several IPUs), then the gradients are allreduced, locally over IPU-Links and
globally between servers or racks (InfiniBand, GW-Links), and the weights updated. With the
optimiser state sharded over each rack's replicas and several racks, the allreduce is
PopART's reduce-scatter, cross-rack shard allreduce and all-gather instead
(:mod:`.sharded_reduction`). With tensor parallelism each IPU of a replica's tensor group
computes and holds its share of every layer (:attr:`TrainPlan.rank_workload`), the
all-reduces inside the group are a part of their own (:mod:`.tensor_parallel_time`),
and each IPU's gradient is averaged with the same IPU of every other replica. With
expert parallelism each MoE layer's experts are spread over an expert group of replicas
(:mod:`.expert_parallel`): its all-to-alls are a part of their own. With phased
execution the weights streamed in that compute does not hide are one too
(:mod:`.phased`). Each part is simulated seconds on the emulated hardware, from the
catalogue and the cost model; none is measured on this machine. The parts are
:class:`~cluster.training.step_parts.StepTime`'s (:mod:`.step_parts`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cluster.errors import UserError
from cluster.model.costmodel import superstep_cost, transmission_seconds
from cluster.model.hardware import pcie_gen4_x16
from cluster.model.routing import Routes, router_of
from cluster.model.topology import HOST, ROLES, Topology
from cluster.training.config import TrainConfig
from cluster.training.expert_parallel_time import expert_parallel_time
from cluster.training.per_plan import per_plan
from cluster.training.phased import gradient_chunks, phase_load_seconds
from cluster.training.pipeline.lock_step import lock_step_time
from cluster.training.pipeline.pass_schedule import PipelineSchedule
from cluster.training.pipeline.schedules import pipeline_schedule
from cluster.training.pipeline.stages import stage_layers
from cluster.training.pipeline.timing import PipelineTime, pipeline_time
from cluster.training.placement import gradient_group
from cluster.training.plan import TrainPlan
from cluster.training.sharded_reduction import (
    ShardedReduction,
    sharded_reduction,
    shards_across_racks,
)
from cluster.training.sharding import ColumnSplit, sharded_time
from cluster.training.step_parts import StepTime
from cluster.training.tensor_parallel_time import tensor_parallel_time
from cluster.training.workloads import (
    BACKWARD_FLOPS_FACTOR,
    Workload,
    forward_seconds,
    update_seconds,
)
from gcl import plan, simulate
from gcl.collectives import CollectiveName, DType
from gcl.phantom import Timing


def step_time(run: TrainPlan) -> StepTime:
    """Simulated seconds of one step of the ``run``, by part (the same every step)."""
    config, topology, workload, chains = run.config, run.topology, run.rank_workload, run.chains
    if config.splits_columns:
        return _sharded_step_time(config, topology, workload, chains)
    pipeline = replica_pipeline_time(config, topology, workload, chains)
    tensor = tensor_parallel_time(run).seconds if config.tensor_parallel.on else 0.0
    experts = expert_parallel_time(run).seconds
    ipu_params = _ipu_params(config, workload)
    local, global_, gather = gradient_reduction_seconds(config, topology, workload, chains,
                                                        ipu_params, gradient_chunks(run))
    host_io, update = _host_io_and_update(config, topology, workload, chains, ipu_params)
    return StepTime(compute_seconds=pipeline.compute_seconds,
                    pipeline_bubble_seconds=pipeline.bubble_seconds,
                    inter_stage_seconds=pipeline.inter_stage_seconds,
                    tensor_parallel_seconds=tensor, expert_parallel_seconds=experts,
                    phase_load_seconds=phase_load_seconds(run),
                    host_io_seconds=host_io,
                    local_allreduce_seconds=local, global_allreduce_seconds=global_,
                    update_seconds=update, weight_gather_seconds=gather,
                    stage_compute_seconds=pipeline.stage_compute_seconds)


def _ipu_params(config: TrainConfig, workload: Workload) -> list[int]:
    """Each IPU of a replica's parameters: its stages' (or its share of a column split's;
    with tensor parallelism, ``workload`` is each IPU's share and every IPU holds it)."""
    if config.splits_columns:
        return list(ColumnSplit.of(config.spec, config.ipus_per_replica).ipu_parameters)
    stages = stage_layers(_layer_flops(workload), config.pipeline_stages,
                          config.layers_per_ipu)
    group = config.tensor_parallel.size  # a stage's IPUs: its tensor group (1: one IPU)
    ipu_params = [0] * config.ipus_per_replica
    for first, layers in zip(config.stage_ipus, stages):
        for ipu in range(first, first + group):
            ipu_params[ipu] += sum(workload.layers[i].parameters for i in layers)
    return ipu_params


def _sharded_step_time(config: TrainConfig, topology: Topology, workload: Workload,
                       chains: np.ndarray) -> StepTime:
    """A step with the widest layer split over each replica's IPUs: the busiest IPU's
    compute and the split's four collectives per micro-batch (:mod:`.sharding`)."""
    sharded = sharded_time(config, topology)
    ipu_params = _ipu_params(config, workload)
    local, global_, gather = gradient_reduction_seconds(config, topology, workload, chains,
                                                        ipu_params)
    host_io, update = _host_io_and_update(config, topology, workload, chains, ipu_params)
    return StepTime(compute_seconds=sharded.compute_seconds, host_io_seconds=host_io,
                    local_allreduce_seconds=local, global_allreduce_seconds=global_,
                    update_seconds=update, shard_exchange_seconds=sharded.exchange_seconds,
                    weight_gather_seconds=gather,
                    stage_compute_seconds=sharded.ipu_compute_seconds)


def gradient_reduction_seconds(config: TrainConfig, topology: Topology, workload: Workload,
                               chains: np.ndarray,
                               ipu_params: list[int],
                               chunks: int = 1) -> tuple[float, float, float]:
    """(local, global, weight gather) simulated seconds of averaging the gradient of each
    IPU of a replica (``ipu_params[s]`` values, padded to the largest) with the same IPU of
    every other replica. Usually one allreduce, split by scope (:func:`allreduce_parts`),
    and no gather. With the optimiser state sharded and the replicas on several racks or
    servers, what PopART runs instead (:mod:`.sharded_reduction`): a reduce-scatter inside
    each rack (local), an allreduce of each shard across the racks (global), and an
    all-gather of the updated weights inside each rack (gather). With phased execution
    the gradients are reduced phase by phase: ``chunks`` collectives of 1/chunks each."""
    if shards_across_racks(config, chains):
        parts = _sharded_chunks(config, topology, workload, chains, ipu_params, chunks)
        return (parts.reduce_scatter_seconds, parts.cross_rack_allreduce_seconds,
                parts.all_gather_seconds)
    timing, spans = _gradient_allreduce(config, topology, workload, chains, ipu_params,
                                        chunks)
    local, global_ = allreduce_parts(timing, spans)
    return local, global_, 0.0


def _sharded_chunks(config: TrainConfig, topology: Topology, workload: Workload,
                    chains: np.ndarray, ipu_params: list[int], chunks: int) -> ShardedReduction:
    """The sharded reduction of ``ipu_params`` in ``chunks`` equal collectives, one after
    another (phased execution's, phase by phase; 1: at once); phased, no weight gather
    (each phase's load gathers its weights: :mod:`.phased`)."""
    parts = sharded_reduction(config, topology, workload, chains,
                              [-(-params // chunks) for params in ipu_params])
    return ShardedReduction(chunks * parts.reduce_scatter_seconds,
                            chunks * parts.cross_rack_allreduce_seconds,
                            0.0 if config.phased else chunks * parts.all_gather_seconds)


def _gradient_allreduce(config: TrainConfig, topology: Topology, workload: Workload,
                        chains: np.ndarray, ipu_params: list[int],
                        chunks: int = 1) -> tuple[Timing, bool]:
    """The gradient allreduce's timing, and whether its replicas span IPU-Link domains;
    in ``chunks`` equal allreduces one after another (their phases in turn) when phased."""
    ipus = chains.ravel()
    schedule = plan(CollectiveName.ALLREDUCE, topology, -(-max(ipu_params) // chunks),
                    dtype=DType(workload.gradient_dtype.value), algorithm_name=config.algorithm,
                    group=gradient_group(config), ipus=ipus)
    spans = len(set(router_of(topology).domain_of_ipu[ipus].tolist())) > 1
    timing = simulate(schedule, topology)
    if chunks == 1:
        return timing, spans
    return Timing(chunks * timing.sim_seconds, timing.phases * chunks,
                  {kind: chunks * n for kind, n in timing.link_type_bytes.items()},
                  timing.wall_seconds), spans


def gradient_allreduce_timing(run: TrainPlan) -> Timing | None:
    """The phases of the gradient allreduce a step of the ``run`` runs (as
    :func:`step_time` prices it: its local and global parts are these phases by scope), or
    None when the optimiser state is sharded across racks (three collectives instead)."""
    config, topology, workload, chains = run.config, run.topology, run.rank_workload, run.chains
    if shards_across_racks(config, chains):
        return None
    return _gradient_allreduce(config, topology, workload, chains,
                               _ipu_params(config, workload), gradient_chunks(run))[0]


@per_plan
def sharded_reduction_timing(run: TrainPlan) -> ShardedReduction | None:
    """The three collectives a step of the ``run`` runs instead of the gradient allreduce
    when the optimiser state is sharded across racks (as :func:`step_time` prices them:
    the local, global and weight-gather parts), or None when it runs the allreduce."""
    config, topology, workload, chains = run.config, run.topology, run.rank_workload, run.chains
    if not shards_across_racks(config, chains):
        return None
    return _sharded_chunks(config, topology, workload, chains, _ipu_params(config, workload),
                           gradient_chunks(run))


def _host_io_and_update(config: TrainConfig, topology: Topology, workload: Workload,
                        chains: np.ndarray, ipu_params: list[int]) -> tuple[float, float]:
    """(host I/O, update) simulated seconds: the host's input to each replica's first IPU
    (every IPU of its first stage's tensor group with tensor parallelism) for the step's
    micro-batches, and the slowest IPU's weight update of its ``ipu_params[s]``
    parameters (its share of them when the optimiser state is sharded)."""
    input_bytes = config.accumulation * config.micro_batch * workload.input_bytes
    fed = chains[:, :config.tensor_parallel.size]  # the first stage's IPUs
    host_io = host_io_seconds(topology, fed.ravel().tolist(), input_bytes)
    update = max(stage_update_seconds(config, topology, workload, int(chains[0, s]), params)
                 for s, params in enumerate(ipu_params))
    return host_io, update


def stage_update_seconds(config: TrainConfig, topology: Topology, workload: Workload, ipu: int,
                         parameters: int) -> float:
    """One stage's weight update on IPU ``ipu`` (:func:`update_seconds`), of its share of
    the parameters when the optimiser state is sharded; with the optimiser state in
    Streaming Memory, plus reading it in and writing it back over
    the IPU's PCIe Gen4 x16 to the IPU-M2000's gateway, one way each at once (32 GB/s
    per direction, docs/hardware.md: the GC200's host interface, 64 GB/s bidirectional)."""
    processor = topology.ipu_processors[ipu]
    parameters = -(-parameters // config.optimizer_shards)  # this replica's share
    seconds = update_seconds(workload, processor, parameters, config.efficiencies)
    if config.optimizer_offchip:
        state_bytes = parameters * workload.optimizer_values_per_parameter * 4  # float32
        seconds += state_bytes / pcie_gen4_x16().bandwidth_Bps
    return seconds


def replica_pipeline_time(config: TrainConfig, topology: Topology, workload: Workload,
                          chains: np.ndarray) -> PipelineTime:
    """The pipeline of every replica at once: stage ``s`` of each on
    ``chains[:, config.stage_ipus[s]]``; each stage's FLOPs over its IPU's peak for the
    workload's partials dtype, times the efficiency of each layer's kind
    (:mod:`cluster.training.workloads.compute`), the backward twice the forward (plus the
    forward again with recomputation); activations and their gradients cross each
    boundary for all replicas at once, costed by the network cost model (with a lock-step
    schedule, every boundary's both ways in one exchange after each cycle:
    :mod:`.pipeline.lock_step`)."""
    costs = pipeline_costs(config, topology, workload, chains)
    if costs.schedule.cycles is not None:
        return lock_step_time(costs.schedule, costs.forward, costs.backward,
                              costs.cycle_copy, config.stage_ipus)
    return pipeline_time(costs.schedule, costs.forward, costs.backward, costs.ahead,
                         costs.back, config.stage_ipus)


@dataclass(frozen=True)
class PipelineCosts:
    """What a replica's pipeline is costed from (simulated seconds): its schedule, one
    micro-batch's forward and backward (recomputation included) per stage, and the
    transfers across each boundary, ahead and back (``cycle_copy``: a lock-step cycle's
    copies; the schedule runs ops as soon as they can otherwise, and it is 0)."""

    schedule: PipelineSchedule
    forward: list[float]
    backward: list[float]
    ahead: list[float]
    back: list[float]
    cycle_copy: float = 0.0


def pipeline_costs(config: TrainConfig, topology: Topology, workload: Workload,
                   chains: np.ndarray) -> PipelineCosts:
    """The inputs of :func:`replica_pipeline_time` (which says how each is priced)."""
    stages = stage_layers(_layer_flops(workload), config.pipeline_stages,
                          config.layers_per_ipu)
    schedule = pipeline_schedule(config.pipeline_schedule, len(stages), config.accumulation)
    backward_factor = BACKWARD_FLOPS_FACTOR + (1 if config.recomputes else 0)
    on = chains[:, list(config.stage_ipus)]  # on[:, s]: every replica's IPU of stage s
    sends = stage_senders(config, chains)  # on[:, s] and the rest of each tensor group
    forward, backward = [], []
    for s, layers in enumerate(stages):
        processor = topology.ipu_processors[int(on[0, s])]
        seconds = forward_seconds(workload, processor, config.micro_batch, config.efficiencies,
                                  [workload.layers[i] for i in layers])
        forward.append(seconds)
        backward.append(backward_factor * seconds)
    nbytes = [np.full(len(sends), float(config.micro_batch
                                        * workload.layers[layers[-1]].output_bytes))
              for layers in stages[:-1]]
    if schedule.cycles is not None:
        return PipelineCosts(schedule, forward, backward, [], [],
                             _cycle_copy_seconds(topology, sends, nbytes))
    ahead = [superstep_cost(topology, sends[:, b], sends[:, b + 1], n).seconds
             for b, n in enumerate(nbytes)]
    back = [superstep_cost(topology, sends[:, b + 1], sends[:, b], n).seconds
            for b, n in enumerate(nbytes)]
    return PipelineCosts(schedule, forward, backward, ahead, back)


def stage_senders(config: TrainConfig, chains: np.ndarray) -> np.ndarray:
    """Who sends across the stage boundaries: row ``i T + r`` (``T`` the tensor group's
    IPUs, 1 without tensor parallelism) holds, for each stage, IPU ``i`` of replica
    ``r``'s tensor group there. Each IPU of a stage's tensor group sends its copy of the
    stage's output (its share with 2-D) to the same IPU of the next stage's group, and
    the gradient back: Megatron-LM's send without the scatter-gather optimisation."""
    return np.concatenate([chains[:, [first + i for first in config.stage_ipus]]
                           for i in range(config.tensor_parallel.size)])


def _cycle_copy_seconds(topology: Topology, on: np.ndarray, nbytes: list[np.ndarray]) -> float:
    """One lock-step cycle's copies: every boundary's activation forward and gradient
    back, for every replica, in one exchange (PopART merges them; links they share split
    their bandwidth). ``on[:, s]``: every replica's IPU of stage ``s``; ``nbytes[b]``: each
    replica's bytes across boundary ``b`` (none: nothing crosses)."""
    if not nbytes:
        return 0.0
    sources = [on[:, b + d] for b in range(len(nbytes)) for d in (0, 1)]
    targets = [on[:, b + 1 - d] for b in range(len(nbytes)) for d in (0, 1)]
    sizes = [n for n in nbytes for _ in (0, 1)]
    return superstep_cost(topology, np.concatenate(sources), np.concatenate(targets),
                          np.concatenate(sizes)).seconds


def _layer_flops(workload: Workload) -> list[int]:
    """Training FLOPs per sample of each layer: what stages are balanced on."""
    return [layer.training_flops for layer in workload.layers]


def _host_links(topology: Topology) -> dict[int, int]:
    """Each node a host link ends at, to that link (the first, by index)."""
    attached: dict[int, int] = {}
    for link in np.flatnonzero(topology.link_role == ROLES.index(HOST)).tolist():
        for node in (int(topology.link_a[link]), int(topology.link_b[link])):
            attached.setdefault(node, link)
    return attached


def _host_path(topology: Topology, ipu: int, host_links: dict[int, int]) -> list[int]:
    """Directed links from the IPU's host down to the IPU: up the network tree to a host,
    or to the node a host is attached to (an IPU-M2000's gateway, by its RoCE link);
    ``host_links``: :func:`_host_links` of the topology."""
    down: list[int] = []
    for node, link_down in router_of(topology).tree.ancestors(ipu):
        down.append(link_down)
        if topology.node_kinds[node] == "host":
            return down[::-1]
        if node in host_links:
            link = host_links[node]  # host -> this node, the host being link_a or link_b
            into = 2 * link if topology.link_b[link] == node else 2 * link + 1
            return [into] + down[::-1]
    raise UserError(f"IPU {topology.ipu_name(ipu)} of {topology.name} has no host to stream its "
                    "training input from: train on a topology whose IPUs reach a host (the "
                    "dss8440 and pod presets, or a YAML file with host nodes)")


def host_io_seconds(topology: Topology, ipus: list[int], nbytes: float) -> float:
    """Time for every host to send ``nbytes`` to each of ``ipus`` at once (max-min fair
    over the shared PCIe or RoCE links, plus the path's latency)."""
    flows: list[int] = []
    links: list[int] = []
    host_links = _host_links(topology)
    for flow, ipu in enumerate(ipus):
        path = _host_path(topology, ipu, host_links)
        flows += [flow] * len(path)
        links += path
    pair_flow, pair_link = np.array(flows, dtype=np.int64), np.array(links, dtype=np.int64)
    latency = np.bincount(pair_flow, weights=topology.directed_latency_seconds[pair_link],
                          minlength=len(ipus))
    routes = Routes(pair_flow, pair_link, latency, np.zeros(len(ipus), dtype=bool))
    finish = transmission_seconds(routes, np.full(len(ipus), float(nbytes)), topology)
    return float((finish + latency).max())


def allreduce_parts(timing: Timing, spans_domains: bool) -> tuple[float, float]:
    """(local, global) seconds of an allreduce: hierarchical phases say which they are; a
    flat algorithm counts as global when its groups span IPU-Link domains."""
    scopes = timing.seconds_by_scope()
    flat = scopes.get("flat", 0.0)
    local = scopes.get("local", 0.0) + (0.0 if spans_domains else flat)
    return local, scopes.get("global", 0.0) + (flat if spans_domains else 0.0)
