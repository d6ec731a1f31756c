"""A training step's parts have one definition: the step's sum, its record, the tables and
the commands all read it."""

import dataclasses

import pytest

from cluster.training.records import StepRecord, step_record
from cluster.training.step_parts import STEP_PARTS, StepTime, parts_spent


def _each_part_a_power_of_two() -> StepTime:
    return StepTime(**{part.key: 2.0 ** i for i, part in enumerate(STEP_PARTS)},
                    stage_compute_seconds=(1.0, 2.0))


def test_the_step_is_the_sum_of_every_part_and_nothing_else():
    step = _each_part_a_power_of_two()
    assert step.sim_seconds == 2.0 ** len(STEP_PARTS) - 1  # every part counted once
    assert list(step.parts()) == [part.key for part in STEP_PARTS]


def test_every_seconds_field_of_a_step_but_the_stages_list_is_a_part():
    keys = {f.name for f in dataclasses.fields(StepTime)} - {"stage_compute_seconds"}
    assert keys == {part.key for part in STEP_PARTS}
    assert len({part.title for part in STEP_PARTS}) == len(STEP_PARTS)
    assert len({part.label for part in STEP_PARTS}) == len(STEP_PARTS)


def test_a_step_record_has_each_part_and_its_type_says_so():
    record = step_record(3, None, _each_part_a_power_of_two())
    assert set(StepRecord.__annotations__) == set(record)
    assert [key for key in record if key.endswith("_seconds")][1:-1] == [
        part.key for part in STEP_PARTS]  # after sim_seconds, before the stages' list
    assert record["sim_seconds"] == pytest.approx(sum(part.seconds(record)
                                                      for part in STEP_PARTS))


def test_a_table_shows_the_parts_every_step_has_and_those_some_row_spends_time_in():
    rows = [{"compute_seconds": 1.0}, {"compute_seconds": 1.0, "weight_gather_seconds": 0.5}]
    shown = [part.key for part in parts_spent(rows)]
    assert shown == ["compute_seconds", "host_io_seconds", "local_allreduce_seconds",
                     "global_allreduce_seconds", "weight_gather_seconds"]
