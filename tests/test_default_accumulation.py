"""A pipelined run left to its default gradient accumulation runs enough micro-batches that
its bubble is at most a tenth of the pipeline's time (the smallest power of two that does,
and fits In-Processor-Memory), says so, and a given accumulation is kept as given."""

import json

import pytest


def printed(ipupod_main, *args: str) -> str:
    """What ``ipupod ARGS`` prints, run in this process (phantom runs need no Ray)."""
    run = ipupod_main(*args)
    assert run.returncode == 0, run.stderr
    return run.stdout


def run(ipupod_main, *args: str) -> tuple[dict, dict]:
    """(the first step, the accumulation's setting) of ``train ARGS --json``."""
    record = json.loads(printed(ipupod_main, "train", "--mode", "phantom", "--steps", "1",
                                *args, "--json"))
    accumulation = next(item for item in record["settings"]
                        if item["option"] == "--gradient-accumulation")
    return record["steps"][0], accumulation


def bubble_share(step: dict) -> float:
    span = (step["compute_seconds"] + step["pipeline_bubble_seconds"]
            + step.get("inter_stage_seconds", 0.0))
    return step["pipeline_bubble_seconds"] / span


def test_bert_large_on_a_pod64_runs_64_micro_batches_of_1_and_its_bubble_is_under_a_tenth(
        ipupod_main):
    step, accumulation = run(ipupod_main, "--model", "bert-large", "--topology", "pod64")
    assert accumulation["value"] == 64 and not accumulation["given"]
    assert "10%" in accumulation["rule"]
    assert bubble_share(step) <= 0.10
    # the smallest power of two that does: 32 micro-batches leave a larger bubble
    fewer, given = run(ipupod_main, "--model", "bert-large", "--topology", "pod64",
                       "--micro-batch", "1", "--gradient-accumulation", "32")
    assert given["given"] and given["value"] == 32
    assert bubble_share(fewer) > 0.10


def test_train_prints_the_accumulation_it_chose_and_the_bubble_it_leaves(ipupod_main):
    out = printed(ipupod_main, "train", "--model", "bert-large", "--topology", "pod64",
                  "--steps", "1")
    assert "64 micro-batches in flight" in out
    note = next(line for line in out.splitlines() if line.startswith("# gradient accumulation"))
    assert "64 by default for a pipeline of 8 stages" in note
    assert "bubble 8.9% of the pipeline's time" in note
    assert "--gradient-accumulation 64" in out  # the every-setting line


def test_a_given_accumulation_is_kept_and_no_note_is_printed(ipupod_main):
    out = printed(ipupod_main, "train", "--model", "bert-large", "--topology", "pod64",
                 "--steps", "1", "--gradient-accumulation", "1")
    assert "1 micro-batch in flight" in out
    assert "# gradient accumulation" not in out


def test_a_replica_on_one_ipu_accumulates_one_micro_batch(ipupod_main):
    _, accumulation = run(ipupod_main, "--model", "resnet50", "--topology", "pod16")
    assert accumulation["value"] == 1 and not accumulation["given"]


def test_when_memory_stops_it_short_the_most_that_fit_is_taken_and_said(ipupod_main):
    step, accumulation = run(ipupod_main, "--model", "bert-large", "--topology", "pod64",
                             "--micro-batch", "4")
    assert accumulation["value"] == 8 and bubble_share(step) > 0.10
    out = printed(ipupod_main, "train", "--model", "bert-large", "--topology", "pod64",
                 "--steps", "1", "--micro-batch", "4")
    assert "the most micro-batches in flight that fit In-Processor-Memory" in out
    assert "a smaller --micro-batch" in out


def test_at_micro_batch_1_a_memory_bound_fill_drain_points_to_1f1b_which_reaches_it(
        ipupod_main):
    out = printed(ipupod_main, "train", "--model", "gpt3-125m", "--topology", "pod16",
                  "--steps", "1")
    assert "--micro-batch 1 --gradient-accumulation 2 " in out
    assert "--pipeline-schedule 1f1b stashes at most K - s micro-batches" in out
    step, accumulation = run(ipupod_main, "--model", "gpt3-125m", "--topology", "pod16",
                             "--pipeline-schedule", "1f1b")
    assert accumulation["value"] == 32 and bubble_share(step) <= 0.10


def test_a_lock_step_schedule_gets_at_least_the_micro_batches_it_needs(ipupod_main):
    # PopART's schedule needs 2K - 1 micro-batches for K stages: 15 for 8
    _, accumulation = run(ipupod_main, "--model", "bert-large", "--topology", "pod64",
                          "--pipeline-schedule", "popart")
    assert accumulation["value"] >= 16 and not accumulation["given"]


def test_scaling_report_takes_the_same_default_as_train(ipupod_main, tmp_path):
    step, _ = run(ipupod_main, "--model", "bert-large", "--topology", "pod64")
    report = json.loads(printed(ipupod_main, "scaling-report", "--model", "bert-large",
                               "--topologies", "pod64", "--out", str(tmp_path / "r"),
                               "--json"))
    accumulation = next(item for item in report["settings"]
                        if item["option"] == "--gradient-accumulation")
    assert accumulation["value"] == 64 and not accumulation["given"]
    assert report["rows"][0]["sim_seconds"] == pytest.approx(step["sim_seconds"], rel=1e-12)
