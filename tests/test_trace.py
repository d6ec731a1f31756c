"""Timelines (``--trace FILE``): the spans a hand-costed collective must have, the format
the Perfetto UI reads, aggregation at scale, and a file that is whole or absent."""

import itertools
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from cluster.cli.trace import MAX_ROWS, rows_of
from cluster.model.spec import load_topology
from cluster.model.topology_yaml import load_yaml_topology
from cluster.model.trace import Trace, write_trace
from cluster.training.config import TrainConfig
from cluster.training.pipeline.lock_step import lock_step_op_times, lock_step_time
from cluster.training.pipeline.schedules import pipeline_schedule
from cluster.training.pipeline.timing import op_times, pipeline_time
from cluster.training.plan import plan_for
from cluster.training.step_collectives import SHARD_EXCHANGE, SHARDED_REDUCTION
from cluster.training.step_parts import STEP_PARTS
from cluster.training.step_trace import CYCLES, PARTS, STEP, config_trace, run_trace
from cluster.training.trainer import train
from gcl import plan, simulate
from gcl.sweep_trace import LINKS, MAX_TRACKS, SWEEP, SweepTrace

SCHEMA = json.loads((Path(__file__).parent / "trace_event_schema.json").read_text())
RING4 = """\
apiVersion: ipupod/v1
kind: Topology
metadata: {name: ring4}
spec:
  processor: GC200
  sync_ns: {local: 0, global: 0}
  memory_bandwidth_GBps: .inf
  linkTypes: [{name: ring-link, bandwidth_GBps: 50, latency_ns: 1000}]
  nodes: [{name: ipu, kind: ipu, count: 4}]
  generators: [{ring: ipu, type: ring-link}]
"""
A, B = 1e-6, 50e9  # the ring link's latency (s) and bandwidth (bytes/s)


def ipupod(*args):
    return subprocess.run([sys.executable, "-m", "cluster.cli.main", *args],
                          capture_output=True, text=True, timeout=600)


@pytest.fixture
def ring4(tmp_path):
    path = tmp_path / "ring4.yaml"
    path.write_text(RING4)
    return path


def traced_ring(path, sizes_bytes, detail="auto"):
    topology = load_yaml_topology(path)
    traced = SweepTrace(topology, detail)
    for nbytes in sizes_bytes:
        schedule = plan("allreduce", topology, nbytes // 4, algorithm_name="ring")
        traced.add(schedule, simulate(schedule, topology))
    return traced.trace


def spans_on(trace, process, track):
    return [(s.name, s.start_seconds, s.duration_seconds) for s in trace.spans
            if (s.process, s.track) == (process, track)]


def assert_spans(got, expected):
    """Same names in order; same starts and durations to 1e-12 relative (the cost model
    sums the same terms in another order: the last bit may differ)."""
    assert [name for name, _, _ in got] == [name for name, _, _ in expected]
    times = [t for _, start, duration in got for t in (start, duration)]
    assert times == pytest.approx([t for _, s, d in expected for t in (s, d)], rel=1e-12)


def test_a_4_ipu_ring_allreduce_has_the_hand_costed_phases(ring4):
    size = 16_000  # bytes: a chunk of size / 4 per ring step
    step = A + size / 4 / B  # sync 0, reduction free (infinite memory bandwidth)
    half = 3 * step  # n - 1 = 3 steps per phase
    trace = traced_ring(ring4, [size])
    expected = [("reduce-scatter", 0.0, half), ("all-gather", half, half)]
    assert_spans(spans_on(trace, SWEEP, "phases"), expected)
    assert_spans(spans_on(trace, SWEEP, "sizes"), [("allreduce 15.625K", 0.0, 2 * half)])
    for ipu in range(4):  # every IPU sends and receives in both phases
        assert_spans(spans_on(trace, "IPUs in no machine", f"ipu{ipu}"), expected)
    links = [s for s in trace.spans if s.process == LINKS]
    assert [s.args["bytes"] for s in links] == [3 * size, 3 * size]  # 3 steps, 4 chunks


def test_sizes_follow_one_another_on_the_time_axis(ring4):
    trace = traced_ring(ring4, [4_000, 16_000, 64_000])
    sizes = spans_on(trace, SWEEP, "sizes")
    assert sizes[0][1] == 0.0
    for before, after in itertools.pairwise(sizes):
        assert after[1] == before[1] + before[2]
    phases = spans_on(trace, SWEEP, "phases")
    assert sum(duration for _, _, duration in phases) == pytest.approx(
        sum(duration for _, _, duration in sizes), rel=1e-12)


def test_the_trace_is_the_trace_event_format_in_microseconds(ring4, tmp_path):
    trace = traced_ring(ring4, [16_000])
    written = write_trace(trace, tmp_path / "t.json")
    document = json.loads((tmp_path / "t.json").read_text())
    assert written == (tmp_path / "t.json").stat().st_size
    jsonschema.validate(document, SCHEMA)
    assert document["metadata"]["clock"] == "simulated"
    names = {e["args"]["name"] for e in document["traceEvents"] if e["name"] == "process_name"}
    assert names == {SWEEP, LINKS, "IPUs in no machine"}
    phase = next(e for e in document["traceEvents"] if e["name"] == "all-gather")
    assert phase["ts"] == pytest.approx(3 * (A + 4_000 / B) * 1e6, abs=1e-6)  # microseconds


def test_a_schema_breach_is_caught():  # the schema test above can fail
    bad = {"traceEvents": [{"name": "x", "ph": "X", "pid": 1, "tid": 1, "ts": 0}],
           "displayTimeUnit": "ns", "metadata": {"clock": "simulated"}}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)


def test_a_failed_write_leaves_no_file(tmp_path, monkeypatch):
    trace = Trace()
    trace.span("p", "t", "s", 0.0, 1.0)

    def refuse(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("cluster.model.trace.os.replace", refuse)
    with pytest.raises(OSError):
        write_trace(trace, tmp_path / "t.json")
    assert list(tmp_path.iterdir()) == []


def test_bench_trace_leaves_the_table_as_it_was(tmp_path):
    args = ["bench", "allreduce", "--topology", "pod16", "-b", "1M", "-e", "4M"]
    plain = ipupod(*args)
    traced = ipupod(*args, "--trace", str(tmp_path / "b.json"))
    assert traced.returncode == 0, traced.stderr
    def simulated(out):  # every line but the wall-clock columns
        return [line if line.startswith("#") else line.split()[:8] + line.split()[10:13]
                for line in out.splitlines()]

    assert simulated(traced.stdout) == simulated(plain.stdout)
    document = json.loads((tmp_path / "b.json").read_text())
    jsonschema.validate(document, SCHEMA)
    processes = {e["args"]["name"] for e in document["traceEvents"]
                 if e["name"] == "process_name"}
    assert processes == {SWEEP, LINKS} | {f"r0.m{m} (IPU-M2000)" for m in range(4)}
    tracks = [e["args"]["name"] for e in document["traceEvents"] if e["name"] == "thread_name"]
    assert [t for t in tracks if ".ipu" in t] == [f"r0.m{i // 4}.ipu{i % 4}" for i in range(16)]
    assert document["metadata"]["detail"] == "full"
    assert "trace written" in traced.stderr


@pytest.mark.parametrize("args, words", [
    (["--trace-detail", "full", "--topology", "pod65536"], "above the 4,096"),
    (["--trace-detail", "servers", "NO-TRACE"], "give --trace FILE too"),
])
def test_bench_trace_refuses_what_it_cannot_draw(tmp_path, args, words):
    trace = [] if "NO-TRACE" in args else ["--trace", str(tmp_path / "t.json")]
    result = ipupod("bench", "allreduce", "-b", "1M", "-e", "1M",
                    *[a for a in args if a != "NO-TRACE"], *trace)
    assert result.returncode == 2 and words in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "t.json").exists()


def test_bench_trace_into_a_missing_folder_is_refused_before_the_run(tmp_path):
    result = ipupod("bench", "allreduce", "--trace", str(tmp_path / "no" / "t.json"))
    assert result.returncode == 2 and "does not exist" in result.stderr
    assert result.stdout == ""


def test_a_pod65536_bench_trace_is_aggregated_and_under_50_mb(tmp_path):
    path = tmp_path / "pod65536.json"
    result = ipupod("bench", "allreduce", "--topology", "pod65536", "--trace", str(path))
    assert result.returncode == 0, result.stderr
    assert path.stat().st_size < 50e6
    document = json.loads(path.read_text())
    metadata = document["metadata"]
    assert metadata["detail"] == "servers" and "instead of one per IPU" in metadata[
        "aggregation"]
    tracks = sum(1 for e in document["traceEvents"] if e["name"] == "thread_name")
    assert tracks <= MAX_TRACKS
    sizes = [e for e in document["traceEvents"] if e.get("tid") == 1 and e["pid"] == 1
             and e["ph"] == "X"]
    assert len(sizes) == 8  # 1M to 128M: every size is on the sweep's track


@pytest.mark.parametrize("shape", [[], ["--ipus-per-replica", "4", "--gradient-accumulation",
                                        "8"]])
def test_train_trace_spans_add_up_to_the_step_parts_json_prints(tmp_path, shape):
    path = tmp_path / "train.json"
    result = ipupod("train", "--mode", "phantom", "--topology", "pod16", "--model",
                    "resnet50", "--steps", "3", *shape, "--json", "--trace", str(path))
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    trace = run_trace(record)
    for row in record["steps"]:
        spans = [s for s in trace.spans
                 if (s.process, s.track) == (STEP, PARTS) and s.args["step"] == row["step"]]
        parts = [(part.label, row[part.key]) for part in STEP_PARTS if row[part.key] > 0]
        assert [(s.name, s.duration_seconds) for s in spans] == parts  # exactly, part by part
        assert sum(s.duration_seconds for s in spans) == row["sim_seconds"]  # exactly
        for before, after in itertools.pairwise(spans):  # one after the other, no gap
            assert after.start_seconds == before.start_seconds + before.duration_seconds
    starts = [s.start_seconds for s in trace.spans if s.name == STEP_PARTS[0].label]
    assert starts == pytest.approx([k * record["steps"][0]["sim_seconds"] for k in range(3)],
                                   rel=1e-12)
    document = json.loads(path.read_text())
    jsonschema.validate(document, SCHEMA)
    written = [e for e in document["traceEvents"] if e["ph"] == "X" and e["pid"] == 1
               and e["tid"] == 1]  # the parts' track
    assert [e["dur"] for e in written] == pytest.approx(
        [s.duration_seconds * 1e6 for s in trace.spans if (s.process, s.track) == (STEP, PARTS)],
        abs=1e-6)
    stages = {e["args"]["name"] for e in document["traceEvents"] if e["name"] == "thread_name"
              and e["pid"] == 2}
    assert len(stages) == (4 if shape else 1)


# A 2-stage pipeline, 4 micro-batches: forward 1 s, backward 2 s on each stage; an
# activation takes 0.5 s across the boundary, its gradient 0.25 s. (stage, pass, micro):
# (start, end), worked out by hand: each op starts when its IPU is free and its input has
# arrived (the op it needs, plus the transfer).
HAND_COSTED = {
    "fill-drain": {
        (0, "forward", 0): (0, 1), (0, "forward", 1): (1, 2), (0, "forward", 2): (2, 3),
        (0, "forward", 3): (3, 4),
        (1, "forward", 0): (1.5, 2.5), (1, "forward", 1): (2.5, 3.5),
        (1, "forward", 2): (3.5, 4.5), (1, "forward", 3): (4.5, 5.5),
        (1, "backward", 0): (5.5, 7.5), (1, "backward", 1): (7.5, 9.5),
        (1, "backward", 2): (9.5, 11.5), (1, "backward", 3): (11.5, 13.5),
        (0, "backward", 0): (7.75, 9.75), (0, "backward", 1): (9.75, 11.75),
        (0, "backward", 2): (11.75, 13.75), (0, "backward", 3): (13.75, 15.75),
    },
    "1f1b": {
        (0, "forward", 0): (0, 1), (0, "forward", 1): (1, 2),
        (1, "forward", 0): (1.5, 2.5), (1, "backward", 0): (2.5, 4.5),
        (1, "forward", 1): (4.5, 5.5),  # its input arrived at 2.5; the IPU was busy
        (0, "backward", 0): (4.75, 6.75), (0, "forward", 2): (6.75, 7.75),
        (1, "backward", 1): (5.5, 7.5), (0, "backward", 1): (7.75, 9.75),
        (1, "forward", 2): (8.25, 9.25), (1, "backward", 2): (9.25, 11.25),
        (0, "forward", 3): (9.75, 10.75), (1, "forward", 3): (11.25, 12.25),
        (0, "backward", 2): (11.5, 13.5), (1, "backward", 3): (12.25, 14.25),
        (0, "backward", 3): (14.5, 16.5),
    },
}


@pytest.mark.parametrize("name", sorted(HAND_COSTED))
def test_a_2_stage_pipeline_has_the_hand_costed_op_times(name):
    schedule = pipeline_schedule(name, 2, 4)
    times = op_times(schedule, [1.0, 1.0], [2.0, 2.0], [0.5], [0.25])
    got = {(op.stage, op.pass_.value, op.micro): span for op, span in times.items()}
    assert got == HAND_COSTED[name]  # exactly: every figure is a sum of binary fractions
    span = pipeline_time(schedule, [1.0, 1.0], [2.0, 2.0], [0.5], [0.25]).span_seconds
    assert max(end for _, end in got.values()) == span


def test_a_pipelined_train_trace_draws_every_op_inside_the_pipeline_parts(tmp_path):
    path = tmp_path / "train.json"
    result = ipupod("train", "--mode", "phantom", "--topology", "pod16", "--model",
                    "resnet50", "--steps", "2", "--ipus-per-replica", "4",
                    "--gradient-accumulation", "8", "--recompute", "--json", "--trace",
                    str(path))
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    document = json.loads(path.read_text())
    jsonschema.validate(document, SCHEMA)
    step = record["steps"][0]
    pipeline_us = 1e6 * (step["compute_seconds"] + step["pipeline_bubble_seconds"]
                         + step["inter_stage_seconds"])
    ops = [e for e in document["traceEvents"] if e["ph"] == "X" and e["pid"] == 2
           and e["args"]["step"] == 0]
    assert {e["name"] for e in ops} == {"forward", "recompute", "backward"}
    assert len(ops) == 4 * 8 * 3  # stages x micro-batches x (forward, recompute, backward)
    assert max(e["ts"] + e["dur"] for e in ops) == pytest.approx(pipeline_us, rel=1e-9)
    for stage, busy in enumerate(step["stage_compute_seconds"]):
        drawn = sum(e["dur"] for e in ops if e["tid"] == stage + 1)
        assert drawn == pytest.approx(busy * 1e6, rel=1e-9)
    assert document["metadata"]["stages"].startswith("each op of the pipeline")


def sweep_document(spec, detail="auto"):
    topology = load_topology(spec, "seed")
    traced = SweepTrace(topology, detail)
    schedule = plan("allreduce", topology, 1 << 18)
    traced.add(schedule, simulate(schedule, topology))
    return traced.trace.document()


def test_trace_show_draws_a_row_per_track_up_to_pod64():
    rows, note = rows_of(sweep_document("pod64"))
    assert note == "" and len(rows) == 2 + 3 + 64  # sweep, link types, IPUs
    assert rows[0].label == "sweep / sizes" and rows[-1].label.endswith("r0.m15.ipu3")
    assert all(row.spans for row in rows if ".ipu" in row.label)


def test_trace_show_summarises_pod256_with_every_process_on_a_row():
    document = sweep_document("pod256")
    rows, note = rows_of(document)
    processes = [e for e in document["traceEvents"] if e["name"] == "process_name"]
    assert len(rows) <= MAX_ROWS and "processes as one row each" in note
    assert rows[-1].label == "r3.m15 (IPU-M2000) (all 4 tracks)"  # the last process is there
    assert len(processes) == 2 + 64


def test_trace_show_writes_a_png(tmp_path):
    trace, png = tmp_path / "t.json", tmp_path / "t.png"
    ipupod("bench", "allreduce", "--topology", "pod16", "-e", "4M", "--trace", str(trace))
    result = ipupod("trace", "show", str(trace), "--out", str(png))
    assert result.returncode == 0, result.stderr
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 10_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.json", "t.png"]  # no leftovers


@pytest.mark.parametrize("content, words", [(b"\x89PNG", "not JSON"), (b"[]", "traceEvents"),
                                            (b'{"traceEvents": [{"ph": "X"}]}', "finite number")])
def test_trace_show_refuses_what_is_not_a_trace(tmp_path, content, words):
    (tmp_path / "t.json").write_bytes(content)
    result = ipupod("trace", "show", str(tmp_path / "t.json"), "--out",
                    str(tmp_path / "t.png"))
    assert result.returncode == 2 and words in result.stderr, result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "t.png").exists()


def test_train_trace_draws_the_gradient_allreduce_phases_where_its_parts_are(tmp_path):
    path = tmp_path / "train.json"
    result = ipupod("train", "--mode", "phantom", "--topology", "pod256", "--model",
                    "resnet50", "--steps", "1", "--json", "--trace", str(path))
    assert result.returncode == 0, result.stderr
    step = json.loads(result.stdout)["steps"][0]
    events = json.loads(path.read_text())["traceEvents"]
    track = next(e["tid"] for e in events if e["name"] == "thread_name"
                 and e["args"]["name"] == "gradient allreduce")
    phases = [e for e in events if e["ph"] == "X" and e["pid"] == 1 and e["tid"] == track]
    local = next(e for e in events if e["ph"] == "X" and e["name"] == "local allreduce")
    assert phases[0]["ts"] == local["ts"]
    assert {e["args"]["scope"] for e in phases} == {"local", "global"}  # 4 racks
    for scope in ("local", "global"):  # each phase written to the picosecond
        drawn = sum(e["dur"] for e in phases if e["args"]["scope"] == scope)
        assert drawn == pytest.approx(step[f"{scope}_allreduce_seconds"] * 1e6, abs=1e-5)


COMPLETE_STEPS = {  # configurations whose step runs more than compute and one allreduce
    "popart": ["--topology", "pod16", "--model", "resnet50", "--ipus-per-replica", "4",
               "--gradient-accumulation", "8", "--pipeline-schedule", "popart"],
    "sharded": ["--topology", "pod256", "--model", "resnet50", "--optimizer-state", "sharded"],
    "columns": ["--topology", "pod16", "--model", "mlp", "--ipus-per-replica", "4",
                "--split", "shard"],
}


def train_trace(tmp_path, args):
    path = tmp_path / "train.json"
    result = ipupod("train", "--mode", "phantom", "--steps", "2", *args, "--json", "--trace",
                    str(path))
    assert result.returncode == 0, result.stderr
    document = json.loads(path.read_text())
    jsonschema.validate(document, SCHEMA)
    record = json.loads(result.stdout)
    return record, document


def track_spans(document, track, step=0):
    events = document["traceEvents"]
    pid, tid = next((e["pid"], e["tid"]) for e in events if e["name"] == "thread_name"
                    and e["args"]["name"] == track)
    return [e for e in events if e["ph"] == "X" and (e["pid"], e["tid"]) == (pid, tid)
            and e["args"]["step"] == step]


@pytest.mark.parametrize("name", sorted(COMPLETE_STEPS))
def test_every_step_trace_adds_up_exactly_to_the_parts_json_prints(tmp_path, name):
    record, _ = train_trace(tmp_path, COMPLETE_STEPS[name])
    trace = run_trace(record)
    for row in record["steps"]:
        spans = [s for s in trace.spans
                 if (s.process, s.track) == (STEP, PARTS) and s.args["step"] == row["step"]]
        parts = [(part.label, row[part.key]) for part in STEP_PARTS if row[part.key] > 0]
        assert [(s.name, s.duration_seconds) for s in spans] == parts  # exactly
        assert sum(s.duration_seconds for s in spans) == row["sim_seconds"]  # exactly


def test_a_lock_step_pipeline_is_drawn_cycle_by_cycle(tmp_path):
    record, document = train_trace(tmp_path, COMPLETE_STEPS["popart"])
    step = record["steps"][0]
    cycles = track_spans(document, CYCLES)
    pipeline = (step["compute_seconds"] + step["pipeline_bubble_seconds"]
                + step["inter_stage_seconds"])
    rounding = 1e-6 * len(cycles)  # each written to the picosecond
    assert sum(e["dur"] for e in cycles) == pytest.approx(pipeline * 1e6, abs=rounding)
    assert sum(e["dur"] for e in cycles if e["name"] == "copies") == pytest.approx(
        step["inter_stage_seconds"] * 1e6, abs=rounding)
    ops = [e for e in document["traceEvents"] if e["ph"] == "X" and e["pid"] == 2
           and e["args"]["step"] == 0]
    assert len(ops) == 4 * 8 * 3  # stages x micro-batches x (forward, recompute, backward)
    assert max(e["ts"] + e["dur"] for e in ops) <= pipeline * 1e6 * (1 + 1e-12)
    for stage, busy in enumerate(step["stage_compute_seconds"]):
        drawn = sum(e["dur"] for e in ops if e["tid"] == stage + 1)
        assert drawn == pytest.approx(busy * 1e6, rel=1e-9)


# PopART's 2 stages, 3 micro-batches: forward 1 s, backward 2 s, each cycle's copies 0.5 s.
# Cycles (stage 0's ops; stage 1's): 0 (F0; -), 1 (F1; F0 B0), 2 (F2 B0; F1 B1),
# 3 (B1; F2 B2), 4 (B2; -); a cycle lasts its busier IPU, then the copies.
HAND_COSTED_CYCLES = [(0.0, 1.0), (1.5, 3.0), (5.0, 3.0), (8.5, 3.0), (12.0, 2.0)]
HAND_COSTED_LOCK_STEP = {
    (0, "forward", 0): (0, 1), (0, "forward", 1): (1.5, 2.5), (1, "forward", 0): (1.5, 2.5),
    (1, "backward", 0): (2.5, 4.5), (0, "forward", 2): (5, 6), (0, "backward", 0): (6, 8),
    (1, "forward", 1): (5, 6), (1, "backward", 1): (6, 8), (0, "backward", 1): (8.5, 10.5),
    (1, "forward", 2): (8.5, 9.5), (1, "backward", 2): (9.5, 11.5),
    (0, "backward", 2): (12, 14),
}


def test_a_lock_step_pipeline_has_the_hand_costed_cycles_and_op_times():
    schedule = pipeline_schedule("popart", 2, 3)
    times, cycles = lock_step_op_times(schedule, [1.0, 1.0], [2.0, 2.0], 0.5)
    got = {(op.stage, op.pass_.value, op.micro): span for op, span in times.items()}
    assert got == HAND_COSTED_LOCK_STEP and cycles == HAND_COSTED_CYCLES  # exactly
    priced = lock_step_time(schedule, [1.0, 1.0], [2.0, 2.0], 0.5)
    assert sum(w for _, w in cycles) + 0.5 * len(cycles) == priced.span_seconds


def test_the_sharded_optimizer_state_collectives_are_each_their_part(tmp_path):
    record, document = train_trace(tmp_path, COMPLETE_STEPS["sharded"])
    step = record["steps"][0]
    assert step["weight_gather_seconds"] > 0 and step["global_allreduce_seconds"] > 0
    spans = track_spans(document, SHARDED_REDUCTION)
    parts = {e["args"]["part"]: e for e in track_spans(document, PARTS)}
    assert [e["name"] for e in spans] == ["reduce-scatter in each rack",
                                          "allreduce of each shard across racks",
                                          "all-gather in each rack"]
    for span in spans:
        part = parts[span["args"]["part"]]
        assert (span["ts"], span["dur"]) == (part["ts"], part["dur"])  # exactly
        assert span["dur"] == round(step[span["args"]["part"]] * 1e6, 6)


def test_a_column_split_draws_its_collectives_adding_up_to_the_shard_exchange():
    config = TrainConfig(topology="pod16", model="mlp", ipus_per_replica=4, split="shard",
                         mode="phantom", replicas_per_server=0, accumulation=3, steps=2)
    plan = plan_for(config)
    record = train(plan)
    trace = config_trace(record, plan)
    for row in record["steps"]:
        drawn = [s for s in trace.spans if s.track == SHARD_EXCHANGE
                 and s.args["step"] == row["step"]]
        assert [s.name for s in drawn] == ["broadcast", "all-gather", "reduce-scatter"]
        assert sum(s.duration_seconds for s in drawn) == row["shard_exchange_seconds"]  # exactly
        part = next(s for s in trace.spans if s.track == PARTS and s.args["step"] == row["step"]
                    and s.name == "shard exchange")
        assert drawn[0].start_seconds == part.start_seconds
        for before, after in itertools.pairwise(drawn):
            assert after.start_seconds == before.start_seconds + before.duration_seconds
    jsonschema.validate(trace.document(), SCHEMA)
