"""``ipupod plan``: the layouts of a model on a topology, each checked for memory and
priced by the same step pricing as ``ipupod train`` (phantom, no Ray)."""

import contextlib
import io
import json
import shlex
from dataclasses import replace
from pathlib import Path

import pytest

from cluster.cli.main import main
from cluster.training.config import TrainConfig
from cluster.training.fit import fits
from cluster.training.plan import plan_for
from cluster.training.planner.report import Question, train_command
from cluster.training.planner.search import compute_seconds, layout_plan, search
from cluster.training.planner.space import ReplicaShape, default_global_batch, replica_shapes
from cluster.training.step_timing import step_time
from gcl.modes import Mode

MOE_EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "workloads" / "moe-small.yaml"
SMALL = ("--model", "gpt3-125m", "--topology", "pod16", "--global-batch", "16")


@pytest.fixture(scope="module")
def small_search():
    """gpt3-125m on a POD16, 16 samples a step: every layout the planner tried."""
    base = plan_for(TrainConfig(topology="pod16", model="gpt3-125m", mode=Mode.PHANTOM,
                                replicas_per_server=0))
    return search(base, 16, top=10**6)  # every layout that fits priced


@pytest.fixture(scope="module")
def small_answer():
    """``ipupod plan ... --top 3 --json`` of the small search, run here once for the
    module (capsys is per test, so its output is caught by redirection)."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(["plan", *SMALL, "--top", "3", "--json"])
    return json.loads(out.getvalue())


def test_the_best_layout_is_at_least_as_fast_as_every_fitting_one_priced(small_search):
    best = small_search.priced[0].step.sim_seconds
    assert len(small_search.priced) > 10
    assert all(best <= other.step.sim_seconds for other in small_search.priced)
    assert len(small_search.priced) + small_search.unschedulable == len(small_search.fitting)
    assert small_search.tried == (len(small_search.fitting) + len(small_search.misses)
                                  + small_search.invalid)


def test_each_layouts_compute_bound_is_its_priced_compute_part(small_search):
    for found in small_search.priced:
        assert compute_seconds(found.plan) == found.step.compute_seconds


def test_pricing_the_fastest_few_finds_what_pricing_all_finds(small_search):
    base = small_search.priced[0].plan
    few = search(base, 16, top=3)
    assert len(few.priced) < len(small_search.priced)
    assert len(few.fitting) == len(small_search.fitting)
    assert ([p.step.sim_seconds for p in few.priced[:3]]
            == [p.step.sim_seconds for p in small_search.priced[:3]])


def test_a_larger_micro_batch_than_a_near_miss_does_not_fit_either(small_search):
    """The search stops a run of micro-batches at the first that does not fit: checked
    here by trying every larger one of each run it stopped."""
    for miss in small_search.misses:
        layout = miss.layout
        larger = layout.micro_batch * 2
        while 16 % (miss.plan.config.replicas * larger) == 0:
            bigger = replace(layout, micro_batch=larger,
                             accumulation=16 // (miss.plan.config.replicas * larger))
            assert not fits(layout_plan(miss.plan, bigger)), bigger
            larger *= 2


def test_every_layout_keeps_the_global_batch(small_search):
    for found in small_search.priced:
        assert found.plan.config.global_batch == 16


def test_the_printed_best_is_the_searchs_best(small_search, small_answer):
    assert small_answer["layouts"][0]["step_seconds"] == small_search.priced[0].step.sim_seconds
    steps = [layout["step_seconds"] for layout in small_answer["layouts"]]
    assert steps == sorted(steps)


def test_each_printed_train_command_reproduces_its_step_time(small_answer, ipupod_main):
    for layout in small_answer["layouts"]:
        words = shlex.split(layout["command"])
        assert words[:2] == ["ipupod", "train"]
        run = ipupod_main(*words[1:], "--steps", "1", "--json")
        assert run.returncode == 0, run.stderr
        record = json.loads(run.stdout)
        assert record["steps"][0]["sim_seconds"] == layout["step_seconds"]


def test_json_has_the_layouts_parts_utilisation_memory_and_near_misses(small_answer):
    assert {"model", "topology", "global_batch", "global_batch_reason", "peak",
            "peak_flops_per_second_per_ipu", "model_flops_per_step", "tried", "fit",
            "verdict", "layouts", "near_misses"} <= set(small_answer)
    assert len(small_answer["layouts"]) == 3
    first = small_answer["layouts"][0]
    assert sum(first["parts_seconds"].values()) == pytest.approx(first["step_seconds"])
    assert 0 < first["model_flops_utilisation"] < 1
    assert first["memory_per_ipu_bytes"] <= first["capacity_bytes"]
    assert first["samples_per_second"] == pytest.approx(16 / first["step_seconds"])
    utilisation = small_answer["model_flops_per_step"] / (
        first["ipus"] * small_answer["peak_flops_per_second_per_ipu"] * first["step_seconds"])
    assert first["model_flops_utilisation"] == pytest.approx(utilisation)
    for miss in small_answer["near_misses"]:
        assert miss["needs_bytes"] > miss["capacity_bytes"]
        assert miss["over_bytes"] == miss["needs_bytes"] - miss["capacity_bytes"]
        assert "more than its" in miss["why"]


def test_a_model_too_big_for_every_layout_says_none_fits_and_why(ipupod_main):
    run = ipupod_main("plan", "--model", "gpt3-175b", "--topology", "dss8440",
                      "--global-batch", "4", "--json")
    assert run.returncode == 0, run.stderr
    answer = json.loads(run.stdout)
    assert answer["fit"] == 0 and answer["layouts"] == []
    assert answer["verdict"].startswith("no layout fits: the nearest")
    assert "phased execution" in answer["verdict"]
    assert answer["near_misses"][0]["over_bytes"] > 0
    text = ipupod_main("plan", "--model", "gpt3-175b", "--topology", "dss8440",
                       "--global-batch", "4")
    assert "no layout fits" in text.stdout and "In-Processor-Memory" in text.stdout


def test_the_default_global_batch_is_gpt3s_published_one():
    assert default_global_batch("gpt3-2.7b", None)[0] == 512
    assert default_global_batch("gpt3-175b", None)[0] == 1536
    assert default_global_batch("gpt3-2.7b", 1024)[0] == 1024  # the same tokens
    assert default_global_batch("llama-7b", None)[0] == 512


@pytest.mark.parametrize("args, says", [
    (("--model", "mlp", "--topology", "pod16"), "not the MLP"),
    ((*SMALL[:4], "--global-batch", "0"), "--global-batch runs from 1"),
    ((*SMALL, "--top", "0"), "--top runs from 1"),
    (("--model", "gpt3-125m", "--topology", "pod256", "--global-batch", "6"),
     "give a multiple of 4"),
    (("--model", "no-such-model", "--topology", "pod16"), ""),
])
def test_a_mistake_is_one_error_line(ipupod_main, args, says):
    run = ipupod_main("plan", *args)
    assert run.returncode == 2
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0]
    assert run.stdout == ""


def test_pipelines_of_tensor_groups_are_searched_and_priced_as_train_prices_them(
        small_search, ipupod_main):
    composed = [found for found in small_search.priced
                if found.layout.shape.stages > 1 and found.layout.shape.tensor_parallel.on]
    assert composed, "no pipeline of tensor groups fits gpt3-125m on a POD16"
    found = composed[0]
    shape = found.layout.shape
    assert found.plan.config.ipus_per_replica == shape.stages * shape.tensor_parallel.size
    assert found.step.sim_seconds == step_time(layout_plan(found.plan, found.layout)).sim_seconds
    question = Question("gpt3-125m", "pod16", None, 16, "", 1)
    words = shlex.split(train_command(question, found.layout))
    assert f"--ipus-per-replica {shape.ipus}" in " ".join(words)
    run = ipupod_main(*words[1:], "--steps", "1", "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["steps"][0]["sim_seconds"] == found.step.sim_seconds


def test_a_moe_model_s_experts_are_searched_over_expert_groups_with_and_without_tensor_groups():
    shapes = replica_shapes(16, 4, experts=8)
    experts = {shape.expert_parallel for shape in shapes}
    assert experts == {1, 2, 4, 8}
    alone = [s for s in shapes if s.expert_parallel == 1]
    for degree in (2, 4, 8):
        assert [s for s in shapes if s.expert_parallel == degree] == [
            ReplicaShape(s.tensor_parallel, s.stages, degree) for s in alone]
    assert any(s.expert_parallel > 1 and s.tensor_parallel.on for s in shapes)
    assert {s.expert_parallel for s in replica_shapes(16, 4)} == {1}


def test_a_moe_search_prices_expert_parallel_layouts():
    base = plan_for(TrainConfig(topology="pod16", model=str(MOE_EXAMPLE), mode=Mode.PHANTOM,
                                replicas_per_server=0))
    found = search(base, 16, top=3)
    spread = [p for p in found.fitting if p.layout.shape.expert_parallel > 1]
    assert spread and all(p.plan.config.replicas_per_server % p.layout.shape.expert_parallel
                          == 0 for p in spread)
    assert found.priced and found.priced[0].step.sim_seconds > 0
    assert any(p.layout.shape.tensor_parallel.on for p in spread)  # expert x tensor groups


def test_phased_layouts_are_tried_and_gpt3_175b_fits_a_pod16_only_phased(ipupod_main):
    run = ipupod_main("plan", "--model", "gpt3-175b", "--topology", "pod16",
                      "--global-batch", "4", "--json")
    assert run.returncode == 0, run.stderr
    answer = json.loads(run.stdout)
    assert answer["fit"] > 0 and all(layout["phased"] for layout in answer["layouts"])
    assert answer["layouts"][0]["command"].endswith(" --phased")
