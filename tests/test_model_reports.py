"""Workloads train in phantom mode with every part of the step, refuse what does not fit
in one line, and the pipelining and scaling reports write their README and plots."""

import json
import subprocess
import sys

import pytest

from cluster.errors import UserError
from cluster.training.config import TrainConfig
from cluster.training.fidelity.published import ALGORITHM, load_published
from cluster.training.fidelity.validation import predict
from cluster.training.memory_plan import OutOfMemory
from cluster.training.plan import plan_for
from cluster.training.trainer import train

STEP_KEYS = {"sim_seconds", "compute_seconds", "host_io_seconds", "local_allreduce_seconds",
             "global_allreduce_seconds", "update_seconds", "pipeline_bubble_seconds",
             "inter_stage_seconds", "stage_compute_seconds"}


def ipupod(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "cluster.cli.main", *args],
                          capture_output=True, text=True, timeout=timeout)


def test_resnet50_on_a_pod64_reports_every_part_of_its_step():
    run = ipupod("train", "--model", "resnet50", "--topology", "pod64", "--mode", "phantom",
                 "--micro-batch", "20", "--gradient-accumulation", "3", "--steps", "1", "--json")
    assert run.returncode == 0, run.stderr[-2000:]
    record = json.loads(run.stdout)
    step = record["steps"][0]
    assert step.keys() >= STEP_KEYS and record["replicas"] == 64
    assert step["sim_seconds"] == pytest.approx(sum(
        step[k] for k in STEP_KEYS - {"sim_seconds", "stage_compute_seconds"}))
    assert record["throughput_samples_per_sim_second"] == pytest.approx(
        64 * 20 * 3 / step["sim_seconds"])
    memory = record["memory_per_ipu"][0]
    assert memory["total_bytes"] <= memory["capacity_bytes"] == 900_000_000


def test_a_model_too_big_for_its_ipus_is_refused_naming_the_stage_and_what_would_help():
    config = TrainConfig(model="gpt2-xl", topology="pod16", mode="phantom", micro_batch=1,
                         ipus_per_replica=2, steps=1, replicas_per_server=0,
                         sequence_length=512)
    with pytest.raises(OutOfMemory, match=r"stage 0 of 2 .* on IPU r0\.m0\.ipu0.*"
                                          r"try --ipus-per-replica 16 --optimizer-state "
                                          r"streaming \(each checked: it fits\)"):
        train(plan_for(config))
    fits = train(plan_for(TrainConfig(model="gpt2-xl", topology="pod16", mode="phantom",
                                      micro_batch=1, ipus_per_replica=16, accumulation=16,
                                      steps=1, replicas_per_server=0,
                                      optimizer_state="streaming", sequence_length=512)))
    assert fits["replicas"] == 1 and len(fits["steps"][0]["stage_compute_seconds"]) == 16
    whole = TrainConfig(model="gpt2-xl", topology="pod16", mode="phantom", micro_batch=1,
                        ipus_per_replica=16, steps=1, replicas_per_server=0)
    with pytest.raises(OutOfMemory, match="nothing tried fits"):  # and no hint that fails
        train(plan_for(whole))


@pytest.mark.parametrize("changes, words", [
    ({"model": "bert-large", "mode": "real"}, "phantom mode only"),
    ({"model": "bert-larg", "mode": "phantom"}, "did you mean 'bert-large'"),
    ({"model": "mlp", "sequence_length": 128, "mode": "phantom"}, "not to the MLP"),
    ({"optimizer_state": "streaming", "mode": "phantom"}, "no Streaming Memory"),
])
def test_workload_options_that_cannot_work_are_user_errors(changes, words):
    with pytest.raises(UserError, match=words):
        train(plan_for(TrainConfig(**{"servers": 1, "steps": 1, **changes})))


def test_the_reports_write_their_readme_and_plots(tmp_path):
    run = ipupod("pipeline-report", "--model", "bert-base", "--ipus-per-replica", "2,4",
                 "--micro-batches", "1,4", "--out", str(tmp_path / "pipe"))
    assert run.returncode == 0, run.stderr[-2000:]
    readme = (tmp_path / "pipe" / "README.md").read_text()
    assert "| 4 | 1f1b | 4 |" in readme and "simulated" in readme
    # PopART's 4-stage pipeline needs 7 micro-batches; its 2-stage one runs 4
    assert "| 4 | popart | 4 | - | too few micro-batches |" in readme
    assert "| 2 | popart | 4 | 8 |" in readme
    run = ipupod("scaling-report", "--model", "resnet50", "--micro-batch", "8",
                 "--topologies", "pod16,pod64", "--out", str(tmp_path / "scale"))
    assert run.returncode == 0, run.stderr[-2000:]
    for name in ("pipe/bubble.png", "pipe/throughput.png", "scale/breakdown.png",
                 "scale/throughput.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bad = ipupod("scaling-report", "--topologies", "pod16,", "--micro-batch", "x",
                 "--out", str(tmp_path / "x"))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr


def test_the_scaling_report_runs_a_recipes_placement_with_the_last_stage_on_ipu_0(tmp_path):
    run = ipupod("scaling-report", "--model", "bert-large", "--sequence-length", "512",
                 "--micro-batch", "2", "--ipus-per-replica", "4", "--gradient-accumulation",
                 "8", "--layers-per-ipu", "1,13,13,13,11", "--final-stage-on-first-ipu",
                 "--optimizer-state", "sharded-streaming",  # as the recipe
                 "--topologies", "pod16,pod64", "--out", str(tmp_path / "scale"))
    assert run.returncode == 0, run.stderr[-2000:]
    assert "| pod64 | 64 |" in (tmp_path / "scale" / "README.md").read_text()
    bad = ipupod("scaling-report", "--model", "bert-large", "--ipus-per-replica", "4",
                 "--layers-per-ipu", "1,13,13,13", "--final-stage-on-first-ipu",
                 "--topologies", "pod16", "--out", str(tmp_path / "bad"))
    assert bad.returncode == 2 and "Traceback" not in bad.stderr
    assert "it needs 5 counts" in bad.stderr


def _table_rows(readme: str) -> dict[str, dict[str, float]]:
    """The scaling table's cells by topology and column (numbers, commas dropped)."""
    table = readme.split("\n| ", 1)[1].split("\n\n", 1)[0]  # the first table, not settings
    lines = ["| " + line if i == 0 else line for i, line in enumerate(table.splitlines())]
    lines = [line for line in lines if line.startswith("| ")]
    head = [cell.strip() for cell in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[1:]:
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        rows[cells[0]] = {name: float(cell.replace(",", ""))
                          for name, cell in zip(head[1:], cells[1:])}
    return rows


def test_the_scaling_report_predicts_what_validate_does_and_its_parts_add_up(tmp_path):
    # ResNet-50 as its v1.1 POD128 and POD256 runs, with calibrate's scale and the
    # published allreduce: the step validate predicts for each, by the same parts
    found = {p.published.label: p for p in predict(load_published())}
    scale = found["v1.1 resnet50 pod256"].efficiency_scale
    run = ipupod("scaling-report", "--model", "resnet50", "--micro-batch", "20",
                 "--gradient-accumulation", "2", "--optimizer-state", "in-processor",
                 "--algorithm", ALGORITHM, "--efficiency-scale", repr(scale),
                 "--topologies", "pod128,pod256", "--out", str(tmp_path / "resnet"))
    assert run.returncode == 0, run.stderr[-2000:]
    rows = _table_rows((tmp_path / "resnet" / "README.md").read_text())
    for name in ("pod128", "pod256"):
        predicted = found[f"v1.1 resnet50 {name}"].step.sim_seconds * 1e3
        assert rows[name]["step (ms)"] == pytest.approx(predicted, abs=5e-4)
        assert rows[name]["global allreduce (ms)"] > 6  # one ring through every replica


def test_a_sharded_multi_rack_step_shows_its_weight_gather_and_adds_up(tmp_path):
    run = ipupod("scaling-report", "--model", "bert-large", "--sequence-length", "512",
                 "--micro-batch", "2", "--ipus-per-replica", "8", "--gradient-accumulation",
                 "16", "--optimizer-state", "sharded", "--pipeline-schedule", "popart",
                 "--topologies", "pod64,pod128", "--out", str(tmp_path / "bert"))
    assert run.returncode == 0, run.stderr[-2000:]
    rows = _table_rows((tmp_path / "bert" / "README.md").read_text())
    assert rows["pod64"]["weight gather (ms)"] == 0 < rows["pod128"]["weight gather (ms)"]
    for row in rows.values():
        parts = [value for name, value in row.items() if name.endswith("(ms)")
                 and name != "step (ms)"]
        assert sum(parts) == pytest.approx(row["step (ms)"], abs=0.01)


def test_the_pipeline_tables_bubble_is_the_one_bubble_png_plots_and_both_say_which(
        tmp_path, monkeypatch):
    from cluster.training.config import Mode
    from cluster.training.reports import sweeps

    drawn = {}

    def keep_axes(fig, path):
        ax = fig.axes[0]
        drawn[path.name] = (ax.get_ylabel(), [line.get_xydata().tolist() for line in ax.lines],
                            [line.get_label() for line in ax.lines])
        return path

    monkeypatch.setattr(sweeps, "save_png", keep_axes)
    rows = sweeps.pipeline_sweep(
        plan_for(TrainConfig(model="bert-base", topology="pod16", micro_batch=2,
                             mode=Mode.PHANTOM)),
        [2, 4], ["fill-drain"], [1, 4])
    table = sweeps.pipeline_table(rows)
    sweeps.plot_pipeline(rows, tmp_path)
    lines = [line for line in table.splitlines() if line.startswith("| ")]
    head = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert "bubble, % of step" in head and "bubble, % of compute + bubble" in head
    cells = {(row[0], row[2]): dict(zip(head, row)) for row in
             ([cell.strip() for cell in line.strip("|").split("|")] for line in lines[1:])}
    ylabel, plotted, labels = drawn["bubble.png"]
    assert ylabel.startswith("bubble, % of compute + bubble")
    measured = dict(zip(labels, plotted))  # the dashed formula lines have no K = label
    for k in (2, 4):
        for m, share in measured[f"K = {k}"]:
            row = cells[(str(k), str(int(m)))]
            assert row["bubble, % of compute + bubble"] == f"{share:.1%}"
            # the share of the step is the smaller: the step holds more than compute
            assert float(row["bubble, % of step"].rstrip("%")) < 100 * share
    assert "*bubble, % of step*: pipeline bubble / step time" in table
