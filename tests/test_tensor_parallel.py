"""Tensor parallelism of a transformer (``--tensor-parallel T`` or ``T1xT2``): what each IPU
of a tensor group holds and computes, the all-reduces each layer runs and their bytes,
where the groups are placed, how a step adds them up, and what is refused. Phantom only."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from cluster.errors import SettingError, SpecError
from cluster.model.routing import router_of
from cluster.training.config import TrainConfig
from cluster.training.memory_plan import stage_memory
from cluster.training.optimizer_state import OptimizerState
from cluster.training.plan import TrainPlan, plan_for
from cluster.training.step_collectives import TENSOR_PARALLEL, step_collectives
from cluster.training.step_timing import gradient_allreduce_timing, step_time
from cluster.training.tensor_parallel.layer_allreduces import Axis, Phase, micro_batch_collectives
from cluster.training.tensor_parallel.layout import TensorParallel, parse_tensor_parallel
from cluster.training.tensor_parallel.split import rank_workload
from cluster.training.tensor_parallel_time import axis_groups, tensor_parallel_time
from cluster.training.workloads import parse_workload, to_yaml, workload
from cluster.training.workloads.tensor_shape import TensorRole
from gcl import CommGroup, plan, simulate
from gcl.collectives import CollectiveName, DType
from gcl.modes import Mode

GPT3_350M_HIDDEN, SEQUENCE = 1024, 2048
ONE_D, TWO_D = TensorParallel(4), TensorParallel(4, 4)


def tp_plan(model: str, layout: TensorParallel, topology: str = "pod16", **settings) -> TrainPlan:
    """``model`` on ``topology`` as ``layout`` tensor groups, as many replicas as fit."""
    config = TrainConfig(topology=topology, model=model, mode=Mode.PHANTOM, micro_batch=1,
                         replicas_per_server=0, ipus_per_replica=layout.size,
                         tensor_parallel=layout, **settings)
    return plan_for(config)


def per_layer(model: str, layout: TensorParallel) -> Counter:
    """All-reduces per micro-batch by transformer block (``block3``) or other layer."""
    found = micro_batch_collectives(workload(model), layout, recomputes=False)
    return Counter(c.layer.split(".")[0] for c in found)


def test_1d_runs_4_all_reduces_a_transformer_layer_1_for_the_embedding_4_for_head_and_loss():
    counts = per_layer("gpt3-350m", ONE_D)
    assert {counts[f"block{i}"] for i in range(24)} == {4}
    assert counts["embeddings"] == 1 and counts["head"] + counts["loss"] == 4


def test_2d_runs_8_all_reduces_a_transformer_layer_1_for_the_embedding_5_for_the_head():
    counts = per_layer("gpt3-2.7b", TWO_D)
    assert {counts[f"block{i}"] for i in range(32)} == {8}
    assert counts["embeddings"] == 1 and counts["head"] + counts["loss"] == 5


def test_bert_encoder_layers_run_4_all_reduces_each_with_1d():
    counts = per_layer("bert-large", ONE_D)
    assert {counts[f"encoder{i}"] for i in range(24)} == {4}


def test_each_1d_layer_all_reduce_carries_micro_batch_x_sequence_x_hidden_x_bytes():
    found = micro_batch_collectives(workload("gpt3-350m"), ONE_D, recomputes=False)
    blocks = [c for c in found if c.role in (TensorRole.ATTENTION, TensorRole.FFN)]
    micro_batch, float16 = 3, 2
    assert len(blocks) == 4 * 24
    assert {c.nbytes(micro_batch) for c in blocks} == {
        micro_batch * SEQUENCE * GPT3_350M_HIDDEN * float16}
    assert {c.axis for c in blocks} == {Axis.TENSOR}


def test_each_2d_all_reduce_carries_its_share_of_the_layers_activation():
    hidden, micro_batch, float16 = 2560, 2, 2  # gpt3-2.7b, 4 x 4
    found = micro_batch_collectives(workload("gpt3-2.7b"), TWO_D, recomputes=False)
    block = {(c.phase, c.axis, c.what): c.nbytes(micro_batch)
             for c in found if c.layer == "block0.attention"}
    assert block == {
        (Phase.FORWARD, Axis.T2, "first products' partial sums"):
            micro_batch * SEQUENCE * 3 * hidden // 4 * float16,
        (Phase.FORWARD, Axis.T1, "output"): micro_batch * SEQUENCE * hidden // 4 * float16,
        (Phase.BACKWARD, Axis.T2, "first products' output gradient"):
            micro_batch * SEQUENCE * 3 * hidden // 4 * float16,
        (Phase.BACKWARD, Axis.T1, "input gradient"): micro_batch * SEQUENCE * hidden // 4
        * float16}
    ffn = [c.nbytes(micro_batch) for c in found
           if c.layer == "block0.mlp" and c.axis is Axis.T2]
    assert ffn == [micro_batch * SEQUENCE * 4 * hidden // 4 * float16] * 2


def test_a_2d_group_of_one_ipu_along_an_axis_runs_no_all_reduce_over_it():
    found = micro_batch_collectives(workload("gpt3-350m"), TensorParallel(1, 4), False)
    assert {c.axis for c in found} == {Axis.T2}
    assert Counter(c.layer.split(".")[0] for c in found)["block0"] == 4


def test_recomputation_runs_each_forward_all_reduce_again():
    model = workload("gpt3-350m")
    base = micro_batch_collectives(model, ONE_D, recomputes=False)
    again = micro_batch_collectives(model, ONE_D, recomputes=True)
    forward = [c for c in base if c.phase is Phase.FORWARD]
    assert len(again) == len(base) + len(forward)
    assert sum(c.phase is Phase.RECOMPUTE for c in again) == len(forward)


@pytest.mark.parametrize("layout", [ONE_D, TWO_D, TensorParallel(2, 8)])
def test_each_ipu_holds_and_computes_a_t_th_of_every_layer_split(layout):
    model = workload("gpt3-2.7b")
    share = rank_workload(model, layout)
    for whole, part in zip(model.layers, share.layers):
        assert part.parameters == -(-whole.parameters // layout.size)
        assert part.forward_flops == -(-whole.forward_flops // layout.size)
        assert part.stashed_bytes < whole.stashed_bytes or whole.tensor.role in (
            TensorRole.EMBEDDING, TensorRole.HEAD)
    assert share.parameter_count == pytest.approx(model.parameter_count / layout.size,
                                                  rel=1e-6)


def test_the_step_computes_a_t_th_and_keeps_a_t_th_of_the_weights():
    whole = plan_for(TrainConfig(topology="pod16", model="bert-large", mode=Mode.PHANTOM,
                                 micro_batch=1, ipus_per_replica=1, replicas_per_server=4))
    split = tp_plan("bert-large", ONE_D)
    assert step_time(split).compute_seconds == pytest.approx(
        step_time(whole).compute_seconds / 4, rel=1e-3)
    assert stage_memory(split)[0].use.weights_bytes == pytest.approx(
        stage_memory(whole)[0].use.weights_bytes / 4, rel=1e-5)


def test_each_ipu_averages_its_share_of_the_gradient_with_the_same_ipu_of_every_replica():
    run = tp_plan("gpt3-350m", ONE_D, optimizer_state=OptimizerState.STREAMING)
    share = run.rank_workload.parameter_count
    expected = simulate(plan(CollectiveName.ALLREDUCE, run.topology, share, dtype=DType.FLOAT16,
                             algorithm_name=run.config.algorithm,
                             group=CommGroup.orthogonal(run.config.replicas),
                             ipus=run.chains.ravel()), run.topology)
    assert gradient_allreduce_timing(run).sim_seconds == expected.sim_seconds
    assert share == pytest.approx(run.workload.parameter_count / 4, rel=1e-6)


@pytest.mark.parametrize("layout", [ONE_D, TWO_D, TensorParallel(2, 8)])
def test_a_tensor_group_is_an_aligned_block_of_ipus_on_ipu_links(layout):
    run = tp_plan("gpt3-2.7b", layout, topology="pod64",
                  optimizer_state=OptimizerState.SHARDED_STREAMING)
    router = router_of(run.topology)
    assert run.chains.shape == (64 // layout.size, layout.size)
    for group in run.chains:
        assert sorted(group) == list(range(min(group), min(group) + layout.size))
        assert min(group) % layout.size == 0
        assert len(set(router.domain_of_ipu[group].tolist())) == 1
    for inner in axis_groups(run.chains, layout, Axis.T1 if layout.two_d else Axis.TENSOR):
        assert sorted(inner) == list(range(min(inner), min(inner) + len(inner)))


def test_the_step_adds_the_tensor_parallel_collectives_and_its_spans_add_up_to_them():
    run = tp_plan("gpt3-350m", TensorParallel(2, 2), optimizer_state=OptimizerState.STREAMING)
    time = step_time(run)
    assert time.tensor_parallel_seconds > 0
    assert time.sim_seconds == pytest.approx(sum(time.parts().values()))
    spans = [s for s in step_collectives(run) if s.track == TENSOR_PARALLEL]
    assert sum(s.seconds for s in spans) == pytest.approx(time.tensor_parallel_seconds)
    forward = 4 * 24 + 1 + 4  # the forward's all-reduces, run again by recomputation
    assert sum(s.args["count"] for s in spans) == 8 * 24 + 1 + 5 + forward


def test_the_trace_draws_each_kind_with_its_count_bytes_and_group(ipupod_main, tmp_path):
    path = tmp_path / "tp.json"
    done = ipupod_main("train", "--model", "gpt3-350m", "--tensor-parallel", "4",
                       "--micro-batch", "1", "--optimizer-state", "streaming", "--steps", "1",
                       "--trace", str(path))
    assert done.returncode == 0, done.stderr
    spans = [event for event in json.loads(path.read_text())["traceEvents"]
             if event.get("ph") == "X"
             and event["name"] == "forward all-reduce of the ffn's output"]
    assert len(spans) == 1 and spans[0]["args"]["count"] == 24
    assert spans[0]["args"]["bytes"] == SEQUENCE * GPT3_350M_HIDDEN * 2
    assert "tensor groups of 4 IPUs" in spans[0]["args"]["group"]


def test_each_kind_is_priced_by_the_cost_model_over_every_replicas_groups_at_once():
    run = tp_plan("gpt3-350m", ONE_D, optimizer_state=OptimizerState.STREAMING)
    kind = next(k for k in tensor_parallel_time(run).kinds if k.role is TensorRole.FFN)
    alone = simulate(plan(CollectiveName.ALLREDUCE, run.topology, kind.nbytes // 2,
                          dtype=DType.FLOAT16, algorithm_name=run.config.algorithm,
                          groups=list(run.chains)), run.topology)
    assert kind.seconds == alone.sim_seconds and kind.group_size == 4


@pytest.mark.parametrize("text, layout", [
    ("4", TensorParallel(4)), ("4x4", TensorParallel(4, 4)), (" 2X8 ", TensorParallel(2, 8)),
    (None, TensorParallel())])
def test_the_option_is_read_once_into_a_layout(text, layout):
    assert parse_tensor_parallel(text) == layout
    assert str(layout) == ("1" if text is None else text.strip().lower())


@pytest.mark.parametrize("text", ["3", "128", "16x8", "4x", "x4", "4x4x4", "0", "-2", "four", "²",
                                  "9" * 5000, "4x0", ""])
def test_a_layout_that_is_not_a_power_of_two_group_of_64_or_fewer_is_refused(text):
    with pytest.raises(SettingError) as info:
        parse_tensor_parallel(text)
    assert info.value.field == "tensor_parallel" and "--tensor-parallel" in str(info.value)


def test_a_group_that_does_not_divide_a_server_is_refused():
    config = TrainConfig(model="gpt3-125m", mode=Mode.PHANTOM, ipus_per_replica=16,
                         replicas_per_server=1, tensor_parallel=TensorParallel(16))
    with pytest.raises(SettingError, match="does not divide a server or rack of 8"):
        config.check_settings(8)


@pytest.mark.parametrize("args, words", [
    (["--model", "gpt2-xl", "--tensor-parallel", "2"], "does not divide the 25 attention heads"),
    (["--model", "gpt3-125m", "--tensor-parallel", "3"], "power-of-two block"),
    (["--model", "gpt3-125m", "--tensor-parallel", "4", "--ipus-per-replica", "2"],
     "give --ipus-per-replica 4"),
    (["--model", "resnet50", "--tensor-parallel", "4"], "has none it can split"),
    (["--tensor-parallel", "2", "--mode", "phantom"], "give --model a transformer"),
])
def test_what_cannot_be_split_is_refused_in_one_line(ipupod_main, args, words):
    done = ipupod_main("train", "--steps", "1", *args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1
    assert words in done.stderr and "Traceback" not in done.stderr


def test_tensor_parallel_1_prints_the_same_step_as_leaving_it_out(ipupod_main):
    args = ("train", "--model", "bert-large", "--steps", "1", "--json")
    without = json.loads(ipupod_main(*args).stdout)
    with_1 = json.loads(ipupod_main(*args, "--tensor-parallel", "1").stdout)
    assert with_1["steps"] == without["steps"]
    assert with_1["memory_per_ipu"] == without["memory_per_ipu"]
    assert with_1["steps"][0]["tensor_parallel_seconds"] == 0.0
    assert with_1["made_by"] == without["made_by"]


def test_gpt3_350m_trains_tensor_parallel_4_on_pod16(ipupod_main):
    done = ipupod_main("train", "--model", "gpt3-350m", "--tensor-parallel", "4",
                       "--micro-batch", "1", "--optimizer-state", "streaming", "--steps", "1")
    assert done.returncode == 0, done.stderr
    assert "4 replicas (4 IPUs each: tensor-parallel 4" in done.stdout
    assert "tensor-io" in done.stdout and "--tensor-parallel 4" in done.stdout


def test_gpt3_2_7b_on_pod64_as_4_replicas_of_a_2x8_tensor_group_runs_end_to_end(ipupod_main):
    done = ipupod_main("train", "--model", "gpt3-2.7b", "--topology", "pod64",
                       "--tensor-parallel", "2x8", "--optimizer-state", "sharded-streaming",
                       "--micro-batch", "1", "--gradient-accumulation", "128", "--steps", "1",
                       "--json")
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["replicas"] == 4 and record["tensor_parallel"] == "2x8"
    assert record["global_batch"] == 512  # the recipe's
    step = record["steps"][0]
    assert step["tensor_parallel_seconds"] > 0 and step["sim_seconds"] > 0


def test_graphcores_4x4_layout_of_gpt3_2_7b_is_refused_naming_the_layout_that_fits(ipupod_main):
    """Graphcore's recipe streams each layer's weights in phase by phase; without phased
    execution a 4 x 4 group keeps 936 MB on each 900 MB IPU, a 2 x 8 one 899 MB."""
    done = ipupod_main("train", "--model", "gpt3-2.7b", "--topology", "pod64",
                       "--tensor-parallel", "4x4", "--optimizer-state", "sharded-streaming",
                       "--micro-batch", "1", "--steps", "1")
    assert done.returncode == 2
    assert "needs 936 MB" in done.stderr and "try --tensor-parallel 2x8" in done.stderr


def test_a_model_too_big_for_its_ipus_is_told_the_tensor_parallel_layout_that_fits(ipupod_main):
    done = ipupod_main("train", "--model", "gpt3-1.3b", "--steps", "1")
    assert done.returncode == 2 and "; try " in done.stderr
    assert "--tensor-parallel" in done.stderr.split("; try ")[1]


def test_a_transformer_no_tensor_group_holds_is_told_what_it_would_need(ipupod_main):
    done = ipupod_main("train", "--model", "gpt3-6.7b", "--topology", "pod64", "--steps", "1")
    assert done.returncode == 2 and "nothing tried fits" not in done.stderr
    assert "--tensor-parallel 2 --phased (each checked: it fits)" in done.stderr


def test_a_workload_file_carries_each_layers_tensor_shape_and_reads_back_equal():
    model = workload("gpt3-125m")
    text = to_yaml(model)
    assert text.startswith("version: 4\n")
    assert ("tensor: {role: attention, hidden: 768, tokens: 2048, heads: 12, inner: 2304}"
            in text)
    assert parse_workload(text) == model


@pytest.mark.parametrize("tensor, words", [
    ("{role: attention, hidden: 8, tokens: 4, inner: 24}", "heads"),
    ("{role: ffn, hidden: 8, tokens: 4}", "inner"),
    ("{role: loss, hidden: 8, tokens: 4, inner: 3}", "inner"),
    ("{role: ffn, hidden: 8, tokens: 4, heads: 2}", "heads"),
    ("{role: head, hidden: 0, tokens: 4}", "hidden"),
    ("{role: decoder, hidden: 8, tokens: 4}", "role"),
    ("{role: ffn, hidden: 8}", "tokens"),
])
def test_a_bad_tensor_shape_in_a_workload_file_is_a_spec_error_naming_the_field(tensor, words):
    text = ("version: 4\nname: w\ninput_bytes: 4\nlayers:\n"
            "- {name: a, kind: dense, parameters: 10, forward_flops: 20, output_bytes: 4, "
            f"stashed_bytes: 8, tensor: {tensor}}}\n")
    with pytest.raises(SpecError) as info:
        parse_workload(text)
    assert "layers[0].tensor" in str(info.value) and words in str(info.value)


def test_a_tensor_shape_needs_version_4():
    text = ("version: 3\nname: w\ninput_bytes: 4\nlayers:\n"
            "- {name: a, kind: dense, parameters: 10, forward_flops: 20, output_bytes: 4, "
            "stashed_bytes: 8, tensor: {role: ffn, hidden: 8, tokens: 4, inner: 32}}\n")
    with pytest.raises(SpecError, match="version: 4"):
        parse_workload(text)


def test_a_workload_without_tensor_shapes_still_trains_whole():
    model = workload("gpt3-125m")
    plain = replace(model, layers=tuple(replace(layer, tensor=None) for layer in model.layers))
    assert rank_workload(plain, ONE_D).layers == tuple(
        replace(layer, tensor=None) for layer in model.layers)
    assert np.all([layer.tensor is None for layer in parse_workload(to_yaml(plain)).layers])


def test_a_plan_prices_its_all_reduces_once_and_a_replanned_one_anew():
    run = tp_plan("gpt3-350m", ONE_D)
    first = tensor_parallel_time(run)
    assert tensor_parallel_time(run) is first  # the step and --json's table share it
    again = run.replanned(micro_batch=2)
    assert tensor_parallel_time(again) is not first
    assert tensor_parallel_time(again).kinds[0].nbytes == 2 * first.kinds[0].nbytes
