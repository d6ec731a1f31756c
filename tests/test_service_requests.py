"""Requests that must not hurt the service: short, exact error statuses for hostile input,
memory checked before a real bench builds anything, bench tensors freed, the service's RSS
back near where it was; and benches streamed row by row, `--json` as the standalone bench."""

import json
import os
import subprocess
import sys

import grpc
import pytest

from cluster.service.control_server import start_server
from cluster.service.token_auth import write_token
from ipu_node.pod import EmulatedPod
from ipupod_proto import control_pb2, control_pb2_grpc
from tests.test_bench_refusals import too_big_for_this_machine

MiB = 1 << 20


@pytest.fixture(scope="module")
def service(ray_session, tmp_path_factory):
    token_file = tmp_path_factory.mktemp("requests") / "token"
    pod = EmulatedPod.launch("pod16")
    server, port, _ = start_server(pod, write_token(token_file), "127.0.0.1", 0)
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    auth = (("authorization", f"Bearer {token_file.read_text().strip()}"),)
    yield {"stub": control_pb2_grpc.ControlStub(channel), "auth": auth, "port": port,
           "token_file": token_file, "channel": channel, "pod": pod}
    channel.close()
    server.stop(1).wait(3)
    pod.shutdown()


@pytest.fixture
def partition(service):
    stub, auth = service["stub"], service["auth"]
    made = stub.CreatePartition(control_pb2.CreatePartitionRequest(name="req", size=4),
                                metadata=auth)
    yield made
    stub.RemovePartition(control_pb2.PartitionRef(name="req"), metadata=auth)


def refusal(call, request, auth):
    with pytest.raises(grpc.RpcError) as info:
        call(request, metadata=auth, timeout=120)
    return info.value.code(), info.value.details()


def rss_bytes():
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_hostile_link_names_groups_and_names_get_short_exact_errors(service, partition):
    stub, auth = service["stub"], service["auth"]
    digits = "9" * 3000
    cases = [(stub.CutLink, control_pb2.LinkRef(link="²")),
             (stub.CutLink, control_pb2.LinkRef(link=digits)),
             (stub.DegradeLink, control_pb2.DegradeLinkRequest(link=digits + "--x")),
             (stub.KillCard, control_pb2.KillCardRequest(card="x" * 100_000)),
             (stub.GetPartition, control_pb2.PartitionRef(name="n" * 100_000)),
             (stub.RunBenchmark, control_pb2.BenchmarkRequest(
                 partition="req", min_bytes=1024, group="orthogonal:²")),
             (stub.RunBenchmark, control_pb2.BenchmarkRequest(
                 partition="req", min_bytes=1024, algorithm="a" * 100_000))]
    for call, request in cases:
        code, details = refusal(call, request, auth)
        assert code in (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.NOT_FOUND), details
        assert len(details.encode()) < 1024, details
        assert "Traceback" not in details and "\x1b" not in details
        assert "9" * 101 not in details and "x" * 101 not in details and "n" * 101 not in details
    assert stub.GetStatus(control_pb2.StatusRequest(), metadata=auth).ipus == 16


def test_undecodable_requests_are_invalid_arguments(service):
    raw = service["channel"].unary_unary("/ipupod.control.v1.Control/CreatePartition")
    for garbage in (b"\xff\xff\xff\xff", b"\x0a\x02\xff\xfe"):
        with pytest.raises(grpc.RpcError) as info:
            raw(garbage, metadata=service["auth"], timeout=10)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "not a valid CreatePartitionRequest" in info.value.details()


def test_a_real_bench_too_big_for_the_ipus_is_refused_before_anything_is_built(service):
    stub, auth = service["stub"], service["auth"]
    stub.CreatePartition(control_pb2.CreatePartitionRequest(name="one", size=1), metadata=auth)
    try:
        before = rss_bytes()
        code, details = refusal(stub.RunBenchmark, control_pb2.BenchmarkRequest(
            partition="one", min_bytes=1 << 30, mode="real"), auth)
        # phantom mode's refusal of a buffer larger than In-Processor-Memory, word for word
        phantom, words = refusal(stub.RunBenchmark, control_pb2.BenchmarkRequest(
            partition="one", min_bytes=1 << 30, mode="phantom"), auth)
        assert code == phantom == grpc.StatusCode.INVALID_ARGUMENT, details
        assert "In-Processor-Memory" in details and details == words
        assert rss_bytes() - before < 64 * MiB  # the inputs were never built
        assert stub.RunBenchmark(control_pb2.BenchmarkRequest(  # the devices are fine
            partition="one", min_bytes=MiB, mode="real"), metadata=auth,
            timeout=120).rows[0].wrong == 0
    finally:
        stub.RemovePartition(control_pb2.PartitionRef(name="one"), metadata=auth)


def test_a_real_bench_too_big_for_this_machine_is_refused_and_the_devices_stay_up(service):
    spec, size = too_big_for_this_machine()
    if spec != "pod16":
        pytest.skip("this machine has room for a pod16 bench as large as its IPUs take")
    stub, auth = service["stub"], service["auth"]
    stub.CreatePartition(control_pb2.CreatePartitionRequest(name="whole", size=16),
                         metadata=auth)
    try:
        before = rss_bytes()
        code, details = refusal(stub.RunBenchmark, control_pb2.BenchmarkRequest(
            partition="whole", min_bytes=size, mode="real"), auth)
        assert code == grpc.StatusCode.RESOURCE_EXHAUSTED, details
        assert "of this machine's memory" in details and "choose -e " in details
        assert rss_bytes() - before < 64 * MiB
        assert all(d.health == "healthy" for d in stub.ListDevices(
            control_pb2.ListDevicesRequest(), metadata=auth).devices)
        assert stub.RunBenchmark(control_pb2.BenchmarkRequest(
            partition="whole", min_bytes=MiB, mode="real"), metadata=auth,
            timeout=120).rows[0].wrong == 0
    finally:
        stub.RemovePartition(control_pb2.PartitionRef(name="whole"), metadata=auth)


def memory_used(service, ipus):
    devices = service["stub"].ListDevices(control_pb2.ListDevicesRequest(),
                                          metadata=service["auth"]).devices
    return sum(d.memory_used_bytes for d in devices if d.id in set(ipus))


def test_bench_tensors_are_freed_when_the_bench_ends_and_rss_comes_back(service, partition):
    stub, auth = service["stub"], service["auth"]
    request = control_pb2.BenchmarkRequest(partition="req", min_bytes=MiB, max_bytes=8 * MiB,
                                           factor=8, mode="real")
    stub.RunBenchmark(request, metadata=auth, timeout=300)  # warm up
    before = rss_bytes()
    result = stub.RunBenchmark(request, metadata=auth, timeout=300)
    assert [row.wrong for row in result.rows] == [0, 0]
    assert memory_used(service, partition.ipus) == 0
    assert rss_bytes() - before < 96 * MiB


def test_bench_rows_stream_one_by_one(service, partition):
    stream = service["stub"].StreamBenchmark(control_pb2.BenchmarkRequest(
        partition="req", min_bytes=MiB, max_bytes=8 * MiB, mode="phantom"),
        metadata=service["auth"], timeout=120)
    results = list(stream)
    assert [len(r.rows) for r in results] == [1, 1, 1, 1]
    assert [r.rows[0].bytes for r in results] == [MiB, 2 * MiB, 4 * MiB, 8 * MiB]
    assert all(r.partition == "req" and r.ipus == 4 for r in results)


def test_a_failing_stream_names_its_error(service, partition):
    stream = service["stub"].StreamBenchmark(control_pb2.BenchmarkRequest(
        partition="req", collective="gather", min_bytes=MiB), metadata=service["auth"])
    with pytest.raises(grpc.RpcError) as info:
        list(stream)
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "unknown collective" in info.value.details()


def test_a_stream_that_fails_midway_keeps_the_rows_done_and_names_the_error(service,
                                                                           partition):
    # 256 MiB and 512 MiB buffers fit a GC200's 900 MB of In-Processor-Memory; 1 GiB does
    # not, and only that size finds out, when it is planned.
    stream = service["stub"].StreamBenchmark(control_pb2.BenchmarkRequest(
        partition="req", min_bytes=256 * MiB, max_bytes=1024 * MiB, mode="phantom"),
        metadata=service["auth"], timeout=120)
    rows = []
    with pytest.raises(grpc.RpcError) as info:
        for result in stream:
            rows += [row.bytes for row in result.rows]
    assert rows == [256 * MiB, 512 * MiB]
    assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "In-Processor-Memory" in info.value.details()
    printed = cli(service, "bench", "allreduce", "--partition", "req", "-b", "256M",
                  "-e", "1G")
    assert printed.returncode == 2 and "In-Processor-Memory" in printed.stderr
    assert [line.split()[0] for line in printed.stdout.splitlines()
            if line.strip() and not line.startswith("#")] == [str(256 * MiB), str(512 * MiB)]


def cli(service, *args):
    env = {**os.environ, "IPUOF_VIPU_API_PORT": str(service["port"]),
           "IPUPOD_TOKEN_FILE": str(service["token_file"])}
    return subprocess.run([sys.executable, "-m", "cluster.cli.main", *args],
                          capture_output=True, text=True, timeout=120, env=env)


def test_bench_json_through_the_service_is_the_standalone_benchs_list(service):
    stub, auth = service["stub"], service["auth"]
    stub.CreatePartition(control_pb2.CreatePartitionRequest(name="all", size=16), metadata=auth)
    try:
        args = ["bench", "allreduce", "-b", "1M", "-e", "4M", "--json"]
        served = cli(service, *args, "--partition", "all")
        here = cli(service, *args, "--topology", "pod16")
    finally:
        stub.RemovePartition(control_pb2.PartitionRef(name="all"), metadata=auth)
    assert served.returncode == 0, served.stderr
    rows, expected = json.loads(served.stdout), json.loads(here.stdout)
    assert isinstance(rows, list) and isinstance(rows[0]["bytes"], int)
    for row in rows + expected:
        row.pop("wall_seconds"), row.pop("in_place_wall_seconds")
    assert rows == expected


def supersteps(pod):
    return sum(c["supersteps"] for s in pod.stats() for c in s["counters"].values())


def test_a_bench_request_runs_its_warm_ups_and_timed_runs_and_may_skip_the_check(
        service, partition):
    stub, auth, pod = service["stub"], service["auth"], service["pod"]
    request = dict(partition="req", min_bytes=64 << 10, mode="real", algorithm="ring")
    before = supersteps(pod)
    [once] = stub.RunBenchmark(control_pb2.BenchmarkRequest(**request), metadata=auth,
                               timeout=120).rows
    middle = supersteps(pod)
    [thrice] = stub.RunBenchmark(control_pb2.BenchmarkRequest(
        **request, iterations=2, warmup=1, check=False), metadata=auth, timeout=120).rows
    assert supersteps(pod) - middle == 3 * (middle - before)  # per placement: 1 + 2 runs
    assert (once.wrong, once.in_place_wrong) == (0, 0)  # unset check: checked
    assert (thrice.wrong, thrice.in_place_wrong) == (-1, -1)
    assert thrice.in_place_wall_seconds > 0 and thrice.sim_seconds == once.sim_seconds


@pytest.mark.parametrize("runs, words", [
    ({"iterations": -1}, "must be 1 to 10,000, not -1"),
    ({"iterations": 10_001}, "must be 1 to 10,000, not 10001"),
    ({"warmup": -3}, "must be 0 to 10,000, not -3"),
    ({"warmup": 2**31 - 1}, "must be 0 to 10,000"),
])
def test_run_counts_out_of_range_are_invalid_arguments_that_say_the_range(
        service, partition, runs, words):
    code, details = refusal(service["stub"].RunBenchmark, control_pb2.BenchmarkRequest(
        partition="req", min_bytes=1024, mode="real", **runs), service["auth"])
    assert code == grpc.StatusCode.INVALID_ARGUMENT and words in details, details
    assert memory_used(service, partition.ipus) == 0  # refused before anything was placed


def table(text):
    """(heading lines, rank lines, column lines, rows split, footer) of a bench table."""
    lines = text.strip("\n").splitlines()
    rows = [line.split() for line in lines if not line.startswith("#")]
    comments = [line for line in lines if line.startswith("#")]
    ranks = [line for line in comments if line.startswith("#  Rank")]
    return comments[0], ranks, comments[-5:-2], rows, comments[-2:]


def test_bench_on_a_partition_takes_n_w_c_and_prints_the_table_of_a_bench_here(
        service, partition):
    served = cli(service, "bench", "allreduce", "--partition", "req", "--mode", "real",
                 "-b", "64K", "-e", "256K", "-f", "4", "-n", "2", "-w", "1", "-c", "1")
    assert served.returncode == 0, served.stderr
    title, ranks, columns, rows, footer = table(served.stdout)
    assert title == "# ipupod bench allreduce: partition req (4 IPUs), mode real, group all " \
                    "(1 x 4 IPUs)"
    assert [int(line.split()[7]) for line in ranks] == list(partition.ipus)  # rank -> IPU
    assert [line.split()[2] for line in ranks] == ["0", "1", "2", "3"]
    here = cli(service, "bench", "allreduce", "--topology", "pod16", "-b", "1M", "-e", "1M")
    assert columns == table(here.stdout)[2]  # the same columns as a bench here
    assert [row[0] for row in rows] == ["65536", "262144"]
    for row in rows:
        assert len(row) == 15 and row[9] == row[14] == "0"  # #wrong, out of and in place
        assert row[5:8] == row[10:13]  # simulated figures: the same for both placements
    assert footer[0].startswith("# Avg bus bandwidth (simulated): ")
    assert footer[1] == "# Out of bounds values : 0 OK"
    unchecked = cli(service, "bench", "allreduce", "--partition", "req", "--mode", "real",
                    "-b", "64K", "-e", "64K", "-c", "0")
    rows, footer = table(unchecked.stdout)[3:]
    assert rows[0][9] == rows[0][14] == "N/A" and "not checked (-c 0)" in footer[1]


def test_the_bench_table_through_the_service_is_the_table_here(service):
    stub, auth = service["stub"], service["auth"]
    made = stub.CreatePartition(control_pb2.CreatePartitionRequest(name="all", size=16),
                                metadata=auth)
    try:
        args = ["bench", "reduce-scatter", "-b", "1M", "-e", "4M"]
        served = cli(service, *args, "--partition", "all")
        here = cli(service, *args, "--topology", "pod16")
        grouped = cli(service, *args, "--partition", "all", "--group", "consecutive:4")
    finally:
        stub.RemovePartition(control_pb2.PartitionRef(name="all"), metadata=auth)
    assert served.returncode == 0, served.stderr
    _, _, columns, served_rows, footer = table(served.stdout)
    _, _, here_columns, here_rows, here_footer = table(here.stdout)
    assert columns == here_columns and footer == here_footer
    wall = [8, 13]
    assert [[f for i, f in enumerate(row) if i not in wall] for row in served_rows] == [
        [f for i, f in enumerate(row) if i not in wall] for row in here_rows]
    title, ranks = table(grouped.stdout)[:2]
    assert title.endswith("group consecutive:4 (4 x 4 IPUs)")
    assert [line.split()[1:] for line in ranks] == [
        ["Rank", str(i % 4), "Group", str(i // 4), "on", "IPU", str(ipu),
         f"r0.m{ipu // 4}.ipu{ipu % 4}"] for i, ipu in enumerate(made.ipus)]


def test_a_bench_on_a_partition_notes_what_its_options_did_not_do(service, partition):
    served = cli(service, "bench", "all-gather", "--partition", "req", "-b", "3", "-e", "3",
                 "-n", "2", "--json")
    assert served.returncode == 0, served.stderr
    assert [row["bytes"] for row in json.loads(served.stdout)] == [16]  # 4 ranks x 1 element
    notes = [line for line in served.stderr.splitlines() if line.startswith("note:")]
    assert notes[0].startswith("note: -n applies only in real mode")
    assert notes[1].startswith("note: -b 3 ran as 16 bytes (4 blocks of 1 float32 element)")
