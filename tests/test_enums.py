"""The choices are Enums in the code and plain text everywhere else: they compare equal to
their names, print as them, and go to JSON as them."""

import json

import pytest

from cluster.errors import UserError
from cluster.model.hardware import DeviceKind
from gcl.collectives import COLLECTIVES, CollectiveName, ReduceOp, check_op
from gcl.modes import Mode
from ipu_node.device_health import HealthState


@pytest.mark.parametrize("member", [*CollectiveName, *ReduceOp, *Mode, *HealthState,
                                    *DeviceKind])
def test_a_choice_prints_and_serialises_as_its_name(member):
    assert member == member.value
    assert str(member) == f"{member}" == member.value
    assert json.loads(json.dumps({"choice": member})) == {"choice": member.value}


def test_every_collective_is_named_by_the_enum():
    assert [c.name for c in COLLECTIVES.values()] == list(CollectiveName)


def test_a_reduction_op_is_checked_into_the_enum():
    assert check_op("mean") is ReduceOp.MEAN
    with pytest.raises(UserError, match="unknown reduction op 'avg': use one of sum, mean"):
        check_op("avg")


def test_an_unknown_mode_says_which_there_are():
    assert Mode.parse("real") is Mode.REAL
    with pytest.raises(UserError, match="--mode is phantom or real, not 'fast'"):
        Mode.parse("fast")
