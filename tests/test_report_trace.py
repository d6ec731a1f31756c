"""``--trace FILE`` on the reports: the timeline of one configuration the report ran, in
FILE and drawn in the report's README."""

import json

import jsonschema
import pytest

from cluster.cli.report_trace import TRACE_PNG
from cluster.model.trace import BOTH_CLOCKS
from ipu_node.wall_trace import CARDS
from tests.test_trace import SCHEMA, ipupod


def traced(tmp_path, *args, run=ipupod):
    out, path = tmp_path / "report", tmp_path / "step.json"
    result = run(*args, "--out", str(out), "--trace", str(path))
    assert result.returncode == 0, result.stderr
    document = json.loads(path.read_text())
    jsonschema.validate(document, SCHEMA)
    readme = (out / "README.md").read_text()
    assert f"![A step's timeline]({TRACE_PNG})" in readme and str(path) in readme
    assert (out / TRACE_PNG).read_bytes()[:4] == b"\x89PNG"
    return document, readme


def test_scaling_report_traces_the_last_topology_that_fits(tmp_path):
    document, readme = traced(tmp_path, "scaling-report", "--topologies", "pod16,pod64",
                              "--model", "mlp")
    assert document["metadata"]["topology"] == "pod64"
    assert "the last topology that fits, pod64" in readme


def test_pipeline_report_traces_the_fastest_pipeline(tmp_path):
    document, readme = traced(tmp_path, "pipeline-report", "--ipus-per-replica", "2",
                              "--schedules", "fill-drain,1f1b", "--micro-batches", "4,8",
                              "--model", "mlp", "--json")
    out = tmp_path / "report"
    rows = json.loads(ipupod("pipeline-report", "--ipus-per-replica", "2", "--schedules",
                             "fill-drain,1f1b", "--micro-batches", "4,8", "--model", "mlp",
                             "--json", "--out", str(out)).stdout)["rows"]
    fastest = max(rows, key=lambda row: row["throughput"])
    metadata = document["metadata"]
    assert (metadata["pipeline_schedule"], metadata["ipus_per_replica"]) == (
        fastest["schedule"], 2)
    assert f"{fastest['micro_batches']} micro-batches" in readme


def test_train_report_traces_the_run_on_the_most_servers_with_its_wall_clock(tmp_path,
                                                                           ipupod_here):
    document, readme = traced(tmp_path, "train-report", "--servers", "1,2", "--real-up-to",
                              "2", "--steps", "1", run=ipupod_here)
    assert document["metadata"]["clock"] == BOTH_CLOCKS
    assert document["metadata"]["replicas"] == 32  # 2 servers of 16 IPUs, 1 IPU each
    names = {e["args"]["name"] for e in document["traceEvents"] if e["name"] == "process_name"}
    assert CARDS in names and "the run on 2 servers" in readme


@pytest.mark.parametrize("command", [
    ["scaling-report", "--topologies", "pod16", "--model", "mlp"],
    ["train-report", "--servers", "1", "--real-up-to", "0", "--steps", "1"],
])
def test_a_report_trace_into_a_missing_folder_is_refused_before_any_run(tmp_path, command):
    out = tmp_path / "report"
    result = ipupod(*command, "--out", str(out), "--trace", str(tmp_path / "no" / "t.json"))
    assert result.returncode == 2 and "does not exist" in result.stderr
    assert "Traceback" not in result.stderr and not out.exists()
