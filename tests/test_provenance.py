"""Where each setting of a run came from is recorded once, in its plan: what the user
typed (read off the command line where the command makes the plan), what fit chose, and
the defaults, each with its reason; reports print from the plan, not from click."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cluster.cli.made_by import given_settings
from cluster.cli.reports import scaling_report_command
from cluster.cli.train import train_command
from cluster.training.config import TrainConfig
from cluster.training.defaults import RULES
from cluster.training.fit import resolve
from cluster.training.plan import TrainPlan
from cluster.training.reports.provenance import COMMANDS_DEFAULT, Source, provenance
from gcl.modes import Mode


@pytest.fixture(scope="module")
def bert() -> TrainPlan:
    """BERT-Large on an IPU-POD16, its micro-batch chosen to fit, its model given."""
    config = TrainConfig(model="bert-large", topology="pod16", servers=1, mode=Mode.PHANTOM,
                         ipus_per_replica=8, micro_batch=32, replicas_per_server=0)
    return replace(resolve(config, frozenset({"micro_batch"})), given=frozenset({"model"}))


def test_a_setting_is_given_chosen_to_fit_or_a_default_with_its_reason(bert):
    assert provenance(bert, "model").source is Source.GIVEN
    assert provenance(bert, "model").given and provenance(bert, "model").rule == ""
    chosen = provenance(bert, "micro_batch")
    assert chosen.source is Source.CHOSEN and chosen.rule == RULES["micro_batch"]
    steps = provenance(bert, "steps")
    assert steps.source is Source.DEFAULT and steps.rule == RULES["steps"]


def test_a_commands_own_option_defaults_to_the_commands_default_or_its_own_reason(bert):
    assert provenance(bert, "out_dir").rule == COMMANDS_DEFAULT
    assert provenance(bert, "micro_batch", "the sweep's").rule == "the sweep's"


def test_the_command_line_records_what_was_typed_by_field():
    ctx = train_command.make_context("train", ["--model", "bert-large", "--gcd", "8",
                                               "--gradient-accumulation", "4", "--no-recompute"])
    assert given_settings(ctx) == {"model", "ipus_per_replica", "accumulation", "recompute"}


def test_a_reports_own_options_are_recorded_by_name():
    ctx = scaling_report_command.make_context(
        "scaling-report", ["--topologies", "pod16", "--out", "r", "--ipus-per-replica", "8"])
    assert given_settings(ctx) == {"topologies", "out_dir", "ipus_per_replica"}
