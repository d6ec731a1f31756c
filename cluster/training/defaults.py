"""The one set of training defaults every command and the service read.

``ipupod train``, ``calibrate``, ``train-report``, ``scaling-report`` and
``pipeline-report`` take their options' defaults from :data:`DEFAULTS` (and
:class:`~cluster.training.config.TrainConfig` its fields'), so a default can never differ
between two commands again. Three defaults depend on the run and are resolved by
:func:`cluster.training.fit.resolve`: the micro-batch and the IPUs per replica, the
largest and the fewest that fit the IPUs' In-Processor-Memory, and a pipeline's gradient
accumulation, the fewest micro-batches that keep its bubble small
(:mod:`cluster.training.accumulation`). Every report shows each
value it assumed, and why (:mod:`cluster.training.reports.settings`).
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.training.kinds import Split
from cluster.training.optimizer_state import OptimizerState
from cluster.training.pipeline.schedules import DEFAULT as DEFAULT_SCHEDULE
from gcl.algorithms.hierarchical import Hierarchical


@dataclass(frozen=True)
class Defaults:
    """Each training option's default; ``RULES`` says why each is what it is."""

    model: str = "mlp"  # train, calibrate, train-report: real mode trains only the MLP
    report_model: str = "bert-large"  # scaling-report and pipeline-report: a workload
    servers: int = 2  # DSS 8440 servers, for the MLP
    workload_topology: str = "pod16"  # a workload's, unless --servers or --topology
    micro_batches: tuple[int, ...] = (32, 16, 8, 4, 2, 1)  # tried in turn: the first fits
    ipus_per_replica: tuple[int, ...] = (1, 2, 4, 8, 16)  # tried in turn: the first fits
    optimizer_state: OptimizerState = OptimizerState.IN_PROCESSOR
    algorithm: str = Hierarchical.name
    pipeline_schedule: str = DEFAULT_SCHEDULE
    split: Split = Split.PIPELINE
    accumulation: int = 1
    efficiency_scale: float = 1.0
    steps: int = 20
    seed: int = 0
    lr: float = 0.05
    momentum: float = 0.9


DEFAULTS = Defaults()

RULES: dict[str, str] = {
    "model": "the MLP for train (the only model real mode trains), BERT-Large for the "
             "workload reports",
    "topology": "DSS 8440 servers ({servers}) for the MLP; an IPU-POD16 for a workload, "
                "the system of the published recipes its efficiencies come from",
    "mode": "real for the MLP, phantom for a workload (it has counts, not weights)",
    "micro_batch": "the largest of 32, 16, 8, 4, 2, 1 that fits In-Processor-Memory",
    "ipus_per_replica": "the fewest of 1, 2, 4, 8, 16 that fit In-Processor-Memory",
    "optimizer_state": "in-processor: Poplar's own placement, the published ResNet-50 "
                       "recipes' and the only one a DSS 8440 has (Streaming Memory is an "
                       "IPU-M2000's, and costs a transfer each update)",
    "algorithm": "hierarchical: IPU-Links inside a server or rack, then between them",
    "pipeline_schedule": f"{DEFAULT_SCHEDULE} (GPipe)",
    "split": "pipeline stages",
    "recompute": "as the model's published recipe (on for a workload, off for the MLP)",
    "gradient_dtype": "the model's number format",
    "sequence_length": "the model's",
    "layers_per_ipu": "balanced on FLOPs",
    "replicas_per_server": "as many as the server's (or rack's) IPUs hold",
    "efficiency_scale": "1: the published-throughput efficiencies, uncalibrated",
    "hidden": "128, once per stage boundary",
    "accumulation": "1: one micro-batch a step; for a pipeline, the smallest power of two "
                    "keeping its bubble at most 10% of its time that fits "
                    "In-Processor-Memory",
    "final_stage_on_first_ipu": "off: one stage on each IPU",
    "tensor_parallel": "1: each layer whole on its IPU (off)",
    "expert_parallel": "1: every expert on each IPU (off)",
    "steps": "20", "seed": "0", "lr": "0.05 (SGD with momentum)", "momentum": "0.9",
    "topologies": "IPU-POD16 to IPU-POD256",
}
"""Why each default is what it is, by field (its ``{field}`` placeholders: other settings,
as :class:`~cluster.errors.SettingError` words them): what a report's settings table says."""
