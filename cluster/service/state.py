"""The state of a shared POD that survives a restart: users (their credentials' salted
hashes and quotas) and partitions (owner, IPUs, GCDs), in an SQLite file (mode 0600).

Every change is one transaction, committed before the call that made it answers: a service
killed at any moment and started again with the same file gets back every partition it
acknowledged, on the same IPUs, and none it did not. A file written for another topology,
or one that is not such a file (corrupt, another program's), is refused with a message,
never emptied.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cluster.errors import UserError, quoted
from cluster.model.topology import Topology
from cluster.service.partitions import Partition
from cluster.service.users import UserRecord

FORMAT = "ipupod-state-1"
_COMPANIONS = ("", "-journal", "-wal", "-shm")  # the file, then what SQLite keeps beside it
_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS users (name TEXT PRIMARY KEY, salt BLOB NOT NULL,
                                  digest BLOB NOT NULL, max_ipus INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS partitions (name TEXT PRIMARY KEY, owner TEXT NOT NULL,
                                       block TEXT NOT NULL, gcds INTEGER NOT NULL,
                                       made INTEGER NOT NULL);
"""


@dataclass(frozen=True)
class SavedPartition:
    """A partition as saved: its name, owner, IPUs in block order and GCDs."""

    name: str
    owner: str
    block: tuple[int, ...]
    gcds: int


def fingerprint(topology: Topology) -> str:
    """What a state file must match: the topology's name, IPU count and ring."""
    return json.dumps([topology.name, topology.ipu_count,
                       [int(i) for i in topology.ring_order]])


def set_aside(path: Path) -> Path | None:
    """Move the state file at ``path`` (with SQLite's journal, if one is left) to a name
    stamped with the time, ``NAME.YYYYmmddTHHMMSSZ.SUFFIX``, never over another file; the
    new name, or None if there was no file. Nothing is deleted."""
    if not os.path.lexists(path):
        return None
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for attempt in range(1000):
        tag = stamp if attempt == 0 else f"{stamp}-{attempt}"
        aside = path.with_name(f"{path.stem}.{tag}{path.suffix}")
        if not any(os.path.lexists(f"{aside}{end}") for end in _COMPANIONS):
            break
    try:
        for end in _COMPANIONS:  # the journal too: left beside a new file, SQLite would
            if os.path.lexists(f"{path}{end}"):  # roll it back into that file
                os.rename(f"{path}{end}", f"{aside}{end}")
    except OSError as error:
        raise UserError(f"cannot move the state file {quoted(str(path))} aside "
                        f"({error.strerror}): move it yourself, or pass another --state"
                        ) from None
    return aside


def _private_file(path: Path) -> None:
    """Create ``path`` mode 0600 if it is missing; refuse what is not our regular file."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    try:
        info = os.fstat(descriptor)
    finally:
        os.close(descriptor)
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        raise OSError(0, "not a regular file of yours")
    os.chmod(path, 0o600)


class StateStore:
    """The state file of one service (thread-safe: one connection, one lock)."""

    def __init__(self, path: Path, topology: Topology) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            _private_file(path)
            self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
            self._db.execute("PRAGMA synchronous=FULL")
            self._db.executescript("BEGIN;" + _SCHEMA + "COMMIT;")
            self._check(topology)
        except (OSError, sqlite3.DatabaseError) as error:
            raise UserError(f"cannot use the state file {quoted(str(path))} ({error}): it is "
                            "not an ipupod state file, or is damaged; move it away (it is "
                            "kept as it is) or pass another --state") from None

    def _check(self, topology: Topology) -> None:
        """Stamp a new file with the topology; refuse one written for another."""
        rows = dict(self._db.execute("SELECT key, value FROM meta").fetchall())
        mine = {"format": FORMAT, "topology": fingerprint(topology)}
        if not rows:
            self._write("INSERT INTO meta VALUES (?, ?), (?, ?)",
                        ("format", FORMAT, "topology", mine["topology"]))
        elif rows.get("format") != FORMAT:
            raise sqlite3.DatabaseError(f"format {rows.get('format')!r}, not {FORMAT!r}")
        elif rows.get("topology") != mine["topology"]:
            name = json.loads(rows["topology"])[0]
            raise UserError(f"the state file {quoted(str(self.path))} was written for topology "
                            f"{name!r}, not this {topology.name!r}: serve that topology, or "
                            "pass another --state (the file is kept as it is)")

    def _write(self, sql: str, values: tuple[object, ...]) -> None:
        """Run one change as a transaction, committed (and synced) when this returns."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute(sql, values)
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    def users(self) -> list[UserRecord]:
        """Every saved user."""
        with self._lock:
            rows = self._db.execute("SELECT name, salt, digest, max_ipus FROM users").fetchall()
        return [UserRecord(n, bytes(s), bytes(d), int(m)) for n, s, d, m in rows]

    def partitions(self) -> list[SavedPartition]:
        """Every saved partition, in the order they were made."""
        with self._lock:
            rows = self._db.execute(
                "SELECT name, owner, block, gcds FROM partitions ORDER BY made").fetchall()
        return [SavedPartition(n, o, tuple(json.loads(b)), int(g)) for n, o, b, g in rows]

    def save_user(self, record: UserRecord) -> None:
        self._write("INSERT OR REPLACE INTO users VALUES (?, ?, ?, ?)",
                    (record.name, record.salt, record.digest, record.max_ipus))

    def delete_user(self, name: str) -> None:
        self._write("DELETE FROM users WHERE name = ?", (name,))

    def save_partition(self, partition: Partition, owner: str) -> None:
        self._write("INSERT INTO partitions VALUES (?, ?, ?, ?, ?)",
                    (partition.name, owner, json.dumps(list(partition.block or partition.ipus)),
                     partition.gcds, time.time_ns()))

    def delete_partition(self, name: str) -> None:
        self._write("DELETE FROM partitions WHERE name = ?", (name,))

    def set_owner(self, partition: str, owner: str) -> None:
        self._write("UPDATE partitions SET owner = ? WHERE name = ?", (owner, partition))

    def close(self) -> None:
        with self._lock:
            self._db.close()
