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

import grpc
import pytest

from cluster.errors import UserError
from cluster.model.spec import load_topology
from cluster.service.partitions import PartitionTable
from cluster.service.state import StateStore
from cluster.service.users import UserBook
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


class Serve:
    """``ipupod serve`` in a session of its own (its private Ray with it)."""

    def __init__(self, folder):
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env.pop("RAY_ADDRESS", None)
        self.process = subprocess.Popen(
            [sys.executable, "-m", "cluster.cli.main", "serve", "--topology", "pod16",
             "--port", "0", "--metrics-port", "-1", "--token-file", str(folder / "token"),
             "--state", str(folder / "state.sqlite")],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env,
            start_new_session=True)
        line = self.process.stdout.readline()
        match = re.search(r"on 127\.0\.0\.1:(\d+); token in (\S+)", line)
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
        assert acknowledged.items() <= restored.items()
        assert set(restored) <= set(acknowledged) | set(asked)  # nothing it was not asked
        ipus = [i for _, placed in restored.values() for i in placed]
        assert len(ipus) == len(set(ipus))
        mine = serve.stub.ListPartitions(control_pb2.ListPartitionsRequest(),
                                         metadata=auth(users["alice"])).partitions
        assert {p.name for p in mine} == {"a1", "a2"}  # alice's credential still works
    finally:
        serve.kill()
