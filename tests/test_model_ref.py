"""The model a run trains is resolved once where it is named: a typed ModelRef."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from cluster.training.config import TrainConfig
from cluster.training.kinds import ModelKind
from cluster.training.model_ref import ModelRef, model_ref
from cluster.training.plan import build_workload
from cluster.training.workloads import BUILTINS, workload
from gcl.modes import Mode

WORKLOAD_FILE = Path(__file__).resolve().parent.parent / "examples" / "workloads" / "tiny.yaml"


def test_a_built_in_name_resolves_to_a_workload_and_its_registry_entry():
    ref = model_ref("bert-large")
    assert (ref.text, ref.kind, ref.builtin) == ("bert-large", ModelKind.WORKLOAD,
                                                  BUILTINS["bert-large"])
    assert str(ref) == "bert-large"


def test_the_trainers_mlp_and_a_workload_file_are_told_apart():
    assert model_ref("mlp").kind is ModelKind.MLP
    ref = model_ref(str(WORKLOAD_FILE))
    assert (ref.kind, ref.builtin) == (ModelKind.WORKLOAD, None)


def test_a_plain_name_given_to_a_config_becomes_its_model_ref():
    config = TrainConfig(model="gpt2-xl", mode=Mode.PHANTOM)
    assert config.model == model_ref("gpt2-xl")
    assert config.kind is ModelKind.WORKLOAD


def test_replace_carries_the_resolved_model_without_reading_its_name_again():
    config = TrainConfig(model="bert-large", mode=Mode.PHANTOM)
    carried = replace(config, micro_batch=2, accumulation=8).model
    assert isinstance(carried, ModelRef) and carried is config.model


def test_the_workload_built_from_the_entry_is_the_one_built_by_name():
    built = build_workload(TrainConfig(model="bert-large", mode=Mode.PHANTOM,
                                       sequence_length=384))
    assert built == workload("bert-large", sequence_length=384)
    from_file = build_workload(TrainConfig(model=str(WORKLOAD_FILE), mode=Mode.PHANTOM))
    assert from_file == workload(str(WORKLOAD_FILE))
