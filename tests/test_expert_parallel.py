"""Expert parallelism (``--expert-parallel E``): what each IPU of an expert group holds,
the all-to-alls each mixture-of-experts layer runs and their bytes, how they are priced
and added to a step, and what is refused. Phantom only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cluster.errors import SettingError
from cluster.model.routing import router_of
from cluster.training.config import TrainConfig
from cluster.training.expert_parallel.expert_groups import parse_expert_parallel
from cluster.training.expert_parallel_time import (
    expert_groups,
    expert_parallel_time,
    layer_all_to_alls,
)
from cluster.training.plan import TrainPlan, plan_for
from cluster.training.step_collectives import EXPERT_PARALLEL, step_collectives
from cluster.training.step_timing import step_time
from cluster.training.workloads import workload
from cluster.training.workloads.decoder import DecoderConfig, decoder
from cluster.training.workloads.experts import Experts
from cluster.training.workloads.layers import Layer
from cluster.training.workloads.llama import llama_block
from cluster.training.workloads.workload_yaml import load_workload
from gcl import plan, simulate
from gcl.collectives import CollectiveName, DType
from gcl.modes import Mode

MIXTRAL_HIDDEN, MIXTRAL_SEQUENCE = 4096, 4096
SMALL_HIDDEN, SMALL_SEQUENCE = 512, 256


EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "workloads" / "moe-small.yaml"


@pytest.fixture(scope="module")
def small_moe() -> Path:
    """A 4-layer decoder of 8 top-2 experts a layer (hidden 512, 256 tokens) that fits a
    POD16 IPU: the example workload file."""
    return EXAMPLE


def test_the_example_moe_file_reads_back_equal_to_its_decoder():
    built = decoder(DecoderConfig("moe-small", 4, llama_block(SMALL_HIDDEN, 8, 1024, kv_heads=2),
                                  8000, 1024, experts=Experts(8, 2, 1.25)), SMALL_SEQUENCE)
    assert load_workload(EXAMPLE) == built


def ep_plan(model: str, degree: int, topology: str = "pod16", **settings) -> TrainPlan:
    """``model`` on ``topology`` with expert groups of ``degree``, as many replicas as fit."""
    config = TrainConfig(topology=topology, model=model, mode=Mode.PHANTOM,
                         replicas_per_server=0, expert_parallel=degree, **settings)
    return plan_for(config)


def moe_layers(model: str) -> list[Layer]:
    """The mixture-of-experts layers of built-in ``model``."""
    return [layer for layer in workload(model).layers if layer.experts is not None]


def test_each_moe_layer_runs_4_all_to_alls_a_micro_batch_and_6_with_recomputation():
    layers = moe_layers("moe-8x7b")
    assert len(layers) == 32
    assert {len(layer_all_to_alls(layer, 1, recomputes=False)) for layer in layers} == {4}
    assert {len(layer_all_to_alls(layer, 1, recomputes=True)) for layer in layers} == {6}
    found = layer_all_to_alls(layers[0], 1, recomputes=False)
    assert [(c.phase, c.what) for c in found] == [
        ("forward", "dispatch"), ("forward", "combine"),
        ("backward", "combine gradient"), ("backward", "dispatch gradient")]


def test_no_other_layer_runs_an_all_to_all():
    for layer in workload("moe-8x7b").layers:
        if layer.experts is None:
            assert layer_all_to_alls(layer, 1, recomputes=True) == []


@pytest.mark.parametrize("micro_batch", [1, 2])
def test_each_all_to_all_carries_tokens_x_top_k_x_hidden_x_bytes_x_capacity_factor(micro_batch):
    hand = micro_batch * MIXTRAL_SEQUENCE * 2 * MIXTRAL_HIDDEN * 2 * 1.25  # top-2, float16
    for layer in moe_layers("moe-8x7b"):
        assert {c.nbytes for c in layer_all_to_alls(layer, micro_batch, False)} == {hand}
    assert hand == micro_batch * 83_886_080


def test_each_ipu_holds_an_e_th_of_every_moe_layers_experts(small_moe):
    run = ep_plan(str(small_moe), 8, micro_batch=1)
    for whole, share in zip(run.workload.layers, run.rank_workload.layers):
        divisor = 8 if whole.experts is not None else 1
        assert share.parameters == -(-whole.parameters // divisor)
        assert (share.forward_flops, share.stashed_bytes) == (whole.forward_flops,
                                                            whole.stashed_bytes)


def test_moe_8x7b_all_to_alls_are_priced_over_every_expert_group_of_a_pod_at_once():
    run = ep_plan("moe-8x7b", 8, "pod64", micro_batch=1, ipus_per_replica=8, accumulation=16)
    found = expert_parallel_time(run)
    assert found.capacity_factor == 1.25
    assert len(found.kinds) == 6 and {k.nbytes for k in found.kinds} == {83_886_080}
    assert {k.count for k in found.kinds} == {4 * 16}  # 4 MoE layers a stage, 16 micro-batches
    groups = expert_groups(run.chains, 8, 0)
    assert len(groups) == 1 and list(groups[0]) == list(run.chains[:, 0])
    assert len(set(router_of(run.topology).domain_of_ipu[groups[0]].tolist())) == 1
    alone = simulate(plan(CollectiveName.ALL_TO_ALL, run.topology, 83_886_080 // 2 // 8,
                          dtype=DType.FLOAT16, groups=groups), run.topology)
    assert found.kinds[0].seconds == alone.sim_seconds > 0


def test_the_step_adds_the_expert_parallel_collectives_and_its_spans_add_up_to_them(small_moe):
    run = ep_plan(str(small_moe), 8, micro_batch=4)
    time = step_time(run)
    assert time.expert_parallel_seconds == expert_parallel_time(run).seconds > 0
    assert time.sim_seconds == pytest.approx(sum(time.parts().values()))
    spans = [s for s in step_collectives(run) if s.track == EXPERT_PARALLEL]
    assert sum(s.seconds for s in spans) == pytest.approx(time.expert_parallel_seconds)
    assert sum(s.args["count"] for s in spans) == 6 * 4  # 4 MoE layers, recomputation on


def test_each_ipu_reduces_its_share_of_the_gradient(small_moe):
    whole, split = (step_time(ep_plan(str(small_moe), degree, micro_batch=4))
                    for degree in (1, 8))
    assert split.local_allreduce_seconds < whole.local_allreduce_seconds / 2


@pytest.mark.parametrize("text, degree", [("8", 8), (" 2 ", 2), ("1", 1), (None, 1)])
def test_the_option_is_read_once_into_a_degree(text, degree):
    assert parse_expert_parallel(text) == degree


@pytest.mark.parametrize("text", ["0", "-2", "two", "²", "9" * 5000, "", "2x2"])
def test_an_option_that_is_not_a_whole_number_of_1_or_more_is_refused(text):
    with pytest.raises(SettingError) as info:
        parse_expert_parallel(text)
    assert info.value.field == "expert_parallel" and "--expert-parallel" in str(info.value)


@pytest.mark.parametrize("args, words", [
    (["--expert-parallel", "3"], "3 does not divide the 8 experts of block0.moe"),
    (["--expert-parallel", "16"], "16 does not divide the 8 experts"),
    (["--expert-parallel", "4", "--replicas-per-server", "6"], "a multiple of 4"),
    (["--expert-parallel", "two"], "a whole number"),
])
def test_what_cannot_be_split_is_refused_in_one_line(ipupod_main, small_moe, args, words):
    done = ipupod_main("train", "--steps", "1", "--topology", "pod16", "--model",
                       str(small_moe), *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
    assert words in done.stderr and "--expert-parallel" in done.stderr


@pytest.mark.parametrize("args, words", [
    (["--model", "gpt3-125m", "--expert-parallel", "2"], "has none"),
    (["--model", "gpt3-125m", "--expert-parallel", "2", "--tensor-parallel", "2"], "has none"),
])
def test_a_model_without_experts_is_refused(ipupod_main, args, words):
    done = ipupod_main("train", "--steps", "1", *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
    assert words in done.stderr


def test_expert_parallel_1_prints_the_same_as_leaving_it_out(ipupod_main, small_moe):
    args = ("train", "--model", str(small_moe), "--topology", "pod16", "--steps", "1")
    without = ipupod_main(*args)
    assert without.returncode == 0, without.stderr
    assert ipupod_main(*args, "--expert-parallel", "1").stdout == without.stdout
    record = json.loads(ipupod_main(*args, "--expert-parallel", "1", "--json").stdout)
    assert record["expert_parallel"] == 1 and "expert_load" not in record
    assert record["steps"][0]["expert_parallel_seconds"] == 0.0


def test_a_moe_decoder_trains_with_expert_parallelism_on_a_pod(ipupod_main, small_moe,
                                                               tmp_path):
    path = tmp_path / "ep.json"
    args = ("train", "--model", str(small_moe), "--topology", "pod16", "--steps", "1",
            "--expert-parallel", "8", "--micro-batch", "4")
    done = ipupod_main(*args, "--trace", str(path))
    assert done.returncode == 0, done.stderr
    assert "16 replicas (1 IPU each, experts over 8 replicas)" in done.stdout
    assert "busiest expert computes 1.25 x the mean's tokens" in done.stdout
    assert "expert-io" in done.stdout
    spans = [event for event in json.loads(path.read_text())["traceEvents"]
             if event.get("ph") == "X" and event["name"] == "forward all-to-all: MoE dispatch"]
    hand = 4 * SMALL_SEQUENCE * 2 * SMALL_HIDDEN * 2 * 1.25
    assert len(spans) == 1 and spans[0]["args"]["bytes"] == hand
    assert spans[0]["args"]["count"] == 4
    record = json.loads(ipupod_main(*args, "--json").stdout)
    assert record["expert_parallel"] == 8 and record["steps"][0]["expert_parallel_seconds"] > 0
    assert record["expert_load"] == {"experts": 8, "experts_per_ipu": 1, "top_k": 2,
                                     "busiest_expert_over_mean": 1.25}
