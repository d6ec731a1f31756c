"""The built-in large language models: GPT-3 (Table 2.1), GPT-J 6B, Llama 2 and a
Mixtral-shaped mixture of experts have the published parameter counts, the standard
FLOPs, the layers their architectures say, and price (or are refused) in phantom mode."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from cluster.errors import SpecError
from cluster.training.workloads import (
    Experts,
    Layer,
    LayerKind,
    Workload,
    load_workload,
    parse_workload,
    to_yaml,
    workload,
)
from cluster.training.workloads.gpt3 import CONFIGS

# Brown et al. 2020, Table 2.1: n_params as published, and half a unit of its last digit
GPT3_PUBLISHED = {"gpt3-125m": (125e6, 0.5e6), "gpt3-1.3b": (1.3e9, 0.05e9),
                  "gpt3-2.7b": (2.7e9, 0.05e9), "gpt3-6.7b": (6.7e9, 0.05e9),
                  "gpt3-13b": (13e9, 0.5e9), "gpt3-175b": (175e9, 0.5e9)}


@pytest.mark.parametrize("name", sorted(GPT3_PUBLISHED))
def test_gpt3_parameters_round_to_table_2_1s(name):
    published, half_unit = GPT3_PUBLISHED[name]
    assert abs(workload(name).parameter_count - published) <= half_unit


def test_gpt3_350m_is_gpt2_medium_with_2048_positions_and_125m_is_gpt2():
    """The paper's "350M" is 1.7% under the count of its shape; the same shapes with
    GPT-2's 1024 positions are Hugging Face's gpt2-medium and gpt2, to the parameter."""
    assert workload("gpt3-350m").parameter_count - 1024 * 1024 == 354_823_168
    assert workload("gpt3-125m").parameter_count - 1024 * 768 == 124_439_808
    assert workload("gpt3-350m").parameter_count == pytest.approx(350e6, rel=0.02)


# Table 2.1's n_layers, d_model, n_heads, d_head; XL with 16 heads, 13B with d_model 5120
TABLE_2_1 = {"gpt3-125m": (12, 768, 12, 64), "gpt3-350m": (24, 1024, 16, 64),
             "gpt3-1.3b": (24, 2048, 16, 128), "gpt3-2.7b": (32, 2560, 32, 80),
             "gpt3-6.7b": (32, 4096, 32, 128), "gpt3-13b": (40, 5120, 40, 128),
             "gpt3-175b": (96, 12288, 96, 128)}


def test_gpt3_shapes_are_table_2_1s():
    assert [config.name for config in CONFIGS] == list(TABLE_2_1)
    for config in CONFIGS:
        layers, hidden, heads, d_head = TABLE_2_1[config.name]
        assert (config.layers, config.block.hidden, config.block.heads,
                config.block.head_size, config.context) == (layers, hidden, heads, d_head, 2048)
        w = workload(config.name)
        assert len(w.layers) == 2 * layers + 3
        assert w.layers[0].output_bytes == 2 * 2048 * hidden  # float16, 2048 tokens


def test_gpt3_175b_forward_flops_are_2_n_s_plus_attention_within_0_1_percent():
    w = workload("gpt3-175b")
    s, layers, hidden = 2048, 96, 12288
    standard = 2 * w.parameter_count * s + 4 * layers * s * s * hidden
    assert w.forward_flops == pytest.approx(standard, rel=1e-3)
    assert w.weight_dtype.itemsize * w.parameter_count == pytest.approx(349e9, rel=0.001)


def test_gpt_j_has_hugging_faces_count_and_the_model_cards_less_shard_copies():
    w = workload("gpt-j-6b")
    assert w.parameter_count == 6_050_882_784  # GPTJForCausalLM
    h = 4096
    shard_copies = 7 * (29 * 2 * h + 28 * h) + 8 * h
    assert w.parameter_count + shard_copies == 6_053_381_344  # the model card's figure


def test_gpt_j_blocks_are_parallel_with_one_norm_and_an_untied_head_with_bias():
    w = workload("gpt-j-6b", sequence_length=16)
    attention, mlp, head = w.layers[1], w.layers[2], w.layers[-2]
    h, f, vocabulary = 4096, 16384, 50_400
    assert attention.parameters == 4 * h * h + 2 * h  # no biases, the block's layer norm
    assert mlp.parameters == 2 * h * f + f + h  # no norm of its own
    assert attention.output_bytes == 2 * 2 * 16 * h  # the residual sum and the normed input
    assert mlp.stashed_bytes == 2 * 2 * 16 * f  # GELU's and the last product's inputs only
    assert head.parameters == 2 * h + h * vocabulary + vocabulary
    assert w.layers[0].parameters == vocabulary * h  # no position table: rotary


@pytest.mark.parametrize("name, published", [
    ("llama-7b", 6_738_415_616), ("llama-70b", 68_976_648_192)])  # Hugging Face's Llama 2
def test_llama_2_has_hugging_faces_counts(name, published):
    assert workload(name).parameter_count == published


def test_llama_70b_attention_shares_8_key_value_heads_and_its_ffn_is_swiglu():
    w = workload("llama-70b", sequence_length=8)
    attention, mlp = w.layers[1], w.layers[2]
    h, kv, f, s = 8192, 8 * 128, 28_672, 8
    assert attention.parameters == 2 * h * h + 2 * h * kv + h  # Q, O; K, V; RMSNorm
    assert mlp.parameters == 3 * h * f + h
    assert attention.forward_flops > 2 * s * (2 * h * h + 2 * h * kv) + 4 * s * s * h
    assert mlp.forward_flops > 6 * s * h * f
    # no dropout: norm, projections' and output's inputs, Q, K, V, the softmax output
    assert attention.stashed_bytes == 2 * s * (4 * h + 2 * kv) + 2 * 64 * s * s
    assert mlp.stashed_bytes == 2 * (2 * s * h + 3 * s * f)
    assert workload("llama-7b").layers[1].parameters == 4 * 4096 * 4096 + 4096


def test_moe_8x7b_has_mixtrals_count_and_its_layers_carry_the_routing():
    w = workload("moe-8x7b")
    assert w.parameter_count == 46_702_792_704  # Hugging Face's Mixtral-8x7B-v0.1
    moes = [layer for layer in w.layers if layer.name.endswith(".moe")]
    assert len(moes) == 32 and {layer.experts for layer in moes} == {Experts(8, 2, 1.25)}
    assert all(layer.experts is None for layer in w.layers if layer not in moes)
    unused = 6 * 32 * 3 * 4096 * 14_336  # 6 of 8 experts idle for a token
    assert w.parameter_count - unused == pytest.approx(12.9e9, rel=0.005)


def test_the_capacity_factor_pads_every_experts_buffer_by_hand():
    s, h, f = 64, 4096, 14_336
    even, padded = (workload("moe-8x7b", sequence_length=s, capacity_factor=c).layers[2]
                    for c in (1.0, "1.5"))
    per_token = 6 * h * f + (8 + 1) * f  # SwiGLU products, SiLU and gate per element
    assert Experts(8, 2, 1.5).slots(s) == 8 * math.ceil(1.5 * 2 * s / 8) == 192
    assert padded.forward_flops - even.forward_flops == (192 - 128) * per_token
    assert padded.parameters == even.parameters


@pytest.mark.parametrize("options, words", [
    ({"capacity_factor": 5}, ["capacity_factor", "0.25 to 4"]),
    ({"capacity_factor": "lots"}, ["capacity_factor", "1.25"]),
    ({"sequence_length": 40_000}, ["sequence_length", "32,768"]),
])
def test_bad_moe_options_are_spec_errors(options, words):
    with pytest.raises(SpecError) as info:
        workload("moe-8x7b", **options)
    assert all(word in str(info.value) for word in words), str(info.value)


def test_a_layer_with_experts_is_a_version_3_file_that_reads_back_equal():
    moe = Layer("moe", LayerKind.DENSE, 10, 20, 4, 8, experts=Experts(4, 1, 1.0))
    plain = Layer("dense", LayerKind.DENSE, 10, 20, 4, 8)
    text = to_yaml(Workload("w", (plain, moe), 4))
    assert text.startswith("version: 3\n")
    assert "experts: {count: 4, top_k: 1, capacity_factor: 1.0}" in text
    assert parse_workload(text).layers[1].experts == Experts(4, 1, 1.0)


@pytest.mark.parametrize("text, words", [
    ("version: 2", ["layers[0].experts", "version: 3"]),
    ("version: 3", ["layers[0].experts.top_k", "from 1 to 4"]),
])
def test_experts_in_a_file_are_checked_naming_the_field(text, words):
    top_k = 5 if text.endswith("3") else 2
    data = (f"{text}\nname: w\ninput_bytes: 4\nlayers:\n- {{name: m, kind: dense, "
            f"parameters: 1, forward_flops: 1, output_bytes: 1, stashed_bytes: 1, experts: "
            f"{{count: 4, top_k: {top_k}, capacity_factor: 1.0}}}}\n")
    with pytest.raises(SpecError) as info:
        parse_workload(data, "w.yaml")
    assert all(word in str(info.value) for word in words), str(info.value)


def test_a_capacity_factor_outside_its_range_in_a_file_says_the_range():
    data = ("version: 3\nname: w\ninput_bytes: 4\nlayers:\n- {name: m, kind: dense, "
            "parameters: 1, forward_flops: 1, output_bytes: 1, stashed_bytes: 1, experts: "
            "{count: 8, top_k: 2, capacity_factor: 9}}\n")
    with pytest.raises(SpecError, match=r"capacity_factor: expected a number from 0.25 to 4"):
        parse_workload(data, "w.yaml")


def test_a_small_gpt3_prices_in_phantom_mode(ipupod_main):
    result = ipupod_main("train", "--model", "gpt3-125m", "--topology", "pod16", "--steps", "1")
    assert result.returncode == 0, result.stderr
    assert "simulated" in result.stdout


@pytest.mark.parametrize("model, topology", [("gpt3-2.7b", "pod64"), ("gpt3-175b", "pod256")])
def test_a_model_pipelining_cannot_fit_is_refused_in_one_line(ipupod_main, model, topology):
    result = ipupod_main("train", "--model", model, "--topology", topology, "--steps", "1")
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.startswith(f"error: {model}: ") and result.stderr.count("\n") == 1
    assert "In-Processor-Memory" in result.stderr and "Traceback" not in result.stderr


def test_the_exported_moe_example_is_the_built_in():
    examples = Path(__file__).resolve().parent.parent / "examples" / "workloads"
    assert load_workload(examples / "moe-8x7b.yaml") == workload("moe-8x7b")
