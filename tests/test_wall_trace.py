"""Real mode's wall clock in a trace: what the card and host actors actually did (compute,
send, receive, reduce), a track per actor, in processes of their own, never the
simulated clock's."""

import json
import subprocess
import sys

import jsonschema
import numpy as np
import pytest

from cluster.cli.train import run
from cluster.model.trace import BOTH_CLOCKS, WALL, WALL_PREFIX, Trace
from cluster.training.config import TrainConfig
from cluster.training.plan import plan_for
from cluster.training.step_parts import STEP_PARTS
from cluster.training.step_trace import PARTS, STEP, run_trace
from ipu_node.device_spec import describe
from ipu_node.pod import EmulatedPod
from ipu_node.wall_spans import COMPUTE, PHASES, RECEIVE, REDUCE, SEND, WallSpans
from ipu_node.wall_trace import CARDS, DRIVER, HOSTS, WallRecorder
from tests.test_trace import SCHEMA


@pytest.fixture(scope="module")
def pod16(ray_session):
    pod = EmulatedPod.launch("pod16")
    yield pod
    pod.shutdown()


def nonzero_kinds(trace, process, track):
    return {s.name for s in trace.spans
            if (s.process, s.track) == (process, track) and s.duration_seconds > 0}


def test_a_real_allreduce_has_a_wall_track_per_actor_with_send_receive_and_reduce(pod16):
    n = pod16.topology.ipu_count
    arrays = [np.full(1 << 16, float(r), dtype=np.float32) for r in range(n)]
    wall = WallRecorder()
    wall.start(pod16)
    result = pod16.collective("allreduce", arrays)
    wall.stop(pod16)
    assert np.all(result.results[0] == sum(range(n)))
    trace = Trace()
    wall.add_to(trace)
    document = trace.document()
    jsonschema.validate(document, SCHEMA)
    assert document["metadata"]["clock"] == WALL
    assert trace.tracks()[CARDS] == [describe(spec) for spec in pod16.specs]
    for spec in pod16.specs:
        assert nonzero_kinds(trace, CARDS, describe(spec)) == {SEND, RECEIVE, REDUCE}
    assert all(process.startswith(WALL_PREFIX) for process in trace.tracks())


def test_actors_keep_no_spans_unless_a_trace_asks(pod16):
    n = pod16.topology.ipu_count
    pod16.collective("allreduce", [np.ones(1024, dtype=np.float32)] * n)
    answers = pod16.call("wall_spans", {i: () for i in range(len(pod16.specs))})
    assert all(answer == {"spans": [], "dropped": 0} for answer in answers.values())


def test_an_actor_keeps_at_most_its_capacity_and_counts_the_rest():
    spans = WallSpans()
    assert spans.begin() == 0  # off: nothing is timed
    spans.start(capacity=2)
    for _ in range(5):
        spans.end(SEND, spans.begin(), bytes=1)
    taken = spans.take()
    assert len(taken["spans"]) == 2 and taken["dropped"] == 3
    assert spans.begin() == 0 and spans.take() == {"spans": [], "dropped": 0}


def test_a_real_training_run_traces_both_clocks_apart(ray_session):
    config = TrainConfig(servers=2, steps=2)  # two servers: the hosts relay between them
    wall = WallRecorder()
    record = run(plan_for(config), None, lambda step, total: None, wall)
    trace = run_trace(record)
    wall.add_to(trace)
    document = trace.document()
    jsonschema.validate(document, SCHEMA)
    assert document["metadata"]["clock"] == BOTH_CLOCKS
    assert document["metadata"]["clocks"]["simulated"] == [STEP, "stages"]
    cards = [spec for spec in wall.specs if spec.ipus]
    hosts = [spec for spec in wall.specs if not spec.ipus]
    assert trace.tracks()[CARDS] == [describe(spec) for spec in cards] and hosts
    assert trace.tracks()[HOSTS] == [describe(spec) for spec in hosts]
    for spec in cards:
        assert nonzero_kinds(trace, CARDS, describe(spec)) == set(PHASES)
    for spec in hosts:
        assert nonzero_kinds(trace, HOSTS, describe(spec)) == {SEND, RECEIVE}
    steps = [s for s in trace.spans if s.process == DRIVER]
    assert [s.name for s in steps] == ["step 1", "step 2"]
    assert all(s.duration_seconds > 0 for s in steps)
    first = [s for s in trace.spans if (s.process, s.track) == (STEP, PARTS)
             and s.args["step"] == 0]  # the simulated clock's spans are as without the wall's
    assert sum(s.duration_seconds for s in first) == pytest.approx(
        record["steps"][0]["sim_seconds"], rel=1e-12)
    assert {s.args["part"] for s in first} <= {part.key for part in STEP_PARTS}
    assert COMPUTE in {s.name for s in trace.spans if s.process == CARDS}


def test_bench_in_real_mode_writes_the_simulated_sweep_and_the_wall_clock(tmp_path,
                                                                        ipupod_here):
    path = tmp_path / "real.json"
    run_ = ipupod_here("bench", "allreduce", "--mode", "real", "--topology", "dss8440",
                       "-b", "64K", "-e", "128K", "--trace", str(path))
    assert run_.returncode == 0, run_.stderr
    assert "simulated and wall time" in run_.stderr
    document = json.loads(path.read_text())
    jsonschema.validate(document, SCHEMA)
    names = {e["args"]["name"] for e in document["traceEvents"]
             if e["name"] == "process_name"}
    assert {"sweep", "links", DRIVER, CARDS} <= names
    sizes = [e["name"] for e in document["traceEvents"] if e["ph"] == "X"
             and e["pid"] == _pid(document, DRIVER)]
    assert sizes == ["allreduce 64K", "allreduce 128K"]


def _pid(document, process):
    return next(e["pid"] for e in document["traceEvents"]
                if e["name"] == "process_name" and e["args"]["name"] == process)


def both_clocks_trace():
    trace = Trace()
    trace.span("sweep", "phases", "reduce-scatter", 0.0, 1e-6)
    wall = WallRecorder(origin_ns=1_000)
    wall.mark("sizes", "allreduce 1K", 1_000)
    wall.add_to(trace)
    return trace.document()


def test_trace_show_draws_each_clock_on_its_own_axis():
    from cluster.cli.trace import split_clocks

    parts = split_clocks(both_clocks_trace())
    assert list(parts) == ["simulated", "wall"]
    names = {clock: {e["args"]["name"] for e in part["traceEvents"]
                     if e["name"] == "process_name"} for clock, part in parts.items()}
    assert names == {"simulated": {"sweep"}, "wall": {DRIVER}}
    assert [part["metadata"]["clock"] for part in parts.values()] == ["simulated", "wall"]


@pytest.mark.parametrize("clock", ["", "wall", "simulated"])
def test_trace_show_draws_a_trace_of_both_clocks(tmp_path, clock):
    path = tmp_path / "both.json"
    path.write_text(json.dumps(both_clocks_trace()))
    chosen = ["--clock", clock] if clock else []
    result = subprocess.run([sys.executable, "-m", "cluster.cli.main", "trace", "show",
                             str(path), "--out", str(tmp_path / "c.png"), *chosen],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG"


def test_trace_show_refuses_a_clock_the_trace_does_not_hold(tmp_path):
    trace = Trace()
    trace.span("sweep", "phases", "reduce-scatter", 0.0, 1e-6)
    path = tmp_path / "sim.json"
    path.write_text(json.dumps(trace.document()))
    result = subprocess.run([sys.executable, "-m", "cluster.cli.main", "trace", "show",
                             str(path), "--out", str(tmp_path / "c.png"), "--clock", "wall"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "no spans on the wall clock" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "c.png").exists()


def test_a_trace_says_what_the_actors_dropped_or_could_not_send():
    from ipu_node.device_spec import DeviceSpec

    card = DeviceSpec(name="card0", kind="C2", ipus=(0, 1), server="s0")
    wall = WallRecorder(origin_ns=1_000, specs=[card], recorded={0: {
        "spans": [(SEND, 500, 2_000, {}), (RECEIVE, 2_000, 3_000, {})], "dropped": 7}})
    trace = Trace()
    wall.add_to(trace)
    spans = [(s.name, s.start_seconds, s.duration_seconds) for s in trace.spans]
    assert spans == [(SEND, 0.0, 1e-6), (RECEIVE, 1e-6, 1e-6)]  # cut at the run's start
    assert trace.metadata["wall_spans_dropped"] == {"card0": 7}
    failed = WallRecorder(specs=[card], problem="the actors' spans could not be gathered: x")
    trace = Trace()
    failed.add_to(trace)
    assert trace.tracks()[CARDS] == [describe(card)] and "wall_problem" in trace.metadata
