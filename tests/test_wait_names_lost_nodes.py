"""A wait on devices (:func:`ipu_node.calls.wait_all`) asks whether the nodes of those still
silent are gone, and names a lost node at once instead of waiting out its deadline
(issue 37: a collective started after a node was lost took its whole 10 s deadline). The
cluster of several nodes is tests/test_ray_multinode.py's; here one node's devices, real
actors on the session's Ray, one of them silent."""

import threading

import pytest
import ray

from cluster.model.spec import load_topology
from ipu_node.calls import wait_all
from ipu_node.device_errors import NodeLost
from ipu_node.device_spec import device_specs

NOTE = "node 3f2a9c1e (10.0.0.7) lost: cards s1.card0..s1.card7; host s1.host"
DEADLINE_SECONDS = 120.0  # far longer than the test takes when the node is asked


@ray.remote(num_cpus=0)
class Device:
    def answer(self, silent: bool) -> str:
        if silent:
            threading.Event().wait()  # never answers: a device on a node that is gone
        return "here"


@pytest.fixture
def devices(ray_session):
    actors = [Device.remote(), Device.remote()]
    yield actors
    for actor in actors:
        ray.kill(actor)


def test_a_silent_device_whose_node_is_lost_is_named_before_the_deadline(devices):
    specs = device_specs(load_topology("dss8440x2", "seed"))[:2]
    asked: list[list[int]] = []

    def lost(silent: list[int]) -> str:
        asked.append(silent)
        return NOTE if silent == [1] else ""

    answered = devices[0].answer.remote(False)
    ray.wait([answered])  # answered before the wait starts, however loaded the machine
    with pytest.raises(NodeLost) as named:
        wait_all([answered, devices[1].answer.remote(True)], specs, DEADLINE_SECONDS, "stats",
                 lost)
    assert str(named.value) == f"{NOTE}: stats: no answer from {specs[1].name}"
    assert asked and all(silent == [1] for silent in asked)  # the answered one is not asked


def test_without_a_lost_node_the_answers_come_back(devices):
    specs = device_specs(load_topology("dss8440x2", "seed"))[:2]
    answers = wait_all([device.answer.remote(False) for device in devices], specs,
                       DEADLINE_SECONDS, "stats", lambda silent: "")
    assert answers == ["here", "here"]
