"""Which engine runs a plan: decided here, once, from the plan's typed values.

A user's PyTorch module given: :class:`~.torch_data_parallel.TorchEngine`. A decoder real
mode trains (``--model gpt-tiny``): :class:`~.decoder_engine.DecoderEngine`, replicas of
one IPU or of one tensor group. Otherwise the trainer's MLP (what else real mode trains,
:meth:`TrainConfig.check_settings <cluster.training.config.TrainConfig.check_settings>`):
replicas of one IPU are data-parallel (:class:`~.data_parallel.DataParallelEngine`),
replicas of several split their widest layer (:attr:`Split.SHARD
<cluster.training.kinds.Split>`: :class:`~.sharded.ShardedEngine`), split a Megatron
block over a tensor group (``--tensor-parallel``:
:class:`~.tensor_parallel.TensorParallelEngine`) or pipeline their layers
(:class:`~.pipelined.PipelinedEngine`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, overload

from cluster.training.engines.base import StepEngine
from cluster.training.engines.data_parallel import DataParallelEngine
from cluster.training.engines.decoder_engine import DecoderEngine
from cluster.training.engines.pipelined import PipelinedEngine
from cluster.training.engines.sharded import ShardedEngine
from cluster.training.engines.tensor_parallel import TensorParallelEngine
from cluster.training.engines.torch_data_parallel import TorchEngine
from cluster.training.kinds import ModelKind, Split

if TYPE_CHECKING:
    from cluster.training.plan import TrainPlan
    from cluster.training.torch_replicas.run import TorchModel
    from ipu_node.pod import EmulatedPod


@overload
def engine_for(plan: TrainPlan, pod: EmulatedPod, torch_model: TorchModel) -> TorchEngine: ...


@overload
def engine_for(plan: TrainPlan, pod: EmulatedPod, torch_model: None = None) -> StepEngine: ...


def engine_for(plan: TrainPlan, pod: EmulatedPod,
               torch_model: TorchModel | None = None) -> StepEngine:
    """The engine that trains ``plan`` on ``pod`` (``torch_model``: the user's module)."""
    if torch_model is not None:
        return TorchEngine(plan, pod, torch_model)
    decoder = plan.config.model.decoder
    if decoder is not None:
        return DecoderEngine(plan, pod, decoder)
    if plan.kind is not ModelKind.MLP:
        raise ValueError(f"real mode trains the MLP, gpt-tiny or a PyTorch module, not "
                         f"{plan.config.model} (TrainConfig.check_settings refuses it)")
    if plan.config.ipus_per_replica == 1:
        return DataParallelEngine(plan, pod)
    if plan.config.tensor_parallel.on:
        return TensorParallelEngine(plan, pod)
    if plan.split is Split.SHARD:
        return ShardedEngine(plan, pod)
    return PipelinedEngine(plan, pod)
