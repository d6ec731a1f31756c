"""How people name each setting, by the field the code gives it.

The pure layers (training, the cost model) raise :class:`cluster.errors.SettingError`
with the field at fault and a message whose ``{field}`` placeholders stand for settings;
this table words them as the user typed them: the option of ``ipupod train`` and the
reports (``tests/test_setting_names.py`` checks that each is one), or plain words for what
no command sets. The service and the published-results table report the same words, so
one mistake reads alike wherever it was made.
"""

from __future__ import annotations

SETTING_NAMES: dict[str, str] = {
    "servers": "--servers",
    "ipus_per_replica": "--ipus-per-replica",
    "gcd": "--gcd",
    "replicas_per_server": "--replicas-per-server",
    "micro_batch": "--micro-batch",
    "batch_size": "--batch-size",
    "accumulation": "--gradient-accumulation",
    "steps": "--steps",
    "input_size": "input-size",
    "classes": "classes",
    "samples": "samples",
    "mode": "--mode",
    "model": "--model",
    "gradient_dtype": "--gradient-dtype",
    "optimizer_state": "--optimizer-state",
    "check": "--check",
    "split": "--split",
    "recompute": "--recompute",
    "pipeline_schedule": "--pipeline-schedule",
    "efficiency_scale": "--efficiency-scale",
    "final_stage_on_first_ipu": "--final-stage-on-first-ipu",
    "layers_per_ipu": "--layers-per-ipu",
    "tensor_parallel": "--tensor-parallel",
    "expert_parallel": "--expert-parallel",
    "phased": "--phased",
    "hidden": "--hidden",
    "sequence_length": "--sequence-length",
    "topology": "--topology",
    "topologies": "--topologies",
    "algorithm": "--algorithm",
    "seed": "--seed",
    "lr": "--lr",
    "momentum": "--momentum",
    "torch": "--torch",
    "sample_shape": "--sample-shape",
    "input_shape": "--input-shape",
    "strict": "--strict",
    "group": "--group",
    "max_bytes": "-e",
    "ray_address": "--ray-address",
    "format": "--format",
    "level": "--level",
}
"""Each setting's name as people use it, by field."""
