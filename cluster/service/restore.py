"""What a shared service brings back when it starts: the users and partitions of its state
file (:mod:`cluster.service.state`), and one line saying so, for ``ipupod serve``'s start
line. A service that quietly restored yesterday's partitions would answer the first create
of the day with "0 of 16 IPUs are free"; this line names the file and what came back.

With ``fresh`` the earlier file is moved aside (a timestamped name, never deleted) and the
service starts empty. A restored partition whose owner is no longer a user (a state file
written before removing such a user was refused) becomes the administrator's, so a new
user of the same name never inherits it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from cluster.model.topology import Topology
from cluster.service.partitions import PartitionTable
from cluster.service.state import StateStore, set_aside
from cluster.service.users import ADMIN, UserBook


@dataclass(frozen=True)
class Restored:
    """What a start found in its state file: counts, and where an earlier file went."""

    path: Path
    set_aside: Path | None = None
    users: int = 0
    partitions: int = 0
    ipus: int = 0                # held by the restored partitions
    ipu_count: int = 0           # of the topology
    adopted: tuple[str, ...] = ()  # partitions now the administrator's: owner gone

    def line(self) -> str:
        """One clause for the start line."""
        if self.set_aside is not None:
            return f"earlier state moved to {self.set_aside}; state in {self.path} (empty)"
        if not self.users and not self.partitions:
            return f"state in {self.path} (no earlier state)"
        said = (f"restored {_count(self.users, 'user')} and "
                f"{_count(self.partitions, 'partition')} ({self.ipus} of {self.ipu_count} "
                f"IPUs) from {self.path} (serve --fresh-state starts empty)")
        if self.adopted:
            said += (f"; {', '.join(self.adopted)} now the administrator's (their owner is "
                     "no longer a user)")
        return said


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


class Placed(Protocol):
    """What a start restores onto: a topology and its partition table."""

    topology: Topology
    partitions: PartitionTable


@dataclass
class Brought:
    """The state a gate starts from: its users, its partitions' owners, where changes go."""

    book: UserBook
    owners: dict[str, str]
    store: StateStore | None = None
    restored: Restored | None = None


def bring_back(control: Placed, token: str, path: Path | None,
               fresh: bool = False) -> Brought:
    """Users and partitions from the state file at ``path`` (none: an empty state kept
    nowhere), the partitions placed again on ``control``'s table with their owners, which
    keeps its changes in that file from now on; with ``fresh`` the earlier file is moved
    aside first."""
    if path is None:
        return Brought(UserBook(token), {})
    aside = set_aside(path) if fresh else None
    store = StateStore(path, control.topology)
    records = store.users()
    names = {r.name for r in records}
    owners: dict[str, str] = {}
    adopted: list[str] = []
    ipus = 0
    for saved in store.partitions():
        gone = saved.owner != ADMIN and saved.owner not in names
        owner = ADMIN if gone else saved.owner
        ipus += control.partitions.restore(saved.name, saved.block, saved.gcds, owner).size
        if gone:
            store.set_owner(saved.name, ADMIN)
            adopted.append(saved.name)
        owners[saved.name] = owner
    control.partitions.keep_in(store)
    book = UserBook(token, records, save=store.save_user, delete=store.delete_user)
    restored = Restored(path, aside, len(records), len(owners), ipus,
                        control.topology.ipu_count, tuple(adopted))
    return Brought(book, owners, store, restored)
