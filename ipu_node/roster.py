"""The devices of a launched POD as the POD last heard them: their actors, link addresses,
incarnations, restarts, which are down, and their counters across restarts.

Ray restarts a device that dies; the new incarnation is empty and listens on a new port.
Whenever the POD hears from its devices (:meth:`Roster.ask` and :meth:`Roster.rejoin`), it
notices new incarnations and wires them in again, so collectives find them; counters carry
on across restarts.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any, TypedDict, cast

import numpy as np

from cluster.errors import UserError
from cluster.model.link_faults import LinkFault
from ipu_node.answers import DeviceInfo, DeviceStats, IpuCounters, add_counters, zero_counters
from ipu_node.calls import settle, succeeded, wait_all
from ipu_node.device_errors import DeviceError, DeviceRestarting, NodeLost
from ipu_node.device_handle import DeviceHandle
from ipu_node.device_spec import DeviceSpec
from ipu_node.known_facts import KnownFacts
from ipu_node.node_loss import loss_notes
from ipu_node.node_placement import peer_addresses
from ipu_node.ownership import Ownership

REWIRE_DEADLINE_SECONDS = 30.0
RESTART_POLL_SECONDS = 0.2


def incarnation(answer: DeviceInfo | DeviceStats) -> str:
    """Which process of a device answered (``info`` or ``stats``): pid and link address."""
    return f"{answer['pid']}@{answer['link_address']}"


class _Counted(TypedDict):
    """What earlier incarnations of a device counted: bytes per directed link, and the
    counters per IPU."""

    link_bytes: np.ndarray | float
    counters: dict[int, IpuCounters]


@dataclass
class Roster:
    """Every device of the POD: ``specs[i]`` is emulated by ``actors[i]``."""

    specs: list[DeviceSpec]
    actors: list[DeviceHandle]
    names: list[str]
    addresses: list[str]  # link addresses for peers on the device's own node
    ownership: Ownership
    incarnations: list[str]
    restarts: list[int]
    down: dict[int, str] = field(default_factory=dict)  # device -> why it is known down
    killed: dict[int, str] = field(default_factory=dict)  # device -> incarnation killed on purpose
    nodes: list[str | None] = field(default_factory=list)  # each device's Ray node id
    node_ips: list[str | None] = field(default_factory=list)
    tcp_addresses: list[str] = field(default_factory=list)  # for peers on other nodes
    facts: KnownFacts = field(default_factory=KnownFacts)  # memory and tensors as last said
    lock: threading.RLock = field(default_factory=threading.RLock)
    _rewire_lock: threading.Lock = field(default_factory=threading.Lock)
    _last_stats: dict[int, DeviceStats] = field(default_factory=dict)  # as last heard
    _offsets: dict[int, _Counted] = field(default_factory=dict)  # what earlier lives counted

    @classmethod
    def wired(cls, specs: list[DeviceSpec], actors: list[DeviceHandle], infos: list[DeviceInfo],
              ownership: Ownership) -> Roster:
        """The roster of freshly launched devices (``infos``: their ``info`` answers)."""
        return cls(specs, actors, [i["name"] for i in infos],
                   [i.get("link_address", i["address"]) for i in infos], ownership,
                   [incarnation(i) for i in infos], [0] * len(specs),
                   nodes=[i.get("node_id") for i in infos],
                   node_ips=[i.get("node_ip") for i in infos],
                   tcp_addresses=[i["address"] for i in infos])

    def peer_addresses(self) -> list[list[str]]:
        """For each device, the address it reaches every peer at (TCP across nodes)."""
        with self.lock:
            if len(self.nodes) != len(self.addresses):  # built without node information
                return [list(self.addresses) for _ in self.addresses]
            return peer_addresses(self.nodes, self.tcp_addresses, self.addresses)

    def ask(self, method: str, deadline_seconds: float, indices: list[int] | None = None,
            *args: Any) -> dict[int, Any]:
        """``method(*args)`` of devices ``indices`` (all by default), by device index,
        waiting out restarts up to ``deadline_seconds``, unless the Ray node of a device
        that is silent or restarting is gone (:class:`NodeLost`, at once)."""
        chosen = list(range(len(self.actors))) if indices is None else list(indices)
        limit = time.monotonic() + deadline_seconds
        restarting: DeviceRestarting | None = None
        while True:
            try:
                answers = wait_all([getattr(self.actors[i], method).remote(*args)
                                    for i in chosen], [self.specs[i] for i in chosen],
                                   max(0.1, limit - time.monotonic()), method,
                                   lambda silent: self.lost_nodes([chosen[i] for i in silent]))
                said = dict(zip(chosen, answers))
                stale = self.from_killed(said)
                if not stale:
                    return said
                raise DeviceRestarting(f"{self.specs[stale[0]].name} was killed and Ray is "
                                       "restarting it")
            except DeviceRestarting as error:
                restarting = error
                note = self.lost_nodes(chosen)
                if note:
                    raise NodeLost(f"{note}: {error}") from None
                if time.monotonic() >= limit:
                    raise
                time.sleep(RESTART_POLL_SECONDS)
            except NodeLost:
                raise
            except DeviceError:
                if restarting is None:
                    raise
                raise DeviceRestarting(f"{restarting} (still not back after {deadline_seconds:g} s)"
                                       ) from None

    def lost_nodes(self, indices: list[int]) -> str:
        """The line naming each lost Ray node among those of devices ``indices`` and every
        device on it (:func:`~ipu_node.node_loss.loss_notes`); empty when none is lost,
        and on a single node (where Ray is not asked)."""
        with self.lock:
            nodes, node_ips = list(self.nodes), list(self.node_ips)
        if len(nodes) != len(self.specs):
            return ""
        return "; ".join(sorted(set(loss_notes(self.specs, nodes, node_ips, indices).values())))

    def rejoin(self, answers: dict[int, Any], faults: dict[int, LinkFault], version: int,
               deadline_seconds: float = REWIRE_DEADLINE_SECONDS) -> None:
        """Wire in the devices whose answers (``info`` or ``stats``) show a new incarnation
        (a restart), telling every device the new addresses and the link faults in force.
        Returns once they all know, so a collective that starts after it finds its peers;
        callers meanwhile wait on the rewire lock."""
        with self._rewire_lock:
            with self.lock:
                fresh = {i: incarnation(a) for i, a in answers.items()
                         if a is not None and incarnation(a) != self.incarnations[i]}
                if not fresh:
                    return
                self.facts.forget(list(fresh))  # a new incarnation starts empty
                for index, new in fresh.items():
                    self.incarnations[index] = new
                    self._moved(index, answers[index])
                    self.restarts[index] += 1
                    self._fold_counters(index)
                    self.down.pop(index, None)
                    self.killed.pop(index, None)
            addresses = self.peer_addresses()
            refs = [actor.connect.remote(self.names, addresses[i], i, self.ownership, faults,
                                         version) for i, actor in enumerate(self.actors)]
            # A device that is down now gets wired when it comes back (its own restart).
            ready = set(settle(refs, deadline_seconds))
            for index in fresh:
                if refs[index] not in ready or not succeeded(refs[index]):
                    with self.lock:  # not wired: try again next time
                        self.incarnations[index] = "unwired"
                        self.restarts[index] -= 1

    def _moved(self, index: int, answer: DeviceInfo | DeviceStats) -> None:
        """A new incarnation's addresses and node (it may have restarted on another)."""
        self.addresses[index] = answer["link_address"]
        if len(self.nodes) == len(self.addresses):
            self.nodes[index] = answer.get("node_id")
            self.node_ips[index] = answer.get("node_ip")
            self.tcp_addresses[index] = answer["address"]

    def _fold_counters(self, index: int) -> None:
        """A restarted device counts from 0 again: keep what its last incarnation had
        counted (as last heard), so the POD's counters never go backwards."""
        last = self._last_stats.pop(index, None)
        if last is None:
            return
        offset = self._offsets.setdefault(index, _Counted(link_bytes=0.0, counters={}))
        offset["link_bytes"] = offset["link_bytes"] + last["link_bytes"]
        for ipu, counts in last["counters"].items():
            kept = offset["counters"].get(ipu, zero_counters())
            offset["counters"][ipu] = add_counters(kept, counts)

    def with_offsets(self, index: int, stats: DeviceStats) -> DeviceStats:
        """``stats`` of device ``index`` plus what its earlier incarnations counted."""
        with self.lock:
            self._last_stats[index] = stats
            offset = self._offsets.get(index)
        if offset is None:
            return stats
        adjusted = stats.copy()
        adjusted["link_bytes"] = stats["link_bytes"] + offset["link_bytes"]
        adjusted["counters"] = {
            ipu: add_counters(counts, offset["counters"].get(ipu, zero_counters()))
            for ipu, counts in stats["counters"].items()}
        return adjusted

    def note_killed(self, index: int, why: str) -> None:
        """Device ``index``'s process was just killed on purpose: it is down, and an answer
        from that process still on its way (``ray.kill`` is asynchronous: a call made at
        once may still reach it) is not taken for the device being back."""
        with self.lock:
            self.killed[index] = self.incarnations[index]
        self.note_down(index, why)

    def from_killed(self, answers: dict[int, Any]) -> list[int]:
        """The devices among ``answers`` (``info`` or ``stats``, by device) whose answer
        came from a process :meth:`note_killed` marked."""
        with self.lock:
            return [i for i, answer in answers.items() if i in self.killed
                    and isinstance(answer, dict) and "pid" in answer
                    and incarnation(cast(DeviceInfo, answer)) == self.killed[i]]

    def note_down(self, index: int, why: str) -> None:
        """Remember that device ``index`` is down (until it answers again)."""
        with self.lock:
            self.down[index] = why
        self.facts.forget([index])

    def card_index(self, name: str, topology_name: str) -> int:
        """The device index of card or machine ``name``, or a UserError listing them."""
        cards = [i for i, spec in enumerate(self.specs) if spec.ipus]
        for index in cards:
            if self.specs[index].name == name:
                return index
        shown = ", ".join(self.specs[i].name for i in cards[:8])
        more = f" … ({len(cards)} in all)" if len(cards) > 8 else ""
        raise UserError(f"no card or machine named {name!r} on {topology_name}: "
                        f"use one of {shown}{more} (`ipupod devices` lists them)")
