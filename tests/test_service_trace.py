"""A bench's trace through the service (a real gRPC server on 127.0.0.1): sent after the
rows in bounded pieces, refused in one clear status above the bound, written by
``ipupod bench --partition NAME --trace FILE``."""

import json
import os
import subprocess
import sys

import grpc
import jsonschema
import pytest

from cluster.service import bench_trace
from cluster.service.control_server import start_server
from cluster.service.token_auth import write_token
from ipu_node.pod import EmulatedPod
from ipu_node.wall_trace import CARDS
from ipupod_proto import control_pb2, control_pb2_grpc
from tests.test_trace import SCHEMA


@pytest.fixture(scope="module")
def service(ray_session, tmp_path_factory):
    token_file = tmp_path_factory.mktemp("svc") / "token"
    pod = EmulatedPod.launch("pod16")
    token = write_token(token_file)
    server, port, _ = start_server(pod, token, "127.0.0.1", 0)  # no metrics endpoint
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    stub = control_pb2_grpc.ControlStub(channel)
    auth = (("authorization", f"Bearer {token}"),)
    stub.CreatePartition(control_pb2.CreatePartitionRequest(name="traced", size=4),
                         metadata=auth)
    yield {"port": port, "token_file": token_file, "stub": stub, "auth": auth}
    stub.RemovePartition(control_pb2.PartitionRef(name="traced"), metadata=auth)
    channel.close()
    server.stop(1).wait(3)
    pod.shutdown()


def stream(service, **fields):
    request = control_pb2.BenchmarkRequest(partition="traced", collective="allreduce",
                                           min_bytes=1 << 16, max_bytes=1 << 18, **fields)
    return list(service["stub"].StreamBenchmark(request, metadata=service["auth"]))


def trace_of(results):
    pieces = [r for r in results if r.trace_chunk]
    data = b"".join(r.trace_chunk for r in pieces)
    assert all(r.trace_bytes == len(data) and not r.rows for r in pieces)
    document = json.loads(data)
    jsonschema.validate(document, SCHEMA)
    return pieces, document


def test_a_streamed_bench_sends_its_trace_after_the_rows_in_pieces(service, monkeypatch):
    monkeypatch.setattr(bench_trace, "TRACE_CHUNK_BYTES", 4096)
    results = stream(service, trace=True)
    rows = [r for r in results if r.rows]
    assert len(rows) == 3 and results[:3] == rows  # the rows first, then the trace
    pieces, document = trace_of(results)
    assert len(pieces) > 1 and all(len(r.trace_chunk) <= 4096 for r in pieces)
    assert document["metadata"]["partition"] == "traced"
    assert document["metadata"]["clock"] == "simulated"
    sizes = [e["name"] for e in document["traceEvents"] if e["ph"] == "X" and e["pid"] == 1
             and e["tid"] == 1]
    assert sizes == ["allreduce 64K", "allreduce 128K", "allreduce 256K"]


def test_a_real_bench_through_the_service_traces_the_devices_wall_clock(service):
    _, document = trace_of(stream(service, trace=True, mode="real"))
    names = {e["args"]["name"] for e in document["traceEvents"] if e["name"] == "process_name"}
    assert CARDS in names and document["metadata"]["clock"] == "simulated and wall"
    kinds = {e["name"] for e in document["traceEvents"] if e["ph"] == "X" and e["dur"] > 0}
    assert {"send", "receive", "reduce"} <= kinds


def test_a_trace_above_the_bound_ends_the_stream_with_a_clear_status(service, monkeypatch):
    monkeypatch.setattr(bench_trace, "MAX_TRACE_BYTES", 1000)
    request = control_pb2.BenchmarkRequest(partition="traced", min_bytes=1 << 16, trace=True)
    got = []
    with pytest.raises(grpc.RpcError) as raised:
        for result in service["stub"].StreamBenchmark(request, metadata=service["auth"]):
            got.append(result)
    assert raised.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "--trace-detail link-types" in raised.value.details()
    assert [len(r.rows) for r in got] == [1]  # the rows came; no piece of the trace did


@pytest.mark.parametrize("fields, words", [
    ({"trace_detail": "full"}, "set trace too"),
    ({"trace": True, "trace_detail": "every-ipu"}, "trace_detail takes one of"),
])
def test_trace_fields_the_service_cannot_use_are_invalid(service, fields, words):
    with pytest.raises(grpc.RpcError) as raised:
        stream(service, **fields)
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert words in raised.value.details()


def test_run_benchmark_sends_no_trace_and_says_where_to_ask(service):
    request = control_pb2.BenchmarkRequest(partition="traced", min_bytes=1 << 16, trace=True)
    with pytest.raises(grpc.RpcError) as raised:
        service["stub"].RunBenchmark(request, metadata=service["auth"])
    assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "StreamBenchmark" in raised.value.details()


def test_bench_on_a_partition_writes_the_trace_the_service_sends(service, tmp_path):
    path = tmp_path / "service.json"
    env = {**os.environ, "IPUOF_VIPU_API_PORT": str(service["port"]),
           "IPUPOD_TOKEN_FILE": str(service["token_file"])}
    result = subprocess.run(
        [sys.executable, "-m", "cluster.cli.main", "bench", "allreduce", "--partition",
         "traced", "-b", "64K", "-e", "64K", "--trace", str(path), "--trace-detail",
         "link-types"], capture_output=True, text=True, timeout=120, env=env)
    assert result.returncode == 0, result.stderr
    assert "from the service" in result.stderr and "allreduce" in result.stdout
    document = json.loads(path.read_text())
    jsonschema.validate(document, SCHEMA)
    assert document["metadata"]["detail"] == "link-types"
