"""Faults on a launched POD: kill a card, degrade, cut or heal a link.

- **Cards.** :meth:`FaultInjector.kill_card` kills a card's (or machine's) actor the way a
  crash would; Ray restarts it (the launcher's ``max_restarts``). The new incarnation has
  empty memory and a new link port; the POD notices it the next time it hears from its
  devices and wires it in again (:mod:`ipu_node.roster`). A collective in flight fails
  fast with an error naming the card and its IPUs (:mod:`ipu_node.executor`).
- **Links.** Link faults are state of the POD, not of a collective: the POD's topology
  becomes :func:`cluster.model.faulted.with_faults` of the launched one, so the cost model,
  the planner and each device's link counting see them from the next collective on. A
  degraded link is slower in simulated time exactly as the cost model says; a cut link
  reroutes inside an IPU-Link domain, and elsewhere makes the collectives that need it
  fail with :class:`cluster.model.link_faults.LinkDown` naming it, before any byte moves.

Every injected fault is counted (``counts``); the metrics endpoint reports them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from cluster.errors import UserError
from cluster.model.faulted import with_faults
from cluster.model.link_faults import LinkFault, find_link, link_name
from cluster.model.topology import Topology
from ipu_node.calls import settle
from ipu_node.device_health import DeviceHealth, HealthState
from ipu_node.device_process import kill_device, process_mates
from ipu_node.device_spec import describe
from ipu_node.roster import REWIRE_DEADLINE_SECONDS, Roster


@dataclass
class FaultInjector:
    """The link faults in force on a POD (``topology`` is the launched ``base_topology``
    with them applied), and card kills. ``version`` grows with every change of the fault
    set; devices ignore an older set than one they have."""

    roster: Roster
    base_topology: Topology
    max_restarts: int
    topology: Topology = field(init=False)
    link_faults: dict[int, LinkFault] = field(default_factory=dict)
    version: int = 0
    counts: dict[str, int] = field(default_factory=dict)  # by kind: card_killed, link_cut...
    _lock: threading.RLock = field(default_factory=threading.RLock)

    def __post_init__(self) -> None:
        self.topology = self.base_topology

    def current(self) -> tuple[dict[int, LinkFault], int]:
        """The link faults in force and their version."""
        with self._lock:
            return dict(self.link_faults), self.version

    # -- cards ------------------------------------------------------------------------
    def kill_card(self, name: str) -> DeviceHealth:
        """Kill card ``name``'s actor as a crash would; Ray restarts it empty. Devices
        that share its process (``devices_per_process``) go down and come back with it."""
        index = self.roster.card_index(name, self.base_topology.name)
        mates = [i for i in process_mates(self.roster.actors, index) if i != index]
        kill_device(self.roster.actors[index], no_restart=False)
        self.roster.note_killed(index, "killed by fault injection")
        for mate in mates:
            self.roster.note_killed(mate, f"its process died with {name}, killed by fault "
                                          "injection")
        self._count("card_killed")
        spec, restarts = self.roster.specs[index], self.roster.restarts[index]
        mate_names = ", ".join(self.roster.specs[i].name for i in mates)
        with_mates = f" with its process-mates {mate_names}" if mates else ""
        if self.max_restarts == 0:
            return DeviceHealth(spec.name, spec.ipus, HealthState.DEAD, restarts,
                                f"{describe(spec)} killed{with_mates}: max_restarts is 0, so "
                                "it stays dead")
        return DeviceHealth(spec.name, spec.ipus, HealthState.RESTARTING, restarts,
                            f"{describe(spec)} killed{with_mates}: Ray is restarting it")

    # -- links ------------------------------------------------------------------------
    def degrade_link(self, link: str | int, bandwidth_factor: float = 1.0,
                     added_latency_seconds: float = 0.0) -> LinkFault:
        """Slow link ``link`` (``"A--B"`` or its index) down: its bandwidth times
        ``bandwidth_factor``, its latency plus ``added_latency_seconds`` (both directions)."""
        fault = LinkFault(bandwidth_factor=bandwidth_factor,
                          added_latency_seconds=added_latency_seconds)
        if fault == LinkFault():
            raise UserError("that degrades nothing: give a bandwidth factor below 1 or an "
                            "added latency above 0 (to undo faults, heal the link)")
        self._set(self._link(link), fault, "link_degraded")
        return fault

    def cut_link(self, link: str | int) -> LinkFault:
        """Cut link ``link``: routes inside an IPU-Link domain go round it; collectives
        whose route has no other way fail naming it."""
        fault = LinkFault(cut=True)
        self._set(self._link(link), fault, "link_cut")
        return fault

    def heal(self, link: str | int | None = None) -> list[str]:
        """Undo the faults of ``link`` (every link's when None); return the healed links."""
        with self._lock:
            if link is None:
                healed = sorted(self.link_faults)
            else:
                index = self._link(link)
                if index not in self.link_faults:
                    raise UserError(f"link {link_name(self.base_topology, index)} has no "
                                    "fault to heal (`ipupod fault list` shows the faults)")
                healed = [index]
            refs = self._apply({i: f for i, f in self.link_faults.items() if i not in healed})
        settle(refs, REWIRE_DEADLINE_SECONDS)
        return [link_name(self.base_topology, i) for i in healed]

    def by_name(self) -> dict[str, LinkFault]:
        """The link faults in force, by link name."""
        with self._lock:
            return {link_name(self.base_topology, i): f
                    for i, f in sorted(self.link_faults.items())}

    def _link(self, link: str | int) -> int:
        return find_link(self.base_topology, str(link))

    def _set(self, index: int, fault: LinkFault, kind: str) -> None:
        with self._lock:
            refs = self._apply({**self.link_faults, index: fault})
            self._count(kind)
        settle(refs, REWIRE_DEADLINE_SECONDS)

    def _apply(self, faults: dict[int, LinkFault]) -> list:
        """Make ``faults`` the POD's link faults (call with the lock held): its topology
        now, every device's by the returned calls (settle them after the lock is
        released); a device that is down gets them when it is wired in again."""
        self.topology = with_faults(self.base_topology, faults)  # validates before storing
        self.link_faults = faults
        self.version += 1
        return [actor.set_link_faults.remote(dict(faults), self.version)
                for actor in self.roster.actors]

    def _count(self, kind: str) -> None:
        with self._lock:
            self.counts[kind] = self.counts.get(kind, 0) + 1
