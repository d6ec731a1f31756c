"""One set of defaults: train, calibrate and every report price the same step for the same
options (defaults only, too), spell out every setting they assumed, run the built-in
workloads at their defaults, and hint only at configurations that run."""

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

PARTS = ("compute_seconds", "pipeline_bubble_seconds", "inter_stage_seconds",
         "host_io_seconds", "local_allreduce_seconds", "global_allreduce_seconds",
         "update_seconds", "shard_exchange_seconds", "weight_gather_seconds")


def ipupod(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cluster.cli.main", *args],
                          capture_output=True, text=True, timeout=300)


def as_json(*args: str) -> dict:
    run = ipupod(*args, "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout)


def train_step(*options: str) -> dict:
    """train's first step: its time and parts (seconds)."""
    return as_json("train", "--steps", "1", *options)["steps"][0]


def same_step(step: dict, row: dict, total: str = "sim_seconds") -> None:
    assert row[total] == pytest.approx(step["sim_seconds"], rel=1e-12)
    for part in PARTS:
        assert row.get(part, 0.0) == pytest.approx(step.get(part, 0.0), rel=1e-12, abs=1e-15)


def setting(record: dict, option: str) -> dict:
    return next(item for item in record["settings"] if item["option"] == option)


def test_train_and_scaling_report_price_resnet50_alike_and_say_where_the_optimiser_lives(
        tmp_path):
    # the case: the update was 0.04 ms in train and 3.235 ms in the report
    options = ("--model", "resnet50", "--micro-batch", "20")
    step = train_step(*options, "--topology", "pod16")
    report = as_json("scaling-report", *options, "--topologies", "pod16",
                     "--out", str(tmp_path / "r"))
    same_step(step, report["rows"][0])
    state = setting(report, "--optimizer-state")
    assert state["value"] == "in-processor" and not state["given"] and "Poplar" in state["rule"]
    assert "--optimizer-state in-processor" in report["made_by"]
    readme = (tmp_path / "r" / "README.md").read_text()
    assert "## Settings" in readme and "| `--optimizer-state` | in-processor | default:" in readme
    assert report["made_by"] in readme


def test_with_defaults_only_train_and_scaling_report_run_the_same_bert_large_step(tmp_path):
    record = as_json("train", "--model", "bert-large", "--steps", "1")
    report = as_json("scaling-report", "--topologies", "pod16", "--out", str(tmp_path / "r"))
    same_step(record["steps"][0], report["rows"][0])
    for option in ("--micro-batch", "--ipus-per-replica", "--optimizer-state", "--algorithm",
                   "--gradient-dtype", "--efficiency-scale", "--pipeline-schedule"):
        assert setting(record, option)["value"] == setting(report, option)["value"], option
    assert record["topology"] == "pod16" and record["mode"] == "phantom"


def test_pipeline_report_prices_the_step_train_does(tmp_path):
    options = ("--model", "bert-base", "--micro-batch", "4")
    step = train_step(*options, "--topology", "pod16", "--ipus-per-replica", "4",
                      "--gradient-accumulation", "8", "--pipeline-schedule", "1f1b")
    report = as_json("pipeline-report", *options, "--ipus-per-replica", "4", "--schedules",
                     "1f1b", "--micro-batches", "8", "--out", str(tmp_path / "p"))
    same_step(step, report["rows"][0])
    assert setting(report, "--micro-batch") == {"option": "--micro-batch", "value": 4,
                                                "given": True}


def test_train_report_prices_the_step_train_does_with_defaults_only(tmp_path):
    step = train_step("--mode", "phantom")
    report = as_json("train-report", "--servers", "2", "--real-up-to", "0",
                     "--out", str(tmp_path / "t"))
    same_step(step, report["rows"][0], total="step_seconds")
    assert setting(report, "--micro-batch")["value"] == 32
    readme = (tmp_path / "t" / "README.md").read_text()
    assert "## Settings" in readme and report["made_by"] in readme


def test_calibrate_prices_the_step_train_does_with_its_scale():
    options = ("--model", "resnet50", "--micro-batch", "20", "--gradient-accumulation", "10")
    found = as_json("calibrate", *options, "--measured-step-ms", "108.042")
    step = train_step(*options, "--topology", "pod16", "--efficiency-scale",
                      repr(found["efficiency_scale"]))
    same_step(step, {"sim_seconds": found["predicted_step_seconds"],
                     **found["predicted_parts"]})
    assert setting(found, "--optimizer-state")["value"] == "in-processor"


def test_a_reports_made_by_line_reruns_the_same_report(tmp_path):
    first = as_json("scaling-report", "--model", "resnet50", "--topologies", "pod16,pod64",
                    "--out", str(tmp_path / "a"))
    words = shlex.split(first["made_by"])
    assert words[:2] == ["ipupod", "scaling-report"] and "--micro-batch" in words
    again = as_json(*words[1:-2], "--out", str(tmp_path / "b"))
    assert again["rows"] == first["rows"]
    assert all(item["given"] for item in again["settings"] if item["value"] is not None
               and item["value"] is not False)


@pytest.mark.parametrize("model", ["resnet50", "bert-large", "bert-base"])
def test_the_built_in_workloads_train_at_their_defaults(model):
    record = as_json("train", "--model", model, "--steps", "1")
    assert record["steps"][0]["sim_seconds"] > 0
    memory = record["memory_per_ipu"]
    assert all(ipu["total_bytes"] <= ipu["capacity_bytes"] for ipu in memory)


@pytest.mark.parametrize("args", [
    ["--model", "bert-large", "--topology", "pod16", "--ipus-per-replica", "2"],
    ["--model", "resnet50", "--topology", "pod16", "--micro-batch", "32",
     "--ipus-per-replica", "1"],
    ["--model", "bert-large", "--servers", "2"],  # no DSS 8440 holds it: an IPU-POD16 does
])
def test_a_refusal_names_only_configurations_that_run(args):
    refused = ipupod("train", "--steps", "1", *args)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    line = refused.stderr.strip()
    named = re.search(r"try (.*) \(each checked: it fits\)$", line)
    alternatives = (named.group(1).split(", or ") if named else
                    [re.search(r"it fits with (.*)$", line).group(1)])  # type: ignore[union-attr]
    for alternative in alternatives:
        extra = shlex.split(alternative)
        kept = [word for i, word in enumerate(args)  # the hint's options replace the run's
                if word not in extra and (i == 0 or args[i - 1] not in extra)]
        if "--topology" in extra:
            kept = [w for i, w in enumerate(kept) if w != "--servers"
                    and (i == 0 or kept[i - 1] != "--servers")]
        run = ipupod("train", "--steps", "1", *kept, *extra)
        assert run.returncode == 0, (alternative, run.stderr[-1000:])


def test_trains_header_counts_the_machines_the_topology_has():
    pod = ipupod("train", "--topology", "pod64", "--mode", "phantom", "--steps", "1").stdout
    assert "16 IPU-M2000s in 1 IPU-POD64 rack" in pod and "server(s)" not in pod
    dss = ipupod("train", "--mode", "phantom", "--steps", "1").stdout
    assert "2 DSS 8440 servers of 8 C2 cards each" in dss
    assert "# every setting: ipupod train --servers 2 --mode phantom" in dss


def test_scaling_report_shows_pipeline_columns_only_for_a_pipeline(tmp_path):
    flat = as_json("scaling-report", "--model", "resnet50", "--topologies", "pod16",
                   "--out", str(tmp_path / "flat"))
    assert "pipeline bubble" not in (tmp_path / "flat" / "README.md").read_text()
    assert flat["rows"][0]["pipeline_bubble_seconds"] == 0
    ipupod("scaling-report", "--model", "resnet50", "--topologies", "pod16",
           "--ipus-per-replica", "2", "--out", str(tmp_path / "piped"))
    table = (tmp_path / "piped" / "README.md").read_text()
    assert "pipeline bubble (ms)" in table and "between stages (ms)" in table


def test_every_default_is_read_from_one_place():
    from cluster.cli.reports import scaling_report_command
    from cluster.cli.train import train_command
    from cluster.training.config import TrainConfig
    from cluster.training.defaults import DEFAULTS

    for command in (train_command, scaling_report_command):
        params = {p.name: p.default for p in command.params}
        assert params["optimizer_state"] == DEFAULTS.optimizer_state == \
            TrainConfig().optimizer_state
        assert params["algorithm"] == DEFAULTS.algorithm == TrainConfig().algorithm
        assert params["efficiency_scale"] == DEFAULTS.efficiency_scale
        assert params["micro_batch"] is None  # resolved: the largest that fits
    assert Path(__file__).parent.joinpath("..", "cluster", "training", "defaults.py").exists()
