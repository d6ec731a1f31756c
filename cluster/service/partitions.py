"""V-IPU partitions: named sets of IPUs that one application owns, placed on a topology.

The rules of Graphcore's V-IPU controller (``vipu create partition NAME --size N``, ``vipu
list partitions``, ``vipu remove partition NAME``) as pure Python, so that the control
service (gRPC) and the tests share one implementation:

- A name is 1 to 64 characters from ASCII letters, digits, ``-``, ``_`` and ``.``, starting
  with a letter or digit; two partitions never share a name.
- The size is a power of two from 1 to the topology's IPU count. A partition is split into
  ``gcds`` graph compile domains (GCDs): ``gcds`` divides the size and each GCD has a
  power-of-two number of IPUs.
- Partitions never share an IPU.
- Placement is V-IPU's: a contiguous, aligned block of the IPU-Link topology. The IPUs of
  each IPU-Link domain are laid out in *block order* (its units, cards or machines, in
  order along the ladder; each unit's IPUs in order), and a partition no larger than a
  domain takes ``size`` consecutive IPUs of that order starting at a multiple of ``size``:
  on a DSS 8440, 2 IPUs are one C2 card, 4 two adjacent cards, 8 four, 16 the server; on an
  IPU-M2000 POD, 4 IPUs are one IPU-Machine, then adjacent machines up to the rack. A
  larger partition takes consecutive whole free domains (servers, racks), aligned. Of the
  blocks that fit, the one whose largest enclosing free aligned block is smallest wins
  (then the first), so large blocks stay whole for large partitions (best fit). When no
  block fits the request fails, naming the largest block free: a partition is never
  scattered over the fabric.

A partition's ``ipus`` are in ring order (the topology's ring order kept to its IPUs): on
the presets every hop of that ring inside a domain is one IPU-Link. Its GCDs are aligned
sub-blocks of its block order (a GCD of 2 on a DSS 8440 is a card).
Every mistake raises :class:`~cluster.service.service_error.ServiceError`, whose ``code`` is
the status the service answers with. :class:`PartitionTable` holds a lock in every method:
the service is multi-threaded.
"""

from __future__ import annotations

import builtins
import numbers
import re
import threading
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from cluster.model.routing import router_of
from cluster.model.topology import Topology
from cluster.service.service_error import ServiceError, Status

# The names the benchmark modules import (kept so that they need not change with this one).
PartitionError = ServiceError
RESOURCE_EXHAUSTED = Status.RESOURCE_EXHAUSTED

MAX_NAME_LENGTH = 64
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}", re.ASCII)
_NAME_RULE = (f"a partition name is 1 to {MAX_NAME_LENGTH} characters from ASCII letters, "
              "digits, '-', '_' and '.', starting with a letter or digit")


@dataclass(frozen=True)
class Partition:
    """A named partition: its IPUs in ring order, split into ``gcds`` equal GCDs.

    ``block`` is the same IPUs in block order (empty: as ``ipus``), ``units`` the cards or
    machines it uses, ``ild_size`` its IPUs per IPU-Link domain (V-IPU's ILD size)."""

    name: str
    ipus: tuple[int, ...]
    gcds: int
    block: tuple[int, ...] = ()
    units: tuple[str, ...] = ()
    ild_size: int = 0

    @property
    def size(self) -> int:
        return len(self.ipus)

    def gcd_ipus(self) -> list[tuple[int, ...]]:
        """The IPUs of each graph compile domain: consecutive equal, aligned slices of the
        block order (each GCD is itself a block: a card, a machine, adjacent ones)."""
        order = self.block or self.ipus
        per = self.size // self.gcds
        return [order[g * per:(g + 1) * per] for g in range(self.gcds)]


def _shown(value: object) -> str:
    """``repr`` of a name for a message, cut short when huge."""
    if isinstance(value, str) and len(value) > 40:
        return f"{value[:20]!r}... ({len(value)} characters)"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def _integer(what: str, value: object, rule: str) -> int:
    """``value`` as an int; bools, floats and strings are refused, not converted."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ServiceError(Status.INVALID_ARGUMENT,
                           f"{what} must be an integer, not {type(value).__name__} "
                           f"{_shown(value)}: {rule}")
    return int(value)


def block_order(topology: Topology) -> list[np.ndarray]:
    """Each IPU-Link domain's IPUs in block order: its units in order, each unit's IPUs in
    order (IPUs in no unit after them, by number); domains in order of their first unit."""
    domain_of = router_of(topology).domain_of_ipu
    members: dict[int, list[int]] = {}
    seen: set[int] = set()
    for unit in topology.units:
        for ipu in sorted(unit.ipus):
            members.setdefault(int(domain_of[ipu]), []).append(int(ipu))
            seen.add(int(ipu))
    for ipu in range(topology.ipu_count):
        if ipu not in seen:
            members.setdefault(int(domain_of[ipu]), []).append(ipu)
    return [np.array(m, dtype=np.int64) for m in members.values()]


class PartitionStore(Protocol):
    """Where partitions and their owners are kept across restarts (the state file)."""

    def save_partition(self, partition: Partition, owner: str) -> None: ...

    def delete_partition(self, name: str) -> None: ...


class PartitionTable:
    """The partitions of one topology, who owns each and within what quota: creates,
    finds, lists and removes them (thread-safe); with a store (:meth:`keep_in`) each owned
    partition is saved before it is acknowledged, and deleted there when removed."""

    def __init__(self, topology: Topology) -> None:
        self.topology = topology
        self._lock = threading.RLock()
        self._partitions: dict[str, Partition] = {}  # in creation order
        self._owners: dict[str, str] = {}  # partition -> the user who owns it
        self._store: PartitionStore | None = None
        self._holder: dict[int, str] = {}  # IPU -> the partition holding it
        self._used = np.zeros(topology.ipu_count, dtype=bool)
        self._domains = block_order(topology)
        self._ring_position = np.empty(topology.ipu_count, dtype=np.int64)
        self._ring_position[topology.ring_order] = np.arange(topology.ipu_count)
        self._unit_of = {ipu: unit.name for unit in topology.units for ipu in unit.ipus}

    def create(self, name: str, size: int, gcds: int = 1) -> Partition:
        """Check the request, place the partition and record it."""
        with self._lock:
            if not isinstance(name, str) or not _NAME.fullmatch(name):
                raise ServiceError(Status.INVALID_ARGUMENT,
                                   f"invalid partition name {_shown(name)}: {_NAME_RULE}")
            count = self.topology.ipu_count
            size_rule = (f"a partition's size is a power of two from 1 to {count} (the IPUs "
                         f"of topology {self.topology.name!r})")
            size = _integer("size", size, size_rule)
            if not (_is_power_of_two(size) and size <= count):
                raise ServiceError(Status.INVALID_ARGUMENT,
                                   f"size {size} is not allowed: {size_rule}")
            gcd_rule = (f"the number of GCDs is an integer from 1 that divides the size {size} "
                        "into GCDs of a power-of-two number of IPUs")
            gcds = _integer("gcds", gcds, gcd_rule)
            if gcds < 1 or size % gcds or not _is_power_of_two(size // gcds):
                raise ServiceError(Status.INVALID_ARGUMENT,
                                   f"gcds {gcds} is not allowed: {gcd_rule}")
            if name in self._partitions:
                raise ServiceError(Status.ALREADY_EXISTS,
                                   f"partition {name!r} already exists: choose another name "
                                   "or remove it first")
            block = self._place(size)
            if block is None:
                raise ServiceError(Status.RESOURCE_EXHAUSTED, self._exhausted(name, size))
            return self._record(self._partition(name, block, gcds))

    def keep_in(self, store: PartitionStore) -> None:
        """From now on, save each claimed partition in ``store`` and delete each removed."""
        with self._lock:
            self._store = store

    def claim(self, name: str, owner: str) -> Partition:
        """Make ``owner`` the owner of partition ``name`` (just created), saved in the store
        first: if it cannot be saved the partition is undone (never acknowledged
        half-made)."""
        with self._lock:
            partition = self.get(name)
            if self._store is not None:
                try:
                    self._store.save_partition(partition, owner)
                except BaseException:
                    self._unrecord(partition)
                    raise
            self._owners[name] = owner
            return partition

    def owner_of(self, name: str) -> str:
        """Who owns partition ``name`` ('' if nobody was named, or there is none)."""
        with self._lock:
            return self._owners.get(name, "")

    def owned_by(self, owner: str) -> builtins.list[Partition]:
        """``owner``'s partitions, in creation order."""
        with self._lock:
            return [p for p in self._partitions.values() if self._owners.get(p.name) == owner]

    def held_by(self, owner: str) -> tuple[int, int]:
        """The IPUs and partitions ``owner`` holds now."""
        with self._lock:
            mine = self.owned_by(owner)
            return sum(p.size for p in mine), len(mine)

    def check_quota(self, owner: str, name: str, size: int, quota: int) -> None:
        """Refuse (RESOURCE_EXHAUSTED) partition ``name`` of ``size`` IPUs for ``owner``
        if it would take them past ``quota`` IPUs (0: no quota)."""
        with self._lock:
            held = self.held_by(owner)[0]
            if quota and held + size > quota:
                raise ServiceError(Status.RESOURCE_EXHAUSTED, (
                    f"cannot create partition {name!r} of {size} IPUs: {owner} holds {held} "
                    f"IPUs of a quota of {quota} (--max-ipus), so {max(quota - held, 0)} "
                    "more at most; remove a partition first"))

    def restore(self, name: str, block: tuple[int, ...], gcds: int,
                owner: str = "") -> Partition:
        """Record partition ``name`` of ``owner`` on exactly ``block`` (its IPUs in block
        order, as a restart's saved state has them); a user error if it cannot be there
        now."""
        with self._lock:
            count = self.topology.ipu_count
            if name in self._partitions or not block or any(
                    not 0 <= ipu < count or self._used[ipu] for ipu in block):
                raise ServiceError(Status.ALREADY_EXISTS,
                                   f"partition {name!r} cannot be restored on IPUs "
                                   f"{list(block)}: taken or absent")
            if owner:
                self._owners[name] = owner
            return self._record(self._partition(name, tuple(block), gcds))

    def _record(self, partition: Partition) -> Partition:
        """Hold ``partition`` and mark its IPUs used."""
        self._partitions[partition.name] = partition
        self._used[list(partition.ipus)] = True
        self._holder.update((ipu, partition.name) for ipu in partition.ipus)
        return partition

    def _unrecord(self, partition: Partition) -> None:
        """Forget ``partition`` and its owner, and free its IPUs."""
        del self._partitions[partition.name]
        self._owners.pop(partition.name, None)
        self._used[list(partition.ipus)] = False
        for ipu in partition.ipus:
            del self._holder[ipu]

    def get(self, name: str) -> Partition:
        """The partition called ``name``; NOT_FOUND names the existing ones."""
        with self._lock:
            partition = self._partitions.get(name) if isinstance(name, str) else None
            if partition is None:
                existing = ", ".join(self._partitions) or "there are none"
                raise ServiceError(Status.NOT_FOUND,
                                   f"no partition named {_shown(name)} on topology "
                                   f"{self.topology.name!r}; existing partitions: {existing}")
            return partition

    def list(self) -> builtins.list[Partition]:
        """Every partition, in creation order."""
        with self._lock:
            return list(self._partitions.values())

    def remove(self, name: str) -> Partition:
        """Remove the partition called ``name`` (from the store first) and free its IPUs;
        return it."""
        with self._lock:
            partition = self.get(name)
            if self._store is not None:
                self._store.delete_partition(name)
            self._unrecord(partition)
            return partition

    def partition_of(self, ipu: int) -> str | None:
        """The name of the partition holding IPU ``ipu``, or None if it is free."""
        with self._lock:
            rule = f"IPUs are numbered 0 to {self.topology.ipu_count - 1}"
            ipu = _integer("ipu", ipu, rule)
            if not 0 <= ipu < self.topology.ipu_count:
                raise ServiceError(Status.INVALID_ARGUMENT, f"no IPU {ipu}: {rule}")
            return self._holder.get(ipu)

    def free_ipus(self) -> builtins.list[int]:
        """The IPUs in no partition, by IPU number."""
        with self._lock:
            return np.flatnonzero(~self._used).tolist()

    # -- placement -------------------------------------------------------------------
    def _partition(self, name: str, block: tuple[int, ...], gcds: int) -> Partition:
        """The partition on ``block``: its ring, units and IPUs per IPU-Link domain."""
        ring = tuple(sorted(block, key=lambda ipu: int(self._ring_position[ipu])))
        units = tuple(dict.fromkeys(self._unit_of[i] for i in block if i in self._unit_of))
        domains = len({int(router_of(self.topology).domain_of_ipu[i]) for i in block})
        return Partition(name, ring, gcds, block, units, len(block) // domains)

    def _place(self, size: int) -> tuple[int, ...] | None:
        """The IPUs for a new partition of ``size`` IPUs (see the module docstring), or None."""
        best: tuple[int, int, int] | None = None  # (enclosing free block, domain, block)
        for d, members in enumerate(self._domains):
            n = len(members)
            if size > n:
                continue
            used = self._used[members]
            blocks = n // size
            free = ~used[:blocks * size].reshape(blocks, size).any(axis=1)
            if not free.any():
                continue
            enclosing = np.full(blocks, size)
            level = 2 * size
            while level <= n:  # grow each block while its aligned buddy block is free
                groups = n // level
                level_free = ~np.asarray(used[:groups * level].reshape(groups, level).any(axis=1))
                group = np.arange(blocks) // (level // size)
                inside = group < groups
                grown = np.zeros(blocks, dtype=bool)
                grown[inside] = level_free[group[inside]]
                enclosing = np.where(grown, level, enclosing)
                level *= 2
            k = int(np.flatnonzero(free)[np.argmin(enclosing[free])])
            if best is None or (int(enclosing[k]), d, k) < best:
                best = (int(enclosing[k]), d, k)
        if best is not None:
            _, d, k = best
            return tuple(self._domains[d][k * size:(k + 1) * size].tolist())
        return self._place_whole_domains(size)

    def _place_whole_domains(self, size: int) -> tuple[int, ...] | None:
        """Two or more consecutive free domains of ``size`` IPUs in all, aligned."""
        offset = 0
        for i, first in enumerate(self._domains):
            if offset % size == 0:
                run, total = [], 0
                for members in self._domains[i:]:
                    if total >= size or self._used[members].any():
                        break
                    run.append(members)
                    total += len(members)
                if total == size and len(run) >= 2:
                    return tuple(np.concatenate(run).tolist())
            offset += len(first)
        return None

    def _exhausted(self, name: str, size: int) -> str:
        """Why no block of ``size`` IPUs fits, with the largest block free now."""
        free = int((~self._used).sum())
        count = self.topology.ipu_count
        if free == 0:
            return (f"cannot create partition {name!r} of {size} IPUs: 0 of {count} IPUs of "
                    f"topology {self.topology.name!r} are free; remove a partition first")
        largest = 1 << (count.bit_length() - 1)
        while largest > 1 and self._place(largest) is None:
            largest //= 2
        return (f"cannot create partition {name!r} of {size} IPUs: {free} of {count} IPUs of "
                f"topology {self.topology.name!r} are free, but no aligned block of {size} "
                "(adjacent cards or machines of one IPU-Link domain, or whole domains) is; the "
                f"largest free block, the largest partition that can be created now, has "
                f"{largest} IPU{'s' if largest > 1 else ''}")
