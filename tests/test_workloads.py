"""Built-in workloads against their published figures; the registry; compute seconds and
memory by hand on the tiny example."""

from __future__ import annotations

import math
from dataclasses import fields
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from cluster.cli.training_options import _hidden as cli_hidden
from cluster.errors import SpecError, UserError
from cluster.model.hardware import gc2, gc200
from cluster.training.numpy_mlp import MLPSpec, training_flops
from cluster.training.workloads import (
    DEFAULT_EFFICIENCIES,
    DType,
    Efficiencies,
    LayerKind,
    Workload,
    backward_seconds,
    fits,
    forward_seconds,
    layer_seconds,
    memory_use,
    mlp_workload,
    peak_flops_per_second,
    stage_input_bytes,
    training_seconds,
    update_bytes,
    update_flops,
    update_seconds,
    workload,
    workload_names,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples" / "workloads"
MB = 1000**2


def matmul_macs(w: Workload) -> int:
    return sum(layer.forward_flops for layer in w.layers
               if layer.kind in (LayerKind.CONV, LayerKind.DENSE)) // 2


def narayanan_forward_flops(s: int, layers: int, h: int) -> float:
    """The transformer layers' forward FLOPs per sequence in Narayanan et al. 2021, 5.1."""
    return 24 * s * layers * h * h * (1 + s / (6 * h))


# -- built-ins against published figures ------------------------------------------------


def test_resnet50_has_torchvisions_parameters_and_4_09_gmacs():
    w = workload("resnet50")
    assert w.parameter_count == 25_557_032  # torchvision resnet50 (v1.5), exactly
    assert matmul_macs(w) == pytest.approx(4.09e9, rel=0.002)  # "4.1 GFLOPs" are MACs
    assert 8.18e9 < w.forward_flops < 8.4e9  # 2 FLOPs per MAC plus norms and ReLUs
    assert len(w.layers) == 126
    assert sum(layer.kind is LayerKind.CONV for layer in w.layers) == 53
    assert (w.weight_dtype, w.partials_dtype) == (DType.FLOAT16, DType.FLOAT16)
    assert w.optimizer_values_per_parameter == 1  # SGD with momentum
    assert w.input_bytes == 3 * 224 * 224 * 2 + 4


def test_resnet50_keeps_the_residual_beside_a_blocks_inner_outputs():
    layers = {layer.name: layer for layer in workload("resnet50").layers}
    block_input = 64 * 56 * 56 * 2  # layer1.0 takes the pooled stem, float16
    assert layers["layer1.0.conv1"].output_bytes == 64 * 56 * 56 * 2 + block_input
    assert layers["layer1.0.add"].output_bytes == 256 * 56 * 56 * 2
    assert layers["layer1.0.downsample.0"].stashed_bytes == 0  # conv1 keeps the input


def test_bert_parameters_match_the_published_models():
    base, large = workload("bert-base"), workload("bert-large")
    assert base.parameter_count == 110_106_428  # "110M" (Devlin et al.)
    assert large.parameter_count == 336_226_108  # "340M"; 335.1 M without the heads
    for w, hidden, bert_model in ((base, 768, 109_482_240), (large, 1024, 335_141_888)):
        heads = w.layers[-2].parameters
        pooler = hidden * hidden + hidden  # Hugging Face's BertModel keeps the pooler
        assert w.parameter_count - heads + pooler == bert_model
    assert len(large.layers) == 1 + 2 * 24 + 2 and len(base.layers) == 1 + 2 * 12 + 2


@pytest.mark.parametrize("name, layers, hidden", [("bert-base", 12, 768),
                                                  ("bert-large", 24, 1024)])
def test_bert_forward_flops_match_narayanans_count(name, layers, hidden):
    w = workload(name)
    m, vocabulary = 20, 30_522
    heads = 2 * m * hidden * (hidden + vocabulary) + 2 * hidden * hidden
    reference = narayanan_forward_flops(128, layers, hidden) + heads
    assert w.forward_flops == pytest.approx(reference, rel=0.005)


def test_bert_sequence_length_is_an_option():
    short, long = workload("bert-large"), workload("bert-large", sequence_length=512)
    assert short.parameter_count == long.parameter_count
    assert long.forward_flops > 4 * short.forward_flops
    masked = next(layer for layer in long.layers if layer.name == "heads")
    assert masked.output_bytes == 2 * (77 * 30_522 + 2)  # ceil(0.15 * 512) positions
    assert workload("bert-base", sequence_length=384, masked_positions=56).input_bytes == (
        4 * (3 * 384 + 2 * 56 + 1))


def test_gpt2_xl_has_1_56_billion_parameters_and_needs_pipelining():
    w = workload("gpt2-xl")
    assert w.parameter_count == 1_557_611_200  # Hugging Face gpt2-xl
    s, h, vocabulary = 1024, 1600, 50_257
    reference = narayanan_forward_flops(s, 48, h) + 2 * s * h * vocabulary
    assert w.forward_flops == pytest.approx(reference, rel=0.005)
    assert w.optimizer_values_per_parameter == 2
    whole = memory_use(w, optimizer_offchip=True, recompute=True)
    assert whole.weights_bytes > gc200().in_processor_memory_bytes  # 3.1 GB of float16
    assert not fits(whole, gc200())


def test_gpt2_xl_fits_sixteen_gc200s_at_sequence_512_with_recomputation():
    w = workload("gpt2-xl", sequence_length=512)
    layers = w.layers  # embeddings, 48 x (attention, mlp), head, loss
    stages = [layers[:7]] + [layers[7 + 6 * k: 13 + 6 * k] for k in range(14)]
    stages.append(layers[7 + 6 * 14:])
    assert sum(map(len, stages)) == len(layers) and len(stages) == 16
    for stage in stages:
        use = memory_use(w, stage, micro_batch=1, in_flight=16, recompute=True,
                         optimizer_offchip=True)
        assert fits(use, gc200()), stage[0].name


def test_transformer_stash_is_korthikantis_34_sh_plus_5_as2():
    w = workload("gpt2-xl")
    s, h, a = 1024, 1600, 25
    per_layer = w.layers[1].stashed_bytes + w.layers[2].stashed_bytes
    assert per_layer == s * h * (34 + 5 * a * s // h)


def test_mlp_is_the_trainers_model_at_its_defaults():
    w = workload("mlp")
    spec = MLPSpec(64, (128,), 10)
    assert w == mlp_workload(spec)
    assert w.parameter_count == spec.parameter_count
    assert workload("mlp", input_size=8, hidden=[16, 16], classes=3) == mlp_workload(
        MLPSpec(8, (16, 16), 3))
    assert workload("mlp", hidden="16,16") == workload("mlp", hidden=(16, 16))


# -- the registry ---------------------------------------------------------------------


def test_names_and_options():
    assert workload_names() == (  # by family, then by size as people read it
        "bert-base", "bert-large", "gpt2-xl", "gpt3-125m", "gpt3-350m", "gpt3-1.3b",
        "gpt3-2.7b", "gpt3-6.7b", "gpt3-13b", "gpt3-175b", "gpt-j-6b", "gpt-tiny", "llama-7b",
        "llama-70b", "mlp", "moe-8x7b", "resnet50")
    w = workload("bert-base", partials_dtype="float32", gradient_dtype="float32",
                 optimizer_values_per_parameter=1)
    assert (w.partials_dtype, w.gradient_dtype, w.weight_dtype) == (
        DType.FLOAT32, DType.FLOAT32, DType.FLOAT16)
    assert w.optimizer_values_per_parameter == 1
    assert w.layers[1].output_bytes == 4 * 128 * 768
    assert workload(EXAMPLES / "tiny.yaml").name == "tiny"
    assert workload(str(EXAMPLES / "tiny.yaml")).name == "tiny"
    with pytest.raises(SpecError, match="cannot read"):
        workload(Path("mlp"))  # a Path is a file, even if named like a built-in


@pytest.mark.parametrize("name, options, words", [
    ("bert-lage", {}, ["did you mean 'bert-large'", "resnet50", "gpt2-xl"]),
    ("resnet", {}, ["resnet50"]),
    ("bert-large", {"seq_len": 128}, ["no option 'seq_len'", "sequence_length"]),
    ("bert-large", {"sequence_length": 1024}, ["sequence_length", "1 to 512"]),
    ("gpt2-xl", {"sequence_length": 0}, ["sequence_length", "1 to 1,024"]),
    ("gpt2-xl", {"sequence_length": True}, ["whole number"]),
    ("bert-base", {"masked_positions": 200}, ["masked_positions"]),
    ("resnet50", {"weight_dtype": "bfloat16"}, ["weight_dtype", "float16, float32"]),
    ("resnet50", {"image_size": 16}, ["image_size"]),
    ("mlp", {"partials_dtype": "float16"}, ["no option 'partials_dtype'"]),
    ("mlp", {"hidden": [0]}, ["hidden"]),
    ("mlp", {"hidden": "a,b"}, ["hidden"]),
    ("mlp", {"optimizer_values_per_parameter": 99}, ["optimizer_values_per_parameter"]),
    ("examples/workloads/tiny.yaml", {"sequence_length": 3}, ["built-in workloads only"]),
    ("no/such/file.yaml", {}, ["cannot read"]),
])
def test_bad_names_and_options_are_spec_errors_saying_what_to_do(name, options, words):
    with pytest.raises(SpecError) as info:
        workload(name, **options)
    for word in words:
        assert word in str(info.value)


@pytest.mark.parametrize("text", ["", " , ", "a,b", "0", "12,x", "²", ",".join(["8"] * 65)])
def test_the_cli_and_the_mlp_workload_refuse_the_same_hidden_widths_alike(text):
    with pytest.raises(SpecError) as from_registry:
        workload("mlp", hidden=text)
    with pytest.raises(SpecError) as from_cli:
        cli_hidden(text)
    assert str(from_cli.value).startswith("--hidden: ")
    assert str(from_registry.value).endswith(str(from_cli.value).removeprefix("--"))


def test_the_cli_and_the_mlp_workload_read_hidden_widths_alike():
    assert cli_hidden("128, 64") == (128, 64)
    assert workload("mlp", hidden="128, 64") == workload("mlp", hidden=[128, 64])


# -- compute seconds: the tiny example by hand ----------------------------------------


def test_tiny_step_time_by_hand():
    w, ipu = workload(EXAMPLES / "tiny.yaml"), gc200()
    # 250e12 fp16; attention and dense at 0.22 -> 55e12, the rest at 0.05 -> 12.5e12
    forward = 5_000 / 12.5e12 + 2 * (110_000 / 55e12 + 220_000 / 55e12) + 1_250 / 12.5e12
    assert forward == pytest.approx(12.5e-9, rel=1e-12)
    assert forward_seconds(w, ipu, 1) == pytest.approx(12.5e-9, rel=1e-12)
    assert backward_seconds(w, ipu, 64) == pytest.approx(64 * 25e-9, rel=1e-12)
    assert training_seconds(w, ipu, 64) == pytest.approx(2.4e-6, rel=1e-12)
    assert training_seconds(w, ipu, 64, recompute=True) == pytest.approx(3.2e-6, rel=1e-12)
    # Adam: 12 FLOPs a parameter at 0.05 of the 62.5e12 fp32 peak; 2+2 (weights read
    # and written) + 2 (gradients) + 2*2*4 (state read and written) = 22 bytes at 47.5 TB/s
    assert update_flops(w) == 25_000 * 12 and update_bytes(w) == 25_000 * 22
    update = 300_000 / 3.125e12 + 550_000 / 47.5e12
    assert update_seconds(w, ipu) == pytest.approx(update, rel=1e-12)
    step = training_seconds(w, ipu, 64) + update_seconds(w, ipu)
    assert step == pytest.approx(2.4e-6 + 9.6e-8 + 550_000 / 47.5e12, rel=1e-12)


def test_tiny_stage_and_layer_seconds():
    w, ipu = workload(EXAMPLES / "tiny.yaml"), gc200()
    block = w.layers[1:3]
    assert forward_seconds(w, ipu, 2, layers=block) == pytest.approx(12e-9, rel=1e-12)
    assert layer_seconds(w.layers[0], ipu, DType.FLOAT32, 1) == pytest.approx(
        5_000 / (62.5e12 * 0.05), rel=1e-12)
    assert forward_seconds(w, ipu, 0) == 0
    assert update_seconds(w, ipu, parameters=0) == 0
    lamb = update_seconds(w, ipu, flops_per_parameter=19)
    assert lamb == pytest.approx(25_000 * 19 / 3.125e12 + 550_000 / 47.5e12, rel=1e-12)


def test_gc2_peaks_follow_the_figure_choice():
    w = workload(EXAMPLES / "tiny.yaml")
    assert peak_flops_per_second(gc2(), DType.FLOAT16) == 100e12  # seed 000
    assert forward_seconds(w, gc2(), 1) == pytest.approx(12.5e-9 * 2.5, rel=1e-12)
    assert peak_flops_per_second(gc2(), DType.FLOAT32) == 31.1e12


def test_peak_efficiency_reproduces_the_trainers_mlp_pricing():
    spec, ipu = MLPSpec(64, (128,), 10), gc200()
    seconds = training_seconds(workload("mlp"), ipu, 32, Efficiencies.peak())
    assert seconds == pytest.approx(training_flops(spec, 32) / ipu.fp32_flops_per_second,
                                    rel=1e-12)


def test_default_efficiencies_follow_from_the_published_throughputs():
    """conv: 30,000 images/s on 16 GC200s; dense/attention: 5,179 sequences/s on 16 Bow
    IPUs (350 TFLOPS) -- the arithmetic in Efficiencies' docstring."""
    resnet = 30_000 * 3 * workload("resnet50").forward_flops / (16 * 250e12)
    bert = 5_179 * 3 * workload("bert-large").forward_flops / (16 * 350e12)
    assert DEFAULT_EFFICIENCIES.conv == pytest.approx(resnet, abs=0.005)
    assert DEFAULT_EFFICIENCIES.dense == DEFAULT_EFFICIENCIES.attention
    assert DEFAULT_EFFICIENCIES.dense == pytest.approx(bert, abs=0.005)


def test_efficiencies_cover_every_layer_kind():
    assert {f.name for f in fields(Efficiencies)} == {kind.value for kind in LayerKind}
    assert all(Efficiencies.peak().of(kind) == 1.0 for kind in LayerKind)
    assert DEFAULT_EFFICIENCIES.with_overrides({"conv": 0.5}).conv == 0.5
    assert DEFAULT_EFFICIENCIES.with_overrides({LayerKind.NORM: 1}).of(LayerKind.NORM) == 1
    assert Efficiencies(conv=Fraction(1, 4)).of(LayerKind.CONV) == 0.25


@pytest.mark.parametrize("overrides, words", [
    ({"conv": 0}, ["conv", "more than 0"]), ({"dense": 1.5}, ["at most 1"]),
    ({"norm": -0.1}, ["norm"]), ({"loss": float("nan")}, ["loss"]),
    ({"pool": "0.5"}, ["pool", "'0.5'"]), ({"attention": True}, ["attention"]),
    ({"convolution": 0.5}, ["no layer kind", "conv"]),
])
def test_bad_efficiency_overrides_are_user_errors(overrides, words):
    with pytest.raises(UserError) as info:
        DEFAULT_EFFICIENCIES.with_overrides(overrides)
    for word in words:
        assert word in str(info.value)


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_an_efficiency_is_taken_exactly_when_in_0_to_1(value):
    if 0 < value <= 1:
        assert Efficiencies(conv=value).conv == value
    else:
        with pytest.raises(UserError):
            Efficiencies(conv=value)


@given(st.sampled_from(["resnet50", "bert-base", "mlp"]), st.integers(0, 4096))
def test_seconds_scale_with_samples(name, samples):
    w, ipu = workload(name), gc200()
    one = training_seconds(w, ipu, 1)
    assert math.isclose(training_seconds(w, ipu, samples), samples * one, rel_tol=1e-9)


# -- memory: the tiny example by hand -------------------------------------------------


def test_tiny_memory_by_hand():
    w = workload(EXAMPLES / "tiny.yaml")
    use = memory_use(w, micro_batch=4, in_flight=2)
    assert (use.weights_bytes, use.gradients_bytes, use.optimizer_bytes) == (
        50_000, 50_000, 200_000)  # 25,000 parameters: float16, float16, 2 float32 values
    stash = 32 + 2 * (256 + 512) + 64
    assert (use.stash_bytes, use.recompute_bytes) == (2 * 4 * stash, 0)
    assert use.total_bytes == 300_000 + 8 * stash
    # recomputation: 6 layers in 3 runs of 2 ([embed, block0.attention], [block0.ffn,
    # block1.attention], [block1.ffn, loss]); each micro-batch keeps the input (16) and
    # the outputs of the first two runs (64 each); the largest run's stash is working memory
    recomputed = memory_use(w, micro_batch=4, in_flight=2, recompute=True)
    assert (recomputed.stash_bytes, recomputed.recompute_bytes) == (2 * 4 * (16 + 2 * 64),
                                                                     4 * (512 + 256))
    block = memory_use(w, w.layers[1:3], micro_batch=4, in_flight=2, recompute=True,
                       optimizer_offchip=True)
    assert stage_input_bytes(w, w.layers[1:3]) == 64  # the embedding's output
    assert (block.weights_bytes, block.optimizer_bytes) == (24_000, 0)
    # two layers, two runs: the input (64) and block0.attention's output (64) are kept
    assert (block.stash_bytes, block.recompute_bytes) == (2 * 4 * (64 + 64), 4 * 512)


def test_fits_compares_with_in_processor_memory():
    w = workload(EXAMPLES / "tiny.yaml")
    use = memory_use(w)
    assert fits(use, gc200())
    assert not fits(use, gc200(), reserve_bytes=gc200().in_processor_memory_bytes)
    assert fits(memory_use(workload("resnet50"), micro_batch=4), gc200())
    assert not fits(memory_use(workload("bert-large")), gc200())
    assert memory_use(workload("bert-large")).total_bytes > 4_000 * MB


@pytest.mark.parametrize("kwargs, words", [
    ({"micro_batch": 0}, ["micro_batch"]), ({"in_flight": 1.5}, ["in_flight"]),
    ({"layers": []}, ["at least one layer"]),
])
def test_bad_memory_arguments_are_user_errors(kwargs, words):
    with pytest.raises(UserError) as info:
        memory_use(workload(EXAMPLES / "tiny.yaml"), **kwargs)
    for word in words:
        assert word in str(info.value)


def test_a_stage_must_be_consecutive_layers_of_the_workload():
    w = workload(EXAMPLES / "tiny.yaml")
    for layers in ([w.layers[1], w.layers[3]], [w.layers[2], w.layers[1]],
                   workload("mlp").layers[:1]):
        with pytest.raises(UserError, match="consecutive"):
            memory_use(w, layers)
