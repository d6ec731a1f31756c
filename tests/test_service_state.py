"""The shared POD's state survives a restart: users and partitions (with their owners and
IPUs) in an SQLite file written before each call answers. A service killed with SIGKILL
during a create comes back with every acknowledged partition and no half-made one; a state
file of another topology, or a damaged one, is refused and kept as it is."""

import os
import re
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import grpc
import pytest

from cluster.errors import UserError
from cluster.model.spec import load_topology
from cluster.service.partitions import PartitionError, PartitionTable
from cluster.service.restore import bring_back
from cluster.service.state import StateStore
from cluster.service.users import ADMIN, UserBook
from ipupod_proto import control_pb2, control_pb2_grpc


def test_a_state_file_is_private_and_keeps_users_and_partitions(tmp_path):
    topology = load_topology("pod16")
    path = tmp_path / "state.sqlite"
    store = StateStore(path, topology)
    book = UserBook("admin-token", save=store.save_user, delete=store.delete_user)
    _, credential = book.add("alice", max_ipus=4)
    book.add("bob")
    book.remove("bob")
    made = PartitionTable(topology).create("p", 4)
    store.save_partition(made, "alice")
    store.close()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    again = StateStore(path, topology)
    restored = UserBook("another-admin-token", again.users())
    assert restored.identify(credential).name == "alice" and restored.max_ipus("alice") == 4
    assert [r.name for r in restored.list()] == ["alice"]
    [saved] = again.partitions()
    assert (saved.name, saved.owner, saved.gcds) == ("p", "alice", 1)
    table = PartitionTable(topology)
    assert table.restore(saved.name, saved.block, saved.gcds).ipus == made.ipus
    assert credential.split(":")[1] not in path.read_bytes().decode("latin-1")


def test_a_state_file_of_another_topology_or_a_damaged_one_is_refused_and_kept(tmp_path):
    path = tmp_path / "state.sqlite"
    StateStore(path, load_topology("pod16")).close()
    before = path.read_bytes()
    with pytest.raises(UserError, match="written for topology 'pod16'"):
        StateStore(path, load_topology("pod64"))
    assert path.read_bytes() == before
    damaged = tmp_path / "damaged.sqlite"
    damaged.write_bytes(b"not a database" * 100)
    with pytest.raises(UserError, match="not an ipupod state file, or is damaged"):
        StateStore(damaged, load_topology("pod16"))
    assert damaged.read_bytes() == b"not a database" * 100
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
        db.execute("INSERT INTO meta VALUES ('format', 'something else')")
    with pytest.raises(UserError, match="not an ipupod state file"):
        StateStore(other, load_topology("pod16"))


def test_a_start_says_what_it_restored_and_gives_a_partition_of_a_gone_user_to_the_admin(
        tmp_path):
    """A state file written before removing such a user was refused holds a partition of
    nobody: it becomes the administrator's, so a new user of that name inherits nothing."""
    topology = load_topology("pod16")
    path = tmp_path / "state.sqlite"
    store = StateStore(path, topology)
    book = UserBook("t", save=store.save_user, delete=store.delete_user)
    book.add("alice")
    table = PartitionTable(topology)
    store.save_partition(table.create("mine", 4), "alice")
    store.save_partition(table.create("orphan", 2), "bob")  # bob: removed long ago
    store.close()
    control = SimpleNamespace(topology=topology, partitions=PartitionTable(topology))
    brought = bring_back(control, "admin-token", path)
    assert brought.owners == {"mine": "alice", "orphan": ADMIN}
    assert brought.restored.line() == (
        f"restored 1 user and 2 partitions (6 of 16 IPUs) from {path} (serve --fresh-state "
        "starts empty); orphan now the administrator's (their owner is no longer a user)")
    assert {p.name: p.owner for p in brought.store.partitions()}["orphan"] == ADMIN
    brought.store.close()


def test_a_fresh_start_moves_the_earlier_file_aside_and_deletes_nothing(tmp_path):
    topology = load_topology("pod16")
    path = tmp_path / "state.sqlite"
    store = StateStore(path, topology)
    store.save_partition(PartitionTable(topology).create("p", 4), ADMIN)
    store.close()
    before = path.read_bytes()
    (tmp_path / "state.sqlite-journal").write_bytes(b"a journal SQLite left")
    control = SimpleNamespace(topology=topology, partitions=PartitionTable(topology))
    brought = bring_back(control, "admin-token", path, fresh=True)
    aside = brought.restored.set_aside
    assert re.fullmatch(r"state\.\d{8}T\d{6}Z\.sqlite", aside.name), aside
    assert aside.read_bytes() == before
    assert (tmp_path / f"{aside.name}-journal").read_bytes() == b"a journal SQLite left"
    assert brought.store.partitions() == [] and control.partitions.list() == []
    assert brought.restored.line() == (f"earlier state moved to {aside}; state in {path} "
                                       "(empty)")
    brought.store.close()
    again = bring_back(SimpleNamespace(topology=topology, partitions=PartitionTable(topology)),
                       "admin-token", path, fresh=True)
    assert again.restored.set_aside not in (None, aside) and aside.read_bytes() == before
    assert again.restored.set_aside.exists()
    again.store.close()
    empty = bring_back(SimpleNamespace(topology=topology, partitions=PartitionTable(topology)),
                       "admin-token", tmp_path / "new.sqlite")
    assert empty.restored.line() == f"state in {tmp_path / 'new.sqlite'} (no earlier state)"
    empty.store.close()


def test_the_partition_table_keeps_owners_in_its_store_and_undoes_a_claim_it_cannot_save(
        tmp_path):
    topology = load_topology("pod16")
    store = StateStore(tmp_path / "state.sqlite", topology)
    table = PartitionTable(topology)
    table.keep_in(store)
    table.create("p", 4)
    table.claim("p", "alice")
    assert table.owner_of("p") == "alice" and [p.name for p in table.owned_by("alice")] == ["p"]
    assert [(saved.name, saved.owner) for saved in store.partitions()] == [("p", "alice")]
    table.remove("p")
    assert store.partitions() == [] and table.owner_of("p") == ""
    store.close()  # a store that can no longer be written
    table.create("q", 4)
    with pytest.raises(sqlite3.ProgrammingError):
        table.claim("q", "bob")
    assert table.list() == [] and len(table.free_ipus()) == 16 and table.owner_of("q") == ""
    again = bring_back(SimpleNamespace(topology=topology, partitions=PartitionTable(topology)),
                       "admin-token", tmp_path / "state.sqlite")
    assert again.owners == {} and again.store.partitions() == []
    again.store.close()


def test_an_old_state_files_two_names_differing_in_case_both_load_and_need_exact_names(
        tmp_path):
    """Written before names were compared case-folded: both users keep working; a name
    that could mean either is refused, saying which; no third is let in."""
    path = tmp_path / "state.sqlite"
    store = StateStore(path, load_topology("pod16"))
    credentials = {}
    for name in ("alice", "ALICE"):
        record, credentials[name] = UserBook("t").add(name)
        store.save_user(record)
    book = UserBook("t", store.users())
    assert {book.identify(c).name for c in credentials.values()} == {"alice", "ALICE"}
    with pytest.raises(PartitionError, match="names users 'ALICE', 'alice'"):
        book.find("Alice")
    with pytest.raises(PartitionError, match="already exists"):
        book.add("aLiCe")
    assert book.remove("ALICE").name == "ALICE" and book.find("Alice").name == "alice"
    store.close()


class Serve:
    """``ipupod serve`` in a session of its own (its private Ray with it); ``line``: the
    line it starts with."""

    def __init__(self, folder, *options):
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("RAY_ADDRESS", None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cluster.cli.main", "serve", "--topology", "pod16",
             "--port", "0", "--metrics-port", "-1", "--token-file", str(folder / "token"),
             "--state", str(folder / "state.sqlite"), *options],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
            start_new_session=True)
        self.line = line = self.process.stdout.readline()
        match = re.search(r"on 127\.0\.0\.1:(\d+); token in (\S+);", line)
        assert match, line
        self.channel = grpc.insecure_channel(f"127.0.0.1:{match.group(1)}")
        self.stub = control_pb2_grpc.ControlStub(self.channel)
        self.admin = (folder / "token").read_text().strip()

    def kill(self):
        """SIGKILL, to the serve process and whatever it started."""
        self.channel.close()
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait(60)


def auth(token):
    return (("authorization", f"Bearer {token}"),)


def test_kill_9_during_a_create_then_restart_restores_every_acknowledged_partition(tmp_path):
    serve = Serve(tmp_path)
    try:
        users = {name: serve.stub.AddUser(control_pb2.AddUserRequest(name=name),
                                          metadata=auth(serve.admin)).credential
                 for name in ("alice", "bob")}
        acknowledged = {}
        for who, name, size in (("alice", "a1", 4), ("bob", "b1", 4), ("alice", "a2", 2)):
            made = serve.stub.CreatePartition(control_pb2.CreatePartitionRequest(
                name=name, size=size), metadata=auth(users[who]))
            acknowledged[name] = (who, tuple(made.ipus))
        asked, first = [], threading.Event()

        def creates():
            for i in range(6):
                asked.append(f"c{i}")
                try:
                    made = serve.stub.CreatePartition(control_pb2.CreatePartitionRequest(
                        name=f"c{i}", size=1), metadata=auth(users["bob"]), timeout=30)
                except grpc.RpcError:
                    return
                acknowledged[f"c{i}"] = ("bob", tuple(made.ipus))
                first.set()

        thread = threading.Thread(target=creates)
        thread.start()
        assert first.wait(60)
        serve.kill()  # while bob's next creates are on their way
        thread.join(60)
    finally:
        serve.kill()
    serve = Serve(tmp_path)
    try:
        listed = serve.stub.ListPartitions(control_pb2.ListPartitionsRequest(),
                                           metadata=auth(serve.admin)).partitions
        restored = {p.name: (p.owner, tuple(p.ipus)) for p in listed}
        ipus = sum(len(placed) for _, placed in restored.values())
        assert (f"; restored 2 users and {len(restored)} partitions ({ipus} of 16 IPUs) "
                f"from {tmp_path / 'state.sqlite'} (serve --fresh-state starts empty)"
                in serve.line), serve.line
        assert acknowledged.items() <= restored.items()
        assert set(restored) <= set(acknowledged) | set(asked)  # nothing it was not asked
        ipus = [i for _, placed in restored.values() for i in placed]
        assert len(ipus) == len(set(ipus))
        mine = serve.stub.ListPartitions(control_pb2.ListPartitionsRequest(),
                                         metadata=auth(users["alice"])).partitions
        assert {p.name for p in mine} == {"a1", "a2"}  # alice's credential still works
    finally:
        serve.kill()
    serve = Serve(tmp_path, "--fresh-state")
    try:
        match = re.search(r"; earlier state moved to (\S+); state in (\S+) \(empty\)$",
                          serve.line.rstrip("\n"))
        assert match and match.group(2) == str(tmp_path / "state.sqlite"), serve.line
        assert not serve.stub.ListPartitions(control_pb2.ListPartitionsRequest(),
                                             metadata=auth(serve.admin)).partitions
        kept = StateStore(Path(match.group(1)), load_topology("pod16"))
        assert {p.name for p in kept.partitions()} == set(restored)  # nothing deleted
        kept.close()
    finally:
        serve.kill()
