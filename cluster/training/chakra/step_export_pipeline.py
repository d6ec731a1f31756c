"""A pipelined training step as per-rank Chakra nodes (``ipupod train --chakra-out``): rank
``r`` is IPU ``r``; each runs the pipeline ops of the stages on it as COMP nodes (one
micro-batch's forward or backward, its simulated seconds), in the order the pricing runs
them there (:func:`~cluster.training.pipeline.timing.op_times`), each after the previous one
on its IPU and after the COMM_RECV of its input; an op whose output crosses a stage
boundary (an activation ahead, a gradient back) is followed by a COMM_SEND of its bytes to
the IPU of the next stage. Then each rank's gradients are all-reduced with the same IPU of
every other replica (process group ``replica-ipu P``, ``comm_size`` the largest IPU's
gradients, as the pricing pads them), and the weights updated (the step's update: the
slowest IPU's, which the step waits for). Replaying the trace on the same topology runs
each op when the pricing does, so it ends at the step's time.

Covered: pipelines whose ops start as soon as they can (fill-drain, 1f1b) of one replica.
Refused by name (the replay would price them differently, so the times would not agree):
a lock-step schedule (its cycle's copies are one exchange of every boundary both ways,
the replay prices each send alone), and several replicas (the pricing moves every
replica's activations across a boundary as one superstep, sharing links, and starts every
IPU's gradient reduction when the whole pipeline has ended; the replay prices each send
alone and starts each reduction when its IPU's last op ends)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from cluster.errors import UserError
from cluster.training.chakra.et_nodes import CommType
from cluster.training.chakra.et_writer import collective_node, compute_node, peer_node
from cluster.training.pipeline.pass_schedule import Op, Pass, PipelineSchedule, describe
from cluster.training.pipeline.stages import stage_layers
from cluster.training.pipeline.timing import op_times
from cluster.training.plan import TrainPlan
from cluster.training.step_parts import StepTime
from cluster.training.step_timing import PipelineCosts, pipeline_costs
from ipupod_proto import chakra_et_pb2 as et


@dataclass
class RankNodes:
    """One rank's nodes as they are built: ids from 1, and its last COMP node (what its
    next one runs after: one compute at a time, in the pricing's order)."""

    nodes: list[et.Node] = field(default_factory=list)
    last_compute: int | None = None
    received: dict[Op, int] = field(default_factory=dict)  # op -> its input's COMM_RECV

    def next_id(self) -> int:
        """The id the next node gets."""
        return len(self.nodes) + 1

    def after_last(self, *deps: int | None) -> list[int]:
        """``deps`` (those given) and the rank's last COMP node, as a node's dependencies."""
        return [d for d in (self.last_compute, *deps) if d is not None]


def check_pipeline_exportable(plan: TrainPlan) -> None:
    """A UserError naming what the export would not reproduce, for a pipelined run it does
    not cover (see the module docstring)."""
    config = plan.config
    costs = pipeline_costs(config, plan.topology, plan.workload, plan.chains)
    if costs.schedule.cycles is not None:
        raise UserError(f"--chakra-out does not export a lock-step pipeline schedule "
                        f"({config.pipeline_schedule}) yet: its cycle's copies are priced as "
                        "one exchange of every boundary both ways, which sends in a trace "
                        "(each replayed alone) do not reproduce; use --pipeline-schedule "
                        "fill-drain or 1f1b to export the step")
    if config.replicas > 1:
        raise UserError(f"--chakra-out exports a pipelined step of one replica only, for now: "
                        f"this run has {config.replicas} replicas, whose activations the "
                        "pricing moves across each boundary together (sharing links) and "
                        "whose gradient reductions all start when the whole pipeline ends, "
                        "which sends and collectives in a trace (each send replayed alone, "
                        "each reduction when its IPU's last op ends) do not reproduce; use "
                        "--replicas-per-server 1 on one server to export the step")


def pipeline_rank_nodes(plan: TrainPlan, step: StepTime) -> list[list[et.Node]]:
    """Each rank's nodes for the ``plan``'s pipelined step, priced as ``step``."""
    config, workload, chains = plan.config, plan.workload, plan.chains
    costs = pipeline_costs(config, plan.topology, workload, chains)
    stages = stage_layers([layer.training_flops for layer in workload.layers],
                          config.pipeline_stages, config.layers_per_ipu)
    boundary_bytes = [config.micro_batch * workload.layers[layers[-1]].output_bytes
                      for layers in stages[:-1]]
    ranks = {int(ipu): RankNodes() for ipu in chains.ravel()}
    for replica in chains.tolist():
        ranks[replica[0]].nodes.append(compute_node(1, "host input", step.host_io_seconds))
        ranks[replica[0]].last_compute = 1
        _add_ops(ranks, replica, config.stage_ipus, costs, boundary_bytes)
    gradient_bytes = max(_ipu_parameters(plan, stages)) * workload.gradient_dtype.itemsize
    for replica in chains.tolist():
        for position, ipu in enumerate(replica):
            rank = ranks[ipu]
            reduce_id = rank.next_id()
            rank.nodes.append(collective_node(reduce_id, "allreduce(gradients)",
                                              CommType.ALL_REDUCE, gradient_bytes,
                                              pg_name=f"replica-ipu{position}",
                                              deps=rank.after_last()))
            rank.nodes.append(compute_node(rank.next_id(), "weight update",
                                           step.update_seconds, deps=[reduce_id]))
    return [ranks[ipu].nodes for ipu in sorted(ranks)]


def _add_ops(ranks: dict[int, RankNodes], replica: list[int], stage_positions: tuple[int, ...],
             costs: PipelineCosts, boundary_bytes: list[int]) -> None:
    """One replica's pipeline ops (stage ``s`` on its IPU ``stage_positions[s]``, the rank
    ``replica[stage_positions[s]]``), in the order the pricing runs them, each with the
    receive of its input and the send of its output."""
    stage_rank = [replica[p] for p in stage_positions]
    schedule = costs.schedule
    times = op_times(schedule, costs.forward, costs.backward, costs.ahead, costs.back,
                     stage_positions)
    for op in times:  # in the order the ops run
        rank = ranks[stage_rank[op.stage]]
        seconds = (costs.forward if op.pass_ is Pass.FORWARD else costs.backward)[op.stage]
        op_id = rank.next_id()
        rank.nodes.append(compute_node(op_id, describe(op), seconds,
                                       deps=rank.after_last(rank.received.get(op))))
        rank.last_compute = op_id
        successor = _successor(schedule, op)
        if successor is not None:
            _add_transfer(ranks, stage_rank, op, successor, op_id,
                          boundary_bytes[min(op.stage, successor.stage)])


def _successor(schedule: PipelineSchedule, op: Op) -> Op | None:
    """The op of another stage that needs ``op``'s output, or None."""
    if op.pass_ is Pass.FORWARD:
        if op.stage + 1 < schedule.stages:
            return Op(op.stage + 1, Pass.FORWARD, op.micro)
        return None
    return Op(op.stage - 1, Pass.BACKWARD, op.micro) if op.stage > 0 else None


def _add_transfer(ranks: dict[int, RankNodes], stage_rank: list[int], op: Op, successor: Op,
                  op_id: int, nbytes: int) -> None:
    """``op``'s output to ``successor``'s rank: a COMM_SEND after ``op``, and the COMM_RECV
    that ``successor`` runs after (tagged by boundary, pass and micro-batch)."""
    src, dst = stage_rank[op.stage], stage_rank[successor.stage]
    if src == dst:  # stages on one IPU: the output stays there
        return
    tag = 2 * (op.micro * len(stage_rank) + op.stage) + (op.pass_ is Pass.BACKWARD)
    what = "activation" if op.pass_ is Pass.FORWARD else "gradient"
    sender, receiver = ranks[src], ranks[dst]
    sender.nodes.append(peer_node(sender.next_id(), f"send {what} of {describe(op)}", True,
                                  src, dst, tag, nbytes, deps=[op_id]))
    recv_id = receiver.next_id()
    receiver.nodes.append(peer_node(recv_id, f"recv {what} of {describe(op)}", False,
                                    src, dst, tag, nbytes))
    receiver.received[successor] = recv_id


def _ipu_parameters(plan: TrainPlan, stages: Sequence[Sequence[int]]) -> list[int]:
    """Each IPU of a replica's parameters: those of its stages."""
    params = [0] * plan.config.ipus_per_replica
    for position, layers in zip(plan.config.stage_ipus, stages):
        params[position] += sum(plan.workload.layers[i].parameters for i in layers)
    return params
