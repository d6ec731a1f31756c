"""How each device of a POD is doing: asked at once, with a short deadline.

States: ``healthy``; ``restarting`` (Ray is bringing it back); ``unreachable`` (no answer
in time: hung, or still starting); ``dead`` (Ray gave up on it). Restarted devices that
answer are wired in again on the way.
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.model.link_faults import LinkFault
from ipu_node.answers import HealthState
from ipu_node.calls import poll
from ipu_node.node_loss import loss_notes
from ipu_node.roster import Roster

HEALTH_DEADLINE_SECONDS = 2.0


@dataclass(frozen=True)
class DeviceHealth:
    """One device as the POD last heard it."""

    name: str
    ipus: tuple[int, ...]
    state: HealthState
    restarts: int
    detail: str = ""
    lost_node: str = ""  # "node 3f2a9c1e (10.0.0.7) lost: cards ..." when its node is gone


def check_health(roster: Roster, faults: dict[int, LinkFault], fault_version: int,
                 deadline_seconds: float = HEALTH_DEADLINE_SECONDS) -> list[DeviceHealth]:
    """Ask every device of ``roster`` at once; wire restarted ones in again (with the link
    faults in force, ``fault_version``)."""
    polled = poll([actor.info.remote() for actor in roster.actors], deadline_seconds)
    stale = set(roster.from_killed({i: answer for i, (answer, _) in enumerate(polled)}))
    polled = [(None, HealthState.RESTARTING) if i in stale else said
              for i, said in enumerate(polled)]
    roster.rejoin({i: answer for i, (answer, _) in enumerate(polled)}, faults, fault_version)
    states = [state for _, state in polled]
    with roster.lock:
        for index, state in enumerate(states):
            if state == HealthState.HEALTHY and roster.incarnations[index] != "unwired":
                roster.down.pop(index, None)
            else:
                roster.down[index] = state.value
        nodes, node_ips = list(roster.nodes), list(roster.node_ips)
    lost = (loss_notes(roster.specs, nodes, node_ips,
                       [i for i, state in enumerate(states) if state != HealthState.HEALTHY])
            if len(nodes) == len(states) else {})
    with roster.lock:
        return [DeviceHealth(spec.name, spec.ipus, state, roster.restarts[i],
                             "" if state == HealthState.HEALTHY else roster.down.get(i, ""),
                             lost.get(i, ""))
                for i, (spec, state) in enumerate(zip(roster.specs, states))]
