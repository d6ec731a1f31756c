"""Real-mode training of the decoder (``--model gpt-tiny``): replicas of one tensor group
each (``--tensor-parallel T`` or ``T1xT2``, ``--ipus-per-replica`` its IPUs; one IPU
without it).

Micro-batch after micro-batch, every IPU of every replica runs the same segment of the
decoder's program (:mod:`cluster.training.decoder.program`, on the card:
:mod:`.decoder_tasks`) on its rank's share, then the segment's all-reduces run as GCL
collectives over each replica's tensor group (its ``t1`` or ``t2`` groups with 2-D), every
replica's at once, their bytes over the emulated links. After the step's last micro-batch
each rank's gradient is averaged with the same rank of every other replica (one
allreduce) and applied with SGD and momentum. This process only streams the host's
tokens and labels and orders the rounds; no activation or gradient passes through it.
"""

from __future__ import annotations

from functools import cached_property, partial
from typing import TYPE_CHECKING

import numpy as np

from cluster.training.data import replica_slice, step_batch
from cluster.training.decoder.flat_params import init_params
from cluster.training.decoder.group import axis_ranks
from cluster.training.decoder.program import Reduce, program
from cluster.training.decoder.rank_state import summed
from cluster.training.decoder.tokens import make_token_dataset
from cluster.training.engines.base import StepEngine
from cluster.training.engines.decoder_tasks import (
    GRAD,
    GRAD_MEAN,
    SCRATCH,
    DecoderSplit,
    apply_updates,
    place_ranks,
    run_segment,
)
from cluster.training.engines.rank_rounds import rank_round
from cluster.training.placement import gradient_group, replica_ipus
from cluster.training.sharding.exchange import ALGORITHM
from cluster.training.step_result import StepResult
from cluster.training.workloads.decoder import DecoderConfig
from gcl import CommGroup
from gcl.collectives import CollectiveName, ReduceOp

if TYPE_CHECKING:
    from cluster.training.plan import TrainPlan
    from ipu_node.pod import EmulatedPod

Batch = tuple[np.ndarray, np.ndarray]  # a step's token ids and next-token labels


def _replica_share(shares: list[tuple], replica: int, _rank: int) -> tuple:
    """What every rank of replica ``replica`` is given: ``shares[replica]``."""
    return shares[replica]


class DecoderEngine(StepEngine):
    """Replicas of a tensor group (or one IPU) training ``decoder``."""

    def __init__(self, plan: TrainPlan, pod: EmulatedPod, decoder: DecoderConfig) -> None:
        super().__init__(plan, pod)
        self.split = DecoderSplit(decoder, plan.config.tensor_parallel)
        self.groups = replica_ipus(plan.config, pod.topology).reshape(
            plan.config.replicas, plan.config.ipus_per_replica)

    @cached_property
    def dataset(self) -> Batch:
        """The run's sequences and labels, drawn from its seed."""
        config, decoder = self.plan.config, self.split.config
        return make_token_dataset(config.seed, config.samples,
                                  config.sequence_length or decoder.context, decoder.vocabulary)

    def batch(self, step: int) -> Batch:
        """Step ``step``'s global batch."""
        return step_batch(*self.dataset, step, self.plan.config.global_batch)

    def begin(self) -> None:
        """Each rank's share of the starting weights."""
        whole = init_params(self.split.config, self.plan.config.seed)
        starting = [self.split.rank(k).cut(whole) for k in range(self.groups.shape[1])]
        padded = max(len(params) for params in starting)
        rank_round(self.pod, self.groups, place_ranks, self.split,
                   lambda r, k: (starting[k], padded))

    def step(self, batch: Batch) -> StepResult:
        """Every micro-batch of the step, then each rank's gradient averaged and applied."""
        config = self.plan.config
        losses = np.zeros(config.replicas)
        for micro in range(config.accumulation):
            data = [replica_slice(*batch, r, config.replicas, config.micro_batch,
                                  config.accumulation, micro) for r in range(config.replicas)]
            losses += self._micro_batch(data, micro == config.accumulation - 1)
        return StepResult(float(np.mean(losses / config.accumulation)), self._update())

    def _micro_batch(self, data: list[Batch], last: bool) -> np.ndarray:
        """One micro-batch, replica ``r`` on ``data[r]``: every segment of the program in
        turn, each followed by its all-reduces; the loss of each replica."""
        segments = program(self.split.config.layers, self.split.layout.two_d)
        first = {int(ipu): r for r, ipu in enumerate(self.groups[:, 0].tolist())}
        losses = np.zeros(len(data))
        for index, segment in enumerate(segments):
            ends = self.plan.config.accumulation if last and index == len(segments) - 1 else 0
            given = [(index, batch if index == 0 else (), ends) for batch in data]
            found = rank_round(self.pod, self.groups, run_segment, self.split,
                               partial(_replica_share, given))
            for ipu, loss in found.items():
                losses[first[ipu]] = loss
            for reduce in segment.reduces:
                self._all_reduce(reduce)
        return losses

    def _all_reduce(self, reduce: Reduce) -> None:
        """``reduce`` over its group of every replica's tensor group, all at once (none
        over a group of one IPU)."""
        ranks = axis_ranks(self.split.layout, reduce.axis)
        if len(ranks[0]) == 1:
            return
        order = [k for group in ranks for k in group]  # each group's ranks in a row
        self.pod.collective(CollectiveName.ALLREDUCE, SCRATCH + reduce.name,
                            output=SCRATCH + summed(reduce.name), op=reduce.op,
                            group=CommGroup.consecutive(len(ranks[0])),
                            ipus=self.groups[:, order].ravel().tolist(), algorithm=ALGORITHM)

    def _update(self) -> bool:
        """Average each rank's gradient with the same rank of every other replica, apply
        it; whether every rank's weights are the same in every replica."""
        config = self.plan.config
        self.pod.collective(CollectiveName.ALLREDUCE, GRAD, output=GRAD_MEAN, op=ReduceOp.MEAN,
                            algorithm=config.algorithm, group=gradient_group(config),
                            ipus=self.groups.ravel().tolist())
        digests = rank_round(self.pod, self.groups, apply_updates, self.split,
                             lambda r, k: (config.lr, config.momentum))
        return all(len({digests[int(ipu)] for ipu in self.groups[:, k]}) == 1
                   for k in range(self.groups.shape[1]))
