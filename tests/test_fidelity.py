"""Fidelity: published step times from MLPerf logs, calibration, and predictions that only
the calibration point feeds; each new term of the step against a hand computation."""

import json
import math
import re
import subprocess
import sys
from dataclasses import replace
from itertools import accumulate, pairwise
from pathlib import Path

import pytest

from benchmarks.mlperf_published import derive_round, measure_packing
from cluster.errors import UserError
from cluster.model import hardware as hw
from cluster.model.costmodel import REDUCE_MEMORY_PASSES
from cluster.model.spec import load_topology
from cluster.training.config import TrainConfig
from cluster.training.fidelity.calibration import calibrate
from cluster.training.fidelity.mllog import packing_ratio, parse_events, run_steps
from cluster.training.fidelity.published import TABLE, load_published, train_config
from cluster.training.fidelity.validation import growths, predict
from cluster.training.memory_plan import stage_memory
from cluster.training.pipeline.stages import stage_layers
from cluster.training.plan import plan_for
from cluster.training.step_timing import step_time
from cluster.training.workloads import forward_seconds, update_seconds, workload
from gcl import plan, simulate
from gcl.collectives import DType
from gcl.modes import Mode


def _line(time_ms, key, value=None, **metadata):
    event = {"namespace": "", "time_ms": time_ms, "event_type": "POINT_IN_TIME", "key": key,
             "value": value, "metadata": metadata}
    return f"[1,0]<stdout>::::MLLOG {json.dumps(event)}"


def _resnet_log(epoch_ms=(4000, 3000, 3000, 5000, 3000), gbs=3200, ga=10, evaluated=()):
    lines = ["plain output", ":::MLLOG {broken json", _line(0, "global_batch_size", gbs),
             _line(0, "gradient_accumulation_steps", ga), _line(0, "train_samples", 1281167),
             _line(0, "submission_platform", "POD16"), "x" * 100_000]
    clock = 1_000
    for n, ms in enumerate(epoch_ms, 1):
        lines += [_line(clock, "epoch_start", epoch_num=n), _line(clock + ms, "epoch_stop",
                                                                   epoch_num=n)]
        clock += ms + 500  # evaluation between epochs is not counted
    lines += [_line(clock, "eval_start", epoch_num=n) for n in evaluated]
    return lines


def test_a_resnet_epoch_holds_five_whole_session_runs_and_checkpoints_fall_away():
    # 1,281,167 // 3200 = 400 steps an epoch; session.run calls of 400 // 5 = 80 steps
    epochs = (6000, 3300, 3000, 3100, 9000, 4000)  # 1 and 5 wrote checkpoints
    run = run_steps(parse_events(_resnet_log(epochs, evaluated=(1, 5))))
    assert run.method == "epochs" and run.intervals == 2 and run.accumulation == 10
    assert run.step_seconds == pytest.approx((3.0 + 3.1) / 2 / 400, rel=1e-12)
    # 1,281,167 // 2560 = 500 steps, calls of 100: 500 a logged epoch
    run = run_steps(parse_events(_resnet_log((3000,), gbs=2560)), logs_per_epoch=3)
    assert run.step_seconds == pytest.approx(3.0 / 498, rel=1e-12)  # 3 calls of 166


def _bert_log(blocks, gbs, train_samples=None):
    """``blocks``: (seconds, trigger passed) each."""
    lines = [_line(0, "global_batch_size", gbs)]
    if train_samples is not None:
        lines.append(_line(0, "train_samples", [train_samples]))
    clock = 0
    for seconds, trigger in blocks:
        lines += [_line(clock, "block_start"), _line(clock + seconds * 1e3, "block_stop"),
                  _line(clock + seconds * 1e3 + 5, "eval_accuracy", 0.5, epoch_num=trigger)]
        clock += seconds * 1e3 + 10
    return lines


def test_a_bert_block_of_real_sequences_holds_them_over_a_steps_real_sequences():
    lines = _bert_log([(130, 175_000), (100, 350_000), (120, 550_000)], gbs=3072)
    run = run_steps(parse_events(lines), sequences_per_sample=1.02)
    # the first block (warm-up) left out: 220 s over (175,000 + 200,000) / (3,072 x 1.02)
    assert run.method == "blocks" and run.intervals == 2
    assert run.step_seconds == pytest.approx(220 * 3072 * 1.02 / 375_000, rel=1e-12)


def test_a_step_counted_bert_block_ends_after_trigger_over_batch_plus_one_steps():
    # triggers 200,000, 400,000, 600,000 over 6,144: the blocks end after 33, 66, 98 steps
    lines = _bert_log([(40, 200_000), (23.1, 400_000), (22.4, 600_000)], gbs=6144,
                      train_samples=612_950)  # real sequences over 98 steps
    run = run_steps(parse_events(lines))
    assert run.step_seconds == pytest.approx((23.1 + 22.4) / (33 + 32), rel=1e-12)
    close = _bert_log([(1, 1500), (1, 1800), (1, 2900)], gbs=1000)  # ends 2, 3, 4: a step
    # at least a block, though 1,800 and 2,900 fall in the second and third thousand
    assert run_steps(parse_events(close)).step_seconds == pytest.approx(2 / 2)
    assert packing_ratio(parse_events(lines)) == pytest.approx(612_950 / (98 * 6144))


@pytest.mark.parametrize("lines, words", [
    ([_line(0, "train_samples", 10)], "global_batch_size"),
    ([_line(0, "global_batch_size", 8), _line(0, "train_samples", 8000),
      _line(5, "epoch_start")], "1 epoch_start and 0 epoch_stop"),
    ([_line(0, "global_batch_size", 8), _line(0, "train_samples", 8000),
      _line(5, "epoch_start"), _line(4, "epoch_stop")], "comes before"),
    ([_line(0, "global_batch_size", 8), _line(0, "block_start"), _line(9, "block_stop")],
     "eval_accuracy"),
    ([_line(0, "global_batch_size", True), _line(0, "block_start")], "global_batch_size"),
    (_resnet_log((3000, 3000), evaluated=(1,)), "no steady epoch"),
    (_resnet_log((3000,), gbs=1281167 // 3), "no whole"),
    (_bert_log([(5, 100), (5, 50)], gbs=8), "must grow"),
    (_bert_log([(5, 100), (5, float("nan"))], gbs=8), "some are missing"),
    (_resnet_log((3000,))[:-2] + [_line(1, "epoch_start", epoch_num=[1]),
                                  _line(2, "epoch_stop", epoch_num=1)], "whole"),
])
def test_a_log_without_what_the_method_needs_is_a_user_error(lines, words):
    with pytest.raises(UserError, match=words):
        run_steps(parse_events(lines))


def _write_results(root, system, runs):
    folder = root / "Graphcore" / "results" / system / "resnet"
    folder.mkdir(parents=True)
    for i, epochs in enumerate(runs):
        (folder / f"result_{i}.txt").write_text("\n".join(_resnet_log(epochs)))


def test_the_derivation_script_takes_the_median_run_and_checks_the_recipe(tmp_path):
    _write_results(tmp_path, "ipu-pod16-TF1", [(3000,) * 3, (3100,) * 3, (9000,) * 3])
    (row,) = derive_round("v1.1", tmp_path)
    assert row["step_seconds"] == pytest.approx(3.1 / 400, abs=1e-6)  # 5 calls of 80 steps
    assert row["runs"] == 3 and row["hosts"] == 1 and row["micro_batch"] == 20
    assert row["logs"] == "Graphcore/results/ipu-pod16-TF1/resnet/result_*.txt"
    wrong = tmp_path / "wrong"
    folder = wrong / "Graphcore" / "results" / "ipu-pod16-TF1" / "resnet"
    folder.mkdir(parents=True)
    (folder / "result_0.txt").write_text("\n".join(_resnet_log(gbs=3000)))
    with pytest.raises(UserError, match="not the logged global batch"):
        derive_round("v1.1", wrong)


def _write_bert(root, system, lines, replicas):
    folder = root / "Graphcore" / "results" / system / "bert"
    folder.mkdir(parents=True)
    (folder / "result_0.txt").write_text("\n".join(
        lines + [_line(0, "gradient_accumulation_steps", 96)]))
    configs = root / "Graphcore/benchmarks/bert/implementations/popart/configs/mk2"
    configs.mkdir(parents=True, exist_ok=True)
    placement = [[1, [2, 2]], [2, [3, 3]], [3, [4, 3]], [4, [3, 4]], [5, [4, 3]],
                 [6, [3, 4]], [7, [4, 3]], [0, [1, 2]]]
    name = system.split("-")[1] + "-closed.json"
    (configs / name).write_text(json.dumps({"att_ffn_placement": placement,
                                            "replication_factor": replicas}))


def test_the_packing_measured_on_step_counted_runs_sets_the_others_steps(tmp_path):
    counted = _bert_log([(40, 200_000), (23.1, 400_000), (22.4, 600_000)], gbs=6144,
                        train_samples=612_950)
    _write_bert(tmp_path, "ipu-pod128-POPART-closed", counted, 16)
    single = _bert_log([(36.4, 175_000), (36.5, 350_000), (36.3, 525_000)], gbs=3072)
    _write_bert(tmp_path, "ipu-pod64-POPART-closed", single, 8)
    ratio, source = measure_packing({"v1.1": tmp_path})
    assert ratio == pytest.approx(612_950 / (98 * 6144)) and "pod128" in source
    with pytest.raises(UserError, match="packing"):
        derive_round("v1.1", tmp_path)
    rows = {row["system"]: row for row in derive_round("v1.1", tmp_path, ratio)}
    assert rows["ipu-pod64-POPART-closed"]["step_seconds"] == pytest.approx(
        (36.5 + 36.3) * 3072 * ratio / 350_000, abs=1e-6)
    assert rows["ipu-pod128-POPART-closed"]["method"] == "blocks: steps counted"


def test_the_shipped_table_reads_back_with_its_provenance():
    table = load_published()
    assert {(e.round, e.topology) for e in table if e.model == "resnet50"} == {
        ("v1.0", "pod16"), ("v1.0", "pod64"), ("v1.1", "pod16"), ("v1.1", "pod64"),
        ("v1.1", "pod128"), ("v1.1", "pod256")}
    for entry in table:
        assert entry.repository.startswith("mlcommons/training_results_v1.")
        assert len(entry.commit) == 40 and entry.logs.endswith("result_*.txt")
        assert entry.global_batch == (entry.ipus // entry.ipus_per_replica * entry.micro_batch
                                      * entry.gradient_accumulation)


def _resnet(topology="pod16", accumulation=10, scale=1.0):
    racks = max(1, int(topology.removeprefix("pod")) // 64)
    return TrainConfig(model="resnet50", topology=topology, mode=Mode.PHANTOM, servers=racks,
                       replicas_per_server=min(64, int(topology.removeprefix("pod"))),
                       micro_batch=20, accumulation=accumulation, efficiency_scale=scale)


def test_calibration_finds_the_scale_that_reproduces_the_measured_step():
    topology = load_topology("pod16")
    found = calibrate(plan_for(_resnet(), topology), 0.1)
    assert found.predicted_step_seconds == pytest.approx(0.1, rel=1e-9)
    base, scaled = (step_time(plan_for(_resnet(scale=s), topology))
                    for s in (1.0, found.efficiency_scale))
    # compute is the only part it moves, exactly as 1/scale
    assert scaled.compute_seconds * found.efficiency_scale == pytest.approx(base.compute_seconds)
    assert (scaled.host_io_seconds, scaled.local_allreduce_seconds) == (
        base.host_io_seconds, base.local_allreduce_seconds)
    with pytest.raises(UserError, match="faster than this configuration can run"):
        calibrate(plan_for(_resnet(), topology), 1e-4)
    with pytest.raises(UserError, match="positive number"):
        calibrate(plan_for(_resnet(), topology), float("nan"))


def test_only_the_calibration_points_published_figures_move_the_predictions(tmp_path):
    before = predict(load_published())
    raw = json.loads(TABLE.read_text())
    for row in raw["configurations"]:
        if row["ipus"] > 16:
            row["step_seconds"] *= 3  # the figures a prediction is checked against
    changed = tmp_path / "changed.json"
    changed.write_text(json.dumps(raw))
    after = predict(load_published(changed))
    assert [p.step.sim_seconds for p in after] == [p.step.sim_seconds for p in before]
    for row in raw["configurations"]:
        if row["ipus"] == 16:
            row["step_seconds"] *= 1.1
    changed.write_text(json.dumps(raw))
    moved = predict(load_published(changed))
    assert all(a.step.sim_seconds != b.step.sim_seconds for a, b in zip(moved, before))


def test_the_calibration_points_are_reproduced_and_the_larger_pods_are_predicted():
    predictions = predict(load_published())
    anchors = [p for p in predictions if p.calibration_point]
    assert len(anchors) == 4 and all(abs(p.error) < 1e-6 for p in anchors)
    by_label = {p.published.label: p for p in predictions}
    pod128, pod256 = by_label["v1.1 resnet50 pod128"], by_label["v1.1 resnet50 pod256"]
    # equal work per IPU (accumulation 2 on both): the step grows with the racks the ring
    # crosses, as published
    assert pod256.step.sim_seconds > pod128.step.sim_seconds
    assert pod256.published.step_seconds > pod128.published.step_seconds


def test_a_ring_across_two_racks_costs_what_its_gw_link_crossing_costs_by_hand():
    topology = load_topology("pod128")
    count, n = 1 << 24, 128
    timing = simulate(plan("allreduce", topology, count, dtype=DType.FLOAT16,
                           algorithm_name="clockwise_ring"), topology)
    chunk = 2 * count / n  # bytes each IPU sends each step
    gw = hw.gw_link_100g()
    crossing = (chunk / (hw.ipu_m2000().gw_link_ports * gw.bandwidth_Bps)
                + 2 * hw.pcie_gen4_x16().latency_seconds + 2 * gw.latency_seconds)
    reduce = REDUCE_MEMORY_PASSES * chunk / hw.gc200().memory_bandwidth_Bps
    steps = n - 1
    by_hand = (steps * (hw.GLOBAL_SYNC_SECONDS + crossing + reduce)
               + steps * (hw.GLOBAL_SYNC_SECONDS + crossing))
    assert timing.sim_seconds == pytest.approx(by_hand, rel=1e-9)
    # two crossings (rack 0 -> 1, 1 -> 0), two GW-Link hops each (gateway, switch, gateway),
    # every step of both phases
    assert timing.link_type_bytes["gw-link-100g"] == pytest.approx(2 * 2 * 2 * steps * chunk)


def test_layers_per_ipu_places_the_recipes_layers_on_each_stage():
    assert stage_layers([1] * 6, 3, (1, 2, 3)) == [range(0, 1), range(1, 3), range(3, 6)]
    with pytest.raises(UserError, match="add up to the model's 6 layers"):
        stage_layers([1] * 6, 3, (1, 2, 2))
    bert = workload("bert-large", sequence_length=512)
    counts = (4, 4, 6, 7, 7, 7, 7, 9)
    config = TrainConfig(model="bert-large", sequence_length=512, topology="pod64",
                         mode=Mode.PHANTOM, servers=1, replicas_per_server=8,
                         ipus_per_replica=8, micro_batch=2, accumulation=96,
                         pipeline_schedule="1f1b", optimizer_state="sharded",
                         layers_per_ipu=counts)
    topology = load_topology("pod64")
    step = step_time(plan_for(config, topology))
    bounds = [0, *accumulate(counts)]
    gc200 = topology.ipu_processors[0]
    for (a, b), seconds in zip(pairwise(bounds), step.stage_compute_seconds):
        forward = forward_seconds(bert, gc200, 2, config.efficiencies, bert.layers[a:b])
        # 96 micro-batches, each a forward, a backward (2 forwards) and a recomputation
        assert seconds == pytest.approx(96 * (1 + 2 + 1) * forward, rel=1e-12)
    with pytest.raises(UserError, match="--layers-per-ipu"):
        plan_for(replace(config, layers_per_ipu=(4, 4)), topology)


def test_sharded_optimizer_state_splits_the_state_and_the_update_over_the_replicas():
    base = TrainConfig(model="bert-large", sequence_length=512, topology="pod64",
                       mode=Mode.PHANTOM, servers=1, replicas_per_server=8, ipus_per_replica=8,
                       micro_batch=2, accumulation=96, pipeline_schedule="1f1b")
    sharded = replace(base, optimizer_state="sharded")
    topology = load_topology("pod64")
    whole, split = (stage_memory(plan_for(c, topology)) for c in (base, sharded))
    for a, b in zip(whole, split):
        assert b.use.optimizer_bytes == math.ceil(a.use.optimizer_bytes / 8)
    assert step_time(plan_for(sharded, topology)).update_seconds == pytest.approx(
        step_time(plan_for(base, topology)).update_seconds / 8, rel=1e-3)


def _ipupod(*args):
    return subprocess.run([sys.executable, "-m", "cluster.cli.main", *args],
                          capture_output=True, text=True, timeout=300)


def test_validate_prints_published_predicted_and_error_for_every_configuration():
    result = _ipupod("validate")
    assert result.returncode == 0, result.stderr
    rows = [line for line in result.stdout.splitlines() if line.startswith((" v1.", "v1."))]
    assert len(rows) == len(load_published())
    assert sum(line.count("%*") for line in rows) == 4
    records = json.loads(_ipupod("validate", "--json").stdout)
    assert {"published_step_seconds", "error"} - set(records[0]) == {"published_step_seconds"}
    assert all(sum(r["predicted_parts"].values()) == pytest.approx(r["predicted_step_seconds"])
               for r in records)


def test_validate_counts_the_predictions_within_5_percent_and_points_to_why_not():
    predicted = [p for p in predict(load_published()) if not p.calibration_point]
    within = [p.published.label for p in predicted if abs(p.error) <= 0.05]
    assert within == [p.published.label for p in predicted if p.within_bar]
    line = (f"# within 5% of the published step: {len(within)} of {len(predicted)} "
            "predicted configurations")
    out = _ipupod("validate").stdout
    assert line in out
    assert ("docs/fidelity.md says why" in out) == (len(within) < len(predicted))


def test_the_docs_validation_table_is_what_validate_predicts():
    # docs/fidelity.md's table, row by row, against the predictions (to its rounding)
    docs = (Path(__file__).parents[1] / "docs" / "fidelity.md").read_text(encoding="utf-8")
    names = {"BERT-Large": "bert-large", "ResNet-50": "resnet50"}
    rows = {}
    for line in docs.splitlines():
        cells = [cell.strip() for cell in line.strip("|").split("|")]
        if len(cells) == 6 and cells[1] in names:
            label = f"{cells[0]} {names[cells[1]]} {cells[2].lower()}"
            rows[label] = (cells[3], cells[4], cells[5].replace(" \\*", ""))
    expected = {p.published.label: (f"{p.published.step_seconds * 1e3:.2f}",
                                     f"{p.step.sim_seconds * 1e3:.2f}",
                                     f"{p.error * 100:+.1f}%".replace("+0.0%", "0.0%"))
                for p in predict(load_published())}
    assert rows == expected


def test_pod128_to_pod256_at_equal_work_grows_with_the_published_sign_within_1_ms():
    found = {g.label: g for g in growths(predict(load_published()))}
    assert set(found) == {"v1.1 resnet50 pod128 -> pod256", "v1.1 bert-large pod64 -> pod128"}
    resnet = found["v1.1 resnet50 pod128 -> pod256"]
    small, large = resnet.smaller.step, resnet.larger.step
    # at equal work per IPU only the ring through every replica grows (2 x 128 supersteps)
    assert (small.compute_seconds, small.host_io_seconds) == (large.compute_seconds,
                                                               large.host_io_seconds)
    assert resnet.predicted_seconds == pytest.approx(
        large.global_allreduce_seconds - small.global_allreduce_seconds, rel=1e-9)
    assert resnet.published_seconds > 0 and resnet.predicted_seconds > 0
    assert abs(resnet.predicted_seconds - resnet.published_seconds) < 1e-3
    assert "pod128 -> pod256 at equal work per IPU" in _ipupod("validate").stdout


def test_calibrate_then_train_reproduces_the_measured_step():
    options = ["--model", "resnet50", "--micro-batch", "20", "--gradient-accumulation", "10"]
    found = json.loads(_ipupod("calibrate", *options, "--measured-step-ms", "108.317",
                               "--json").stdout)
    trained = json.loads(_ipupod("train", "--topology", "pod16", "--mode", "phantom",
                                 "--steps", "1", *options, "--json", "--efficiency-scale",
                                 repr(found["efficiency_scale"])).stdout)
    assert trained["steps"][0]["sim_seconds"] == pytest.approx(0.108317, rel=1e-9)


def test_calibrate_offers_no_efficiency_scale_of_its_own():
    assert "--efficiency-scale" not in _ipupod("calibrate", "--help").stdout
    assert "--efficiency-scale" in _ipupod("train", "--help").stdout


@pytest.mark.parametrize("args, words", [
    (["calibrate", "--model", "resnet50", "--measured-step-ms", "-3"], "positive number"),
    (["calibrate", "--measured-step-ms", "100"], "give --model"),
    (["calibrate", "--model", "resnet50", "--measured-step-ms", "nan"], "milliseconds"),
    (["calibrate", "--model", "resnet50", "--measured-step-ms", "100", "--efficiency-scale",
      "2"], "what calibrate finds"),
    (["validate", "--published", "/nonexistent/table.json"], "No such file"),
    (["calibrate", "--model", "resnet50", "--micro-batch", "20", "--gradient-accumulation",
      "6", "--measured-step-ms", "1e8"], "1e\\+08 ms is slower .* units \\(milliseconds\\)"),
    (["train", "--model", "resnet50", "--mode", "phantom", "--efficiency-scale", "50"],
     "past the IPU's peak"),
    (["train", "--model", "bert-large", "--mode", "phantom", "--topology", "pod16",
      "--ipus-per-replica", "4", "--layers-per-ipu", "1,2,x"], "whole numbers"),
])
def test_fidelity_mistakes_are_one_line_errors(args, words, tmp_path):
    result = _ipupod(*args)
    assert result.returncode == 2 and re.search(words, result.stderr), result.stderr
    assert "Traceback" not in result.stderr


def test_a_table_that_is_not_one_is_refused(tmp_path):
    path = tmp_path / "t.json"
    for text in ("[1, 2]", '{"version": 1, "configurations": [{"round": 3}]}', "{",
                 "[" * 100_000 + "]" * 100_000, '{"version": true, "configurations": []}'):
        path.write_text(text)
        with pytest.raises(UserError):
            load_published(path)
    path.write_text(TABLE.read_text())
    assert train_config(load_published(path)[0]).mode == Mode.PHANTOM


def test_only_the_bert_entries_run_popart_s_pipeline():
    entries = load_published()
    schedules = {entry.label: train_config(entry).pipeline_schedule for entry in entries}
    assert {schedules[e.label] for e in entries if e.model.startswith("bert")} == {"popart"}
    assert {schedules[e.label] for e in entries if e.model == "resnet50"} == {"fill-drain"}
    # a pipelined ResNet-50 (a TensorFlow recipe) is not held to PopART's micro-batch limit
    resnet = replace(entries[0], ipus_per_replica=4, gradient_accumulation=4)
    assert train_config(resnet).pipeline_schedule == "fill-drain"
    plan_for(train_config(resnet))


@pytest.mark.parametrize("index, field, value, words", [
    (0, "optimizer_state", "bogus", "--optimizer-state"),
    (0, "topology", "pod64", "topology must be pod16"),
    (2, "layers_per_ipu", [1, 2, 3], "entry v1.0 bert-large pod16: --layers-per-ipu"),
    (0, "ipus_per_replica", 3, "topology must be"),
    (0, "final_stage_on_first_ipu", True, "entry v1.0 resnet50 pod16: --final-stage"),
    (2, "final_stage_on_first_ipu", 1, "must be a bool"),
    (2, "final_stage_on_first_ipu", None, "entry v1.0 bert-large pod16: --layers-per-ipu"),
    (2, "gradient_accumulation", 8, "entry v1.0 bert-large pod16: PopART's pipeline of 5"),
    (1, "ipus_per_replica", 0, "configuration 1: counts and the step times must be positive"),
    (1, "step_seconds", float("nan"), "must be positive \\(and finite\\)"),
    (1, "step_seconds_max", float("inf"), "must be positive \\(and finite\\)"),
    (1, "model", "lstm", "built-in workloads .*not 'lstm'"),
    (1, "step_secs", 0.03, "configuration 1: unknown field 'step_secs'; the fields are round"),
    (1, "micro_batch", 10**6, "entry v1.0 resnet50 pod64: resnet50: stage 0 of 1 .* needs"),
    (1, "micro_batch", 10**8, "entry v1.0 resnet50 pod64: --micro-batch runs to 1,048,576"),
    (1, "micro_batch", 10**400, "configuration 1: micro_batch is out of range"),
    (0, "step_seconds", 10**400, "configuration 0: step_seconds is out of range"),
    (2, "layers_per_ipu", [1, 10**400], "configuration 2: layers_per_ipu is out of range"),
    (1, "model", "mlp", "built-in workloads \\(gpt-tiny, resnet50, .*\\), not 'mlp'"),
    (1, "ipus", 100, "topology must be pod100"),
])
def test_an_entry_the_emulator_cannot_run_is_named_before_any_prediction(
        tmp_path, index, field, value, words):
    raw = json.loads(TABLE.read_text())
    if value is None:  # left out, as a table written before the field
        del raw["configurations"][index][field]
    else:
        raw["configurations"][index][field] = value
    path = tmp_path / "table.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(UserError, match=words):
        predict(load_published(path))


def test_an_entry_on_no_pod_preset_is_named(tmp_path):
    raw = json.loads(TABLE.read_text())
    raw["configurations"][1].update(ipus=100, topology="pod100")
    path = tmp_path / "table.json"
    path.write_text(json.dumps(raw))
    with pytest.raises(UserError, match="entry v1.0 resnet50 pod100: an IPU-POD has a power"):
        predict(load_published(path))


def test_sharded_state_in_streaming_memory_streams_only_each_replicas_share():
    config = TrainConfig(model="bert-large", sequence_length=512, topology="pod16",
                         mode=Mode.PHANTOM, servers=1, replicas_per_server=4,
                         ipus_per_replica=4, micro_batch=2, accumulation=192,
                         pipeline_schedule="1f1b", optimizer_state="sharded-streaming")
    topology = load_topology("pod16")
    assert all(stage.use.optimizer_bytes == 0
               for stage in stage_memory(plan_for(config, topology)))
    bert = workload("bert-large", sequence_length=512)
    stages = stage_layers([layer.training_flops for layer in bert.layers], 4)
    gc200 = topology.ipu_processors[0]
    by_hand = []
    for layers in stages:
        share = math.ceil(sum(bert.layers[i].parameters for i in layers) / 4)
        state_bytes = share * bert.optimizer_values_per_parameter * 4  # float32
        by_hand.append(update_seconds(bert, gc200, share, config.efficiencies)
                       + state_bytes / hw.pcie_gen4_x16().bandwidth_Bps)
    assert step_time(plan_for(config, topology)).update_seconds == pytest.approx(
        max(by_hand), rel=1e-12)
