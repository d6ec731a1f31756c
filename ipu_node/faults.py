"""Faults on a launched POD, and its recovery: kill a card, degrade, cut or heal a link.

- **Cards.** :meth:`PodFaults.kill_card` kills a card's (or machine's) actor the way a
  crash would; Ray restarts it (the launcher's ``max_restarts``). The new incarnation has
  empty memory and a new link port; the POD notices it the next time it hears from its
  devices and wires it in again (every device reopens its links to it). A collective in
  flight fails fast with an error naming the card and its IPUs (:mod:`ipu_node.executor`).
- **Links.** Link faults are state of the POD, not of a collective: the POD's topology
  becomes :func:`cluster.model.link_faults.with_faults` of the launched one, so the cost model, the
  planner and each device's link counting see them from the next collective on. A
  degraded link is slower in simulated time exactly as the cost model says; a cut link
  reroutes inside an IPU-Link domain, and elsewhere makes the collectives that need it
  fail with :class:`cluster.model.link_faults.LinkDown` naming it, before any byte moves.
- **Health.** :meth:`PodFaults.health` asks every device (short deadline) and says per
  device: ``healthy``, ``restarting`` (Ray is bringing it back), ``unreachable`` (no
  answer in time: hung, or still starting) or ``dead`` (Ray gave up on it).

Every injected fault and every restart is counted (``fault_counts``, ``restarts``); the
metrics endpoint reports them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from cluster.errors import UserError
from cluster.model.faulted import with_faults
from cluster.model.link_faults import LinkFault, find_link, link_name
from ipu_node.errors import DeviceError, DeviceRestarting

HEALTH_DEADLINE_S = 2.0
REWIRE_DEADLINE_S = 30.0


def incarnation(answer: dict) -> str:
    """Which process of a device answered (``info`` or ``stats``): pid and link address."""
    return f"{answer['pid']}@{answer['link_address']}"


@dataclass(frozen=True)
class DeviceHealth:
    """One device as the POD last heard it: ``state`` is healthy, restarting, unreachable
    or dead."""

    name: str
    ipus: tuple[int, ...]
    state: str
    restarts: int
    detail: str = ""


class PodFaults:
    """Fault injection and recovery for :class:`ipu_node.pod.EmulatedPod` (a mixin: it
    uses the POD's actors, specs, addresses, ownership and state lock)."""

    # -- hearing from devices, wiring restarted ones in ----------------------------------
    def _ask(self, method: str, deadline_s: float, indices: list[int] | None = None,
             *args) -> dict[int, object]:
        """``method(*args)`` of devices ``indices`` (all by default), by device index,
        waiting out restarts up to ``deadline_s``."""
        import ray

        from ipu_node.pod import _get

        chosen = list(range(len(self.actors))) if indices is None else list(indices)
        limit = time.monotonic() + deadline_s
        restarting: DeviceRestarting | None = None
        while True:
            try:
                answers = _get(ray, [getattr(self.actors[i], method).remote(*args)
                                     for i in chosen],
                               max(0.1, limit - time.monotonic()),
                               [self.specs[i] for i in chosen], method)
                return dict(zip(chosen, answers))
            except DeviceRestarting as error:
                restarting = error
                if time.monotonic() >= limit:
                    raise
                time.sleep(0.2)
            except DeviceError:
                if restarting is None:
                    raise
                raise DeviceRestarting(f"{restarting} (still not back after {deadline_s:g} s)"
                                       ) from None

    def _rejoin(self, answers: dict[int, dict | None],
                deadline_s: float = REWIRE_DEADLINE_S) -> None:
        """Wire in the devices whose answers (``info`` or ``stats``) show a new incarnation
        (a restart). Returns once every device has the new addresses, so a collective that
        starts after it finds its peers; callers meanwhile wait on the rewire lock."""
        import ray

        with self._rewire_lock:
            with self._state_lock:
                fresh = {i: incarnation(a) for i, a in answers.items()
                         if a is not None and incarnation(a) != self.incarnations[i]}
                if not fresh:
                    return
                for index, new in fresh.items():
                    self.incarnations[index] = new
                    self.addresses[index] = answers[index]["link_address"]
                    self.restarts[index] += 1
                    self._fold_counters(index)
                    self.down.pop(index, None)
                addresses, faults = list(self.addresses), dict(self.link_faults)
                version = self.fault_version
            refs = [actor.connect.remote(self.names, addresses, i, self.ownership, faults,
                                         version) for i, actor in enumerate(self.actors)]
            # A device that is down now gets wired when it comes back (its own restart).
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=deadline_s)
            for index in fresh:
                try:
                    if refs[index] not in ready:
                        raise TimeoutError
                    ray.get(refs[index])
                except Exception:
                    with self._state_lock:
                        self.incarnations[index] = "unwired"
                        self.restarts[index] -= 1

    def _fold_counters(self, index: int) -> None:
        """A restarted device counts from 0 again: keep what its last incarnation had
        counted (as last heard), so the POD's counters never go backwards."""
        last = self._last_stats.get(index)
        if last is None:
            return
        offset = self._offsets.setdefault(index, {"link_bytes": 0.0, "counters": {}})
        offset["link_bytes"] = offset["link_bytes"] + last["link_bytes"]
        for ipu, counts in last["counters"].items():
            kept = offset["counters"].setdefault(ipu, {})
            for name, value in counts.items():
                kept[name] = kept.get(name, 0) + value
        self._last_stats.pop(index)

    def _with_offsets(self, index: int, stats: dict) -> dict:
        """``stats`` of device ``index`` plus what its earlier incarnations counted."""
        self._last_stats[index] = stats
        offset = self._offsets.get(index)
        if offset is None:
            return stats
        adjusted = dict(stats, link_bytes=stats["link_bytes"] + offset["link_bytes"])
        adjusted["counters"] = {ipu: {name: value + offset["counters"].get(ipu, {}).get(name, 0)
                                      for name, value in counts.items()}
                                for ipu, counts in stats["counters"].items()}
        return adjusted

    def note_down(self, index: int, why: str) -> None:
        """Remember that device ``index`` is down (until it answers again)."""
        with self._state_lock:
            self.down[index] = why

    def health(self, deadline_s: float = HEALTH_DEADLINE_S) -> list[DeviceHealth]:
        """Ask every device at once (see the module docstring for the states). Restarted
        devices are wired in again."""
        import ray

        refs = [actor.info.remote() for actor in self.actors]
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=deadline_s)
        ready = set(ready)
        answers, states = {}, []
        for index, ref in enumerate(refs):
            answer, state = None, "unreachable"
            if ref in ready:
                try:
                    answer, state = ray.get(ref), "healthy"
                except ray.exceptions.ActorDiedError:
                    state = "dead"
                except ray.exceptions.RayActorError:
                    state = "restarting"
            answers[index] = answer
            states.append(state)
        self._rejoin(answers)
        with self._state_lock:
            for index, state in enumerate(states):
                if state == "healthy" and self.incarnations[index] != "unwired":
                    self.down.pop(index, None)
                else:
                    self.down[index] = state
            return [DeviceHealth(spec.name, spec.ipus, state, self.restarts[i],
                                 "" if state == "healthy" else self.down.get(i, ""))
                    for i, (spec, state) in enumerate(zip(self.specs, states))]

    # -- cards ------------------------------------------------------------------------
    def card_index(self, name: str) -> int:
        """The device index of card or machine ``name``, or a UserError listing them."""
        cards = [i for i, spec in enumerate(self.specs) if spec.ipus]
        for index in cards:
            if self.specs[index].name == name:
                return index
        shown = ", ".join(self.specs[i].name for i in cards[:8])
        more = f" … ({len(cards)} in all)" if len(cards) > 8 else ""
        raise UserError(f"no card or machine named {name!r} on {self.base_topology.name}: "
                        f"use one of {shown}{more} (`ipupod devices` lists them)")

    def kill_card(self, name: str) -> DeviceHealth:
        """Kill card ``name``'s actor as a crash would; Ray restarts it empty."""
        import ray

        from ipu_node.pod import describe

        index = self.card_index(name)
        ray.kill(self.actors[index], no_restart=False)
        with self._state_lock:
            self.down[index] = "killed by fault injection"
            self._count("card_killed")
        spec = self.specs[index]
        if self.max_restarts == 0:
            return DeviceHealth(spec.name, spec.ipus, "dead", self.restarts[index],
                                f"{describe(spec)} killed: max_restarts is 0, so it stays dead")
        return DeviceHealth(spec.name, spec.ipus, "restarting", self.restarts[index],
                            f"{describe(spec)} killed: Ray is restarting it")

    # -- links ------------------------------------------------------------------------
    def degrade_link(self, link: str | int, bandwidth_factor: float = 1.0,
                     added_latency_s: float = 0.0) -> LinkFault:
        """Slow link ``link`` (``"A--B"`` or its index) down: its bandwidth times
        ``bandwidth_factor``, its latency plus ``added_latency_s`` (both directions)."""
        fault = LinkFault(bandwidth_factor=bandwidth_factor, added_latency_s=added_latency_s)
        if fault == LinkFault():
            raise UserError("that degrades nothing: give a bandwidth factor below 1 or an "
                            "added latency above 0 (to undo faults, heal the link)")
        self._set_link_fault(self._link(link), fault, "link_degraded")
        return fault

    def cut_link(self, link: str | int) -> LinkFault:
        """Cut link ``link``: routes inside an IPU-Link domain go round it; collectives
        whose route has no other way fail naming it."""
        fault = LinkFault(cut=True)
        self._set_link_fault(self._link(link), fault, "link_cut")
        return fault

    def heal(self, link: str | int | None = None) -> list[str]:
        """Undo the faults of ``link`` (every link's when None); return the healed links."""
        with self._state_lock:
            if link is None:
                healed = sorted(self.link_faults)
            else:
                index = self._link(link)
                if index not in self.link_faults:
                    raise UserError(f"link {link_name(self.base_topology, index)} has no "
                                    "fault to heal (`ipupod fault list` shows the faults)")
                healed = [index]
            refs = self._apply({i: f for i, f in self.link_faults.items() if i not in healed})
        self._settle(refs)
        return [link_name(self.base_topology, i) for i in healed]

    def faults(self) -> dict[str, LinkFault]:
        """The link faults in force, by link name."""
        with self._state_lock:
            return {link_name(self.base_topology, i): f for i, f in sorted(self.link_faults.items())}

    def _link(self, link: str | int) -> int:
        return find_link(self.base_topology, str(link))

    def _set_link_fault(self, index: int, fault: LinkFault, kind: str) -> None:
        with self._state_lock:
            refs = self._apply({**self.link_faults, index: fault})
            self._count(kind)
        self._settle(refs)

    def _apply(self, faults: dict[int, LinkFault]) -> list:
        """Make ``faults`` the POD's link faults (call with the state lock held): its
        topology now, every device's by the returned calls (:meth:`_settle` them after
        the lock is released). Devices ignore a fault set older than one they have."""
        self.topology = with_faults(self.base_topology, faults)  # validates before storing
        self.link_faults = faults
        self.fault_version += 1
        return [actor.set_link_faults.remote(dict(faults), self.fault_version)
                for actor in self.actors]

    @staticmethod
    def _settle(refs: list) -> None:
        """Wait (bounded) for the devices to take new link faults; a device that is down
        gets them when it is wired in again."""
        import ray

        ray.wait(refs, num_returns=len(refs), timeout=REWIRE_DEADLINE_S)

    def _count(self, kind: str) -> None:
        self.fault_counts[kind] = self.fault_counts.get(kind, 0) + 1
