"""A POD two users and the administrator share, on a real gRPC server: every verb x every
role, revocation and rotation at once, quotas, one user's flood not starving another, the
audit log, the CLI, and no credential anywhere it could leak."""

import json
import logging
import os
import stat
import subprocess
import sys
import threading
import urllib.request

import grpc
import pytest

from cluster.service.control_server import start_server
from cluster.service.sharing import ShareOptions
from cluster.service.token_auth import write_token
from ipu_node.pod import EmulatedPod
from ipupod_proto import control_pb2, control_pb2_grpc

OK, DENIED = grpc.StatusCode.OK, grpc.StatusCode.PERMISSION_DENIED


def auth(token):
    return (("authorization", f"Bearer {token}"),)


@pytest.fixture(scope="module")
def pod(ray_session, tmp_path_factory):
    folder = tmp_path_factory.mktemp("shared")
    pod = EmulatedPod.launch("pod16")
    token = write_token(folder / "token")
    audit = folder / "audit.jsonl"
    server, port, metrics_port = start_server(pod, token, "127.0.0.1", 0, metrics_port=0,
                                              share=ShareOptions(audit_log=audit))
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = control_pb2_grpc.ControlStub(channel)
    users = {"admin": token}
    for name, quota in (("alice", 8), ("bob", 4)):
        issued = stub.AddUser(control_pb2.AddUserRequest(name=name, max_ipus=quota),
                              metadata=auth(token))
        users[name] = issued.credential
    yield {"stub": stub, "users": users, "port": port, "metrics_port": metrics_port,
           "audit": audit, "folder": folder, "token_file": folder / "token", "pod": pod}
    channel.close()
    server.stop(1).wait(3)
    server.metrics_server.shutdown()
    pod.shutdown()


def code_of(call, *args, **kwargs):
    try:
        call(*args, **kwargs)
    except grpc.RpcError as error:
        return error.code(), error.details()
    return OK, ""


def call_as(pod, who, method, request, **kwargs):
    return code_of(getattr(pod["stub"], method), request, metadata=auth(pod["users"][who]),
                   **kwargs)


@pytest.fixture
def alices(pod):
    """Alice's partition of 4 IPUs (and bob's of 2), removed after the test."""
    for who, name, size in (("alice", "alice-p", 4), ("bob", "bob-p", 2)):
        assert call_as(pod, who, "CreatePartition",
                       control_pb2.CreatePartitionRequest(name=name, size=size))[0] == OK
    yield pod["stub"].GetPartition(control_pb2.PartitionRef(name="alice-p"),
                                   metadata=auth(pod["users"]["admin"]))
    for name in ("alice-p", "bob-p"):
        call_as(pod, "admin", "RemovePartition", control_pb2.PartitionRef(name=name))


def read(pod, method, request):
    return (method, request, {"admin": OK, "alice": OK, "bob": OK})


def owner_only(pod, method, request):
    return (method, request, {"admin": OK, "alice": OK, "bob": DENIED})


def admin_only(pod, method, request):
    return (method, request, {"admin": OK, "alice": DENIED, "bob": DENIED})


def test_every_verb_for_every_role(pod, alices):
    p = control_pb2
    bench = p.BenchmarkRequest(partition="alice-p", min_bytes=1024)
    table = [
        read(pod, "GetStatus", p.StatusRequest()),
        read(pod, "ListDevices", p.ListDevicesRequest()),
        read(pod, "ListLinks", p.ListLinksRequest()),
        read(pod, "GetTopology", p.TopologyRequest()),
        read(pod, "ListFaults", p.ListFaultsRequest()),
        read(pod, "ListPartitions", p.ListPartitionsRequest()),
        owner_only(pod, "GetPartition", p.PartitionRef(name="alice-p")),
        owner_only(pod, "RunBenchmark", bench),
        admin_only(pod, "DegradeLink", p.DegradeLinkRequest(link="0", bandwidth_factor=0.5)),
        admin_only(pod, "CutLink", p.LinkRef(link="0")),
        admin_only(pod, "HealLink", p.LinkRef()),
        admin_only(pod, "ListUsers", p.ListUsersRequest()),
        admin_only(pod, "RotateUser", p.UserRef(name="nobody")),
        admin_only(pod, "RemoveUser", p.RemoveUserRequest(name="nobody")),
        admin_only(pod, "AddUser", p.AddUserRequest(name="bad name")),
    ]
    for method, request, expected in table:
        for who, code in expected.items():
            got, details = call_as(pod, who, method, request)
            if code == OK and method in ("RotateUser", "RemoveUser"):
                code = grpc.StatusCode.NOT_FOUND  # allowed: the user does not exist
            if code == OK and method == "AddUser":
                code = grpc.StatusCode.INVALID_ARGUMENT  # allowed: the name is not valid
            assert got == code, (method, who, got, details)
            if code == DENIED:
                assert f"{who} is not" in details or f"not {who}'s" in details, details
    streamed = pod["stub"].StreamBenchmark(bench, metadata=auth(pod["users"]["bob"]))
    assert code_of(list, streamed)[0] == DENIED
    assert len(list(pod["stub"].StreamBenchmark(bench, metadata=auth(
        pod["users"]["alice"])))) == 1


def test_each_user_lists_their_own_partitions_and_the_administrator_all_with_owners(
        pod, alices):
    def listed(who):
        answer = pod["stub"].ListPartitions(control_pb2.ListPartitionsRequest(),
                                            metadata=auth(pod["users"][who]))
        return {(p.name, p.owner) for p in answer.partitions}

    assert listed("alice") == {("alice-p", "alice")}
    assert listed("bob") == {("bob-p", "bob")}
    assert listed("admin") == {("alice-p", "alice"), ("bob-p", "bob")}
    assert alices.owner == "alice"
    devices = pod["stub"].ListDevices(control_pb2.ListDevicesRequest(),
                                      metadata=auth(pod["users"]["bob"])).devices
    assert {d.partition for d in devices} == {"", "bob-p", "(another user's)"}


def test_the_cli_shows_owners_once_a_user_has_a_partition(pod, alices):
    table = cli(pod, "partition", "list").stdout.splitlines()
    assert table[0].split()[:2] == ["owner", "name"]
    assert {tuple(line.split()[:2]) for line in table[1:]} == {("alice", "alice-p"),
                                                              ("bob", "bob-p")}


def test_removing_and_killing_another_users_things_is_denied_and_ones_own_allowed(
        pod, alices):
    card = control_pb2.KillCardRequest(card=alices.units[0])
    code, details = call_as(pod, "bob", "KillCard", card)
    assert code == DENIED and "administrator" in details
    ref = control_pb2.PartitionRef(name="alice-p")
    assert call_as(pod, "bob", "RemovePartition", ref)[0] == DENIED
    assert call_as(pod, "alice", "KillCard", card)[0] == OK
    assert call_as(pod, "admin", "KillCard", card)[0] == OK
    assert call_as(pod, "alice", "RemovePartition", ref)[0] == OK
    assert call_as(pod, "bob", "RemovePartition", control_pb2.PartitionRef(name="bob-p"))[0] \
        == OK


def test_a_create_past_the_quota_is_refused_with_the_numbers(pod, alices):
    code, details = call_as(pod, "alice", "CreatePartition",
                            control_pb2.CreatePartitionRequest(name="big", size=8))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "holds 4 IPUs of a quota of 8" in details and "4 more at most" in details
    assert call_as(pod, "alice", "CreatePartition",
                   control_pb2.CreatePartitionRequest(name="fits", size=4))[0] == OK
    assert call_as(pod, "alice", "RemovePartition", control_pb2.PartitionRef(name="fits"))[0] \
        == OK


def test_revoking_or_rotating_a_credential_takes_effect_at_once(pod):
    stub, admin = pod["stub"], auth(pod["users"]["admin"])
    first = stub.AddUser(control_pb2.AddUserRequest(name="carol"), metadata=admin).credential
    status = control_pb2.StatusRequest()
    assert code_of(stub.GetStatus, status, metadata=auth(first))[0] == OK
    second = stub.RotateUser(control_pb2.UserRef(name="carol"), metadata=admin).credential
    assert code_of(stub.GetStatus, status, metadata=auth(first))[0] \
        == grpc.StatusCode.UNAUTHENTICATED
    assert code_of(stub.GetStatus, status, metadata=auth(second))[0] == OK
    stub.RemoveUser(control_pb2.RemoveUserRequest(name="carol"), metadata=admin)
    assert code_of(stub.GetStatus, status, metadata=auth(second))[0] \
        == grpc.StatusCode.UNAUTHENTICATED
    forged = second.split(":")[0] + ":" + "A" * 43
    assert code_of(stub.GetStatus, status, metadata=auth(forged))[0] \
        == grpc.StatusCode.UNAUTHENTICATED
    pod["users"]["carol (gone)"] = second


def test_one_users_flood_of_real_benches_does_not_starve_another_users_status(pod, alices):
    """Alice runs 32 loops of real benchmarks at once (twice the server's threads); bob's
    status calls each answer within their 1 s deadline meanwhile."""
    bench = control_pb2.BenchmarkRequest(partition="alice-p", min_bytes=4 << 20, mode="real",
                                         iterations=10)
    codes, start = [], threading.Event()

    def flood():
        start.wait()
        for _ in range(2):
            codes.append(call_as(pod, "alice", "RunBenchmark", bench, timeout=60)[0])

    threads = [threading.Thread(target=flood) for _ in range(32)]
    for thread in threads:
        thread.start()
    start.set()
    answered = [call_as(pod, "bob", "GetStatus", control_pb2.StatusRequest(), timeout=1.0)[0]
                for _ in range(20)]
    for thread in threads:
        thread.join(120)
    assert answered == [OK] * 20
    assert OK in codes and grpc.StatusCode.RESOURCE_EXHAUSTED in codes


def cli(pod, *args, token_file=None):
    env = {**os.environ, "IPUOF_VIPU_API_PORT": str(pod["port"]),
           "IPUPOD_TOKEN_FILE": str(token_file or pod["token_file"])}
    return subprocess.run([sys.executable, "-m", "cluster.cli.main", *args],
                          capture_output=True, text=True, timeout=120, env=env)


def test_the_user_commands_write_credentials_privately_and_never_print_them(pod):
    path = pod["folder"] / "dave.token"
    added = cli(pod, "user", "add", "dave", "--max-ipus", "2", "--credential-file", str(path))
    assert added.returncode == 0, added.stderr
    credential = path.read_text().strip()
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    made = cli(pod, "partition", "create", "dave-p", "--size", "2", token_file=path)
    assert made.returncode == 0, made.stderr
    users = json.loads(cli(pod, "user", "list", "--json").stdout)["users"]
    assert {"name": "dave", "max_ipus": 2, "ipus_used": 2, "partitions": 1} in users
    rotated = cli(pod, "user", "rotate", "dave", "--credential-file", str(path), "--json")
    assert rotated.returncode == 0 and json.loads(rotated.stdout)["name"] == "dave"
    assert path.read_text().strip() != credential
    denied = cli(pod, "user", "list", token_file=path)
    assert denied.returncode == 2 and "PERMISSION_DENIED" in denied.stderr
    assert cli(pod, "remove", "partition", "dave-p", token_file=path).returncode == 0
    assert cli(pod, "user", "remove", "dave").returncode == 0
    gone = cli(pod, "status", token_file=path)
    assert gone.returncode == 2 and "UNAUTHENTICATED" in gone.stderr
    for run in (added, made, rotated, denied, gone):
        assert credential not in run.stdout + run.stderr
        assert path.read_text().strip() not in run.stdout + run.stderr
    pod["users"]["dave"] = path.read_text().strip()


def test_the_audit_log_has_a_json_line_per_change_and_refusal(pod, alices):
    call_as(pod, "bob", "RemovePartition", control_pb2.PartitionRef(name="alice-p"))
    code_of(pod["stub"].GetStatus, control_pb2.StatusRequest(), metadata=auth("nope"))
    lines = [json.loads(line) for line in pod["audit"].read_text().splitlines()]
    assert all(set(line) >= {"time", "user", "call", "target", "outcome"} for line in lines)
    assert {"user": "alice", "call": "CreatePartition", "target": "alice-p",
            "outcome": "ok"}.items() <= lines[-5].items() or any(
        (l["user"], l["call"], l["target"], l["outcome"])
        == ("alice", "CreatePartition", "alice-p", "ok") for l in lines)
    assert any((l["user"], l["call"], l["target"], l["outcome"])
               == ("bob", "RemovePartition", "alice-p", "PERMISSION_DENIED") for l in lines)
    assert lines[-1]["outcome"] == "UNAUTHENTICATED" and lines[-1]["call"] == "GetStatus"
    assert stat.S_IMODE(os.stat(pod["audit"]).st_mode) == 0o600


def test_bytes_that_are_not_the_message_are_refused_and_audited(pod):
    """Garbage refused before any servicer sees it is still a refused call, audited with
    who sent it."""
    raw = grpc.insecure_channel(f"127.0.0.1:{pod['port']}")
    try:
        call = raw.unary_unary("/ipupod.control.v1.Control/CreatePartition")
        code, _ = code_of(call, b"\x0a\xff\xff\xff\xff\x0f",
                          metadata=auth(pod["users"]["bob"]))
    finally:
        raw.close()
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    last = json.loads(pod["audit"].read_text().splitlines()[-1])
    assert (last["user"], last["call"], last["outcome"]) == (
        "bob", "CreatePartition", "INVALID_ARGUMENT")
    assert "not a valid" in last["detail"]


def test_no_credential_appears_in_logs_audit_lines_errors_or_metrics(pod, alices, caplog):
    caplog.set_level(logging.DEBUG)
    details = []
    for who in ("alice", "bob"):
        for method, request in (
                ("GetPartition", control_pb2.PartitionRef(name="alice-p")),
                ("CutLink", control_pb2.LinkRef(link="0")),
                ("CreatePartition", control_pb2.CreatePartitionRequest(name="x", size=16)),
                ("AddUser", control_pb2.AddUserRequest(name="eve"))):
            details.append(call_as(pod, who, method, request)[1])
    metrics = urllib.request.urlopen(
        f"http://127.0.0.1:{pod['metrics_port']}/metrics", timeout=10).read().decode()
    audit = "".join(p.read_text() for p in pod["folder"].glob("audit.jsonl*"))
    text = "\n".join([*details, metrics, audit, caplog.text])
    secrets = [c for c in pod["users"].values()] + [c.split(":", 1)[-1]
                                                    for c in pod["users"].values()]
    assert len(secrets) >= 6
    for secret in secrets:
        assert secret not in text


def test_a_user_who_owns_partitions_is_removed_only_with_them_and_a_new_one_inherits_nothing(
        pod):
    stub, admin = pod["stub"], auth(pod["users"]["admin"])
    erin = stub.AddUser(control_pb2.AddUserRequest(name="erin", max_ipus=4),
                        metadata=admin).credential
    for name, size in (("erin-a", 2), ("erin-b", 1)):
        stub.CreatePartition(control_pb2.CreatePartitionRequest(name=name, size=size),
                             metadata=auth(erin))
    refused = cli(pod, "user", "remove", "erin")
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr.count("\n") == 1 and refused.stderr.startswith("error: ")
    assert "owns partitions erin-a, erin-b" in refused.stderr
    assert "--with-partitions" in refused.stderr
    status = control_pb2.StatusRequest()
    assert code_of(stub.GetStatus, status, metadata=auth(erin))[0] == OK  # still a user

    removed = cli(pod, "user", "remove", "ERIN", "--with-partitions")
    assert removed.returncode == 0, removed.stderr
    assert removed.stdout.strip() == "removed user erin and their 2 partitions (3 IPUs)"
    assert code_of(stub.GetStatus, status, metadata=auth(erin))[0] \
        == grpc.StatusCode.UNAUTHENTICATED
    listed = stub.ListPartitions(control_pb2.ListPartitionsRequest(), metadata=admin)
    assert not {"erin-a", "erin-b"} & {p.name for p in listed.partitions}
    devices = stub.ListDevices(control_pb2.ListDevicesRequest(), metadata=admin).devices
    assert not {"erin-a", "erin-b"} & {d.partition for d in devices}  # freed on the POD
    lines = [json.loads(line) for line in pod["audit"].read_text().splitlines()]
    assert [(l["call"], l["target"], l["outcome"]) for l in lines[-4:-1]] == [
        ("RemovePartition", "erin-a", "ok"), ("RemovePartition", "erin-b", "ok"),
        ("RemoveUser", "ERIN", "ok")]

    again = stub.AddUser(control_pb2.AddUserRequest(name="erin", max_ipus=2),
                         metadata=admin)
    assert (again.user.ipus_used, again.user.partitions) == (0, 0)
    code, details = call_as({**pod, "users": {"erin": again.credential}}, "erin",
                            "CreatePartition", control_pb2.CreatePartitionRequest(
                                name="erin-c", size=4))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "so 2 more at most" in details
    stub.RemoveUser(control_pb2.RemoveUserRequest(name="erin"), metadata=admin)


def test_user_names_are_one_name_without_regard_to_case_and_kept_as_typed(pod):
    stub, admin = pod["stub"], auth(pod["users"]["admin"])
    for taken in ("ALICE", "Bob"):
        code, details = code_of(stub.AddUser, control_pb2.AddUserRequest(name=taken),
                                metadata=admin)
        assert code == grpc.StatusCode.ALREADY_EXISTS, details
        assert "without regard to case" in details and repr(taken.lower()) in details
    for admin_name in ("admin", "Admin", "ADMIN"):
        assert code_of(stub.AddUser, control_pb2.AddUserRequest(name=admin_name),
                       metadata=admin)[0] == grpc.StatusCode.INVALID_ARGUMENT
    stub.AddUser(control_pb2.AddUserRequest(name="Frank"), metadata=admin)
    rotated = stub.RotateUser(control_pb2.UserRef(name="FRANK"), metadata=admin)
    assert rotated.user.name == "Frank" and rotated.credential.startswith("Frank:")
    names = [u.name for u in stub.ListUsers(control_pb2.ListUsersRequest(),
                                            metadata=admin).users]
    assert names.count("Frank") == 1 and "FRANK" not in names
    assert stub.RemoveUser(control_pb2.RemoveUserRequest(name="frank"),
                           metadata=admin).name == "Frank"
    pod["users"]["frank (gone)"] = rotated.credential


def test_a_credential_file_in_a_missing_folder_is_refused_before_the_user_is_added(pod):
    missing = pod["folder"] / "no-such-folder"
    for verb, name in (("add", "gina"), ("rotate", "alice")):
        refused = cli(pod, "user", verb, name, "--credential-file", str(missing / "x.token"))
        assert refused.returncode == 2 and refused.stderr.count("\n") == 1
        assert refused.stderr.startswith("error: --credential-file ")
        assert "does not exist" in refused.stderr
        assert not missing.exists()
    users = pod["stub"].ListUsers(control_pb2.ListUsersRequest(),
                                  metadata=auth(pod["users"]["admin"])).users
    assert "gina" not in {u.name for u in users}
    assert call_as(pod, "alice", "GetStatus", control_pb2.StatusRequest())[0] == OK  # unrotated


def test_the_audit_logs_detail_of_a_refusal_is_its_message_as_text(pod):
    code, details = call_as(pod, "admin", "CreatePartition",
                            control_pb2.CreatePartitionRequest(name="odd", size=3))
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    last = json.loads(pod["audit"].read_text().splitlines()[-1])
    assert (last["call"], last["outcome"]) == ("CreatePartition", "INVALID_ARGUMENT")
    assert last["detail"] == details and not last["detail"].startswith(("b'", 'b"'))
