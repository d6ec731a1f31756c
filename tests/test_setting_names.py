"""A pure layer's refusal names the setting at fault by its field, and words it as the
command line spells it: the table of those words holds only real options."""

from __future__ import annotations

import pickle
import subprocess
import sys

import click
import pytest

from cluster.cli.main import cli
from cluster.errors import SettingError, UserError
from cluster.setting_names import SETTING_NAMES
from cluster.training.config import TrainConfig
from cluster.training.defaults import RULES
from cluster.training.plan import plan_for
from cluster.training.reports.settings import VALUES, default_rule
from cluster.training.torch_replicas.run import sample_shape
from gcl.modes import Mode


def _options(group: click.Group) -> set[str]:
    """Every option spelling of every command under ``group``."""
    found: set[str] = set()
    context = click.Context(group)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        if isinstance(command, click.Group):
            found |= _options(command)
        elif command is not None:
            found |= {spelling for parameter in command.params
                      for spelling in getattr(parameter, "opts", [])}
    return found


def test_every_option_the_table_names_is_an_option_of_a_command():
    options = _options(cli)
    flags = {name for name in SETTING_NAMES.values() if name.startswith("-")}
    assert flags and flags <= options, sorted(flags - options)


@pytest.mark.parametrize("changes, field, words", [
    ({"micro_batch": 0}, "micro_batch", "--micro-batch (--batch-size) must be 1 or more"),
    ({"accumulation": 0}, "accumulation", "--gradient-accumulation must be 1 or more"),
    ({"split": "rows"}, "split", "--split is pipeline or shard"),
    ({"model": "bert-large", "mode": "real"}, "mode", "--model bert-large trains in phantom"),
])
def test_a_bad_setting_is_refused_with_its_field_and_its_option(changes, field, words):
    with pytest.raises(SettingError) as refused:
        plan_for(TrainConfig(**changes))
    assert refused.value.field == field and words in str(refused.value)
    again = pickle.loads(pickle.dumps(refused.value))  # across processes (Ray) whole
    assert type(again) is SettingError and again.field == field and str(again) == str(
        refused.value)


def test_a_front_end_of_its_own_words_a_setting_its_own_way():
    with pytest.raises(UserError, match="the mode is phantom or real, not 'x'"):
        Mode.parse("x", option="the mode")


def test_the_cli_prints_the_pure_layers_refusal_in_one_line():
    run = subprocess.run([sys.executable, "-m", "cluster.cli.main", "train", "--mode",
                          "phantom", "--steps", "1", "--gradient-accumulation", "0"],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert run.stderr.strip().splitlines()[-1] == (
        "error: --gradient-accumulation must be 1 or more")


def test_a_shape_refused_by_the_pure_layer_carries_its_field_and_reads_as_its_option():
    with pytest.raises(SettingError) as refused:
        sample_shape("3,x")
    assert refused.value.field == "sample_shape"
    assert str(refused.value) == ("--sample-shape takes up to 8 sizes separated by commas, "
                                  "such as 3,32,32 (one sample, no batch dimension), not '3,x'")


def test_what_a_report_assumed_is_keyed_by_field_and_each_field_has_its_option():
    assert set(VALUES) <= set(SETTING_NAMES) and set(RULES) <= set(SETTING_NAMES)
    assert default_rule("topology").startswith("DSS 8440 servers (--servers) for the MLP")
    assert default_rule("no_such_field") == default_rule(None) == "the command's default"
