"""The decoder's forward pass as one rank ``(i, j)`` of a ``T1 x T2`` tensor group runs
it, in parts (1-D: ``T2 = 1``).

Each part ends where the rank needs a sum over its ``t1`` or ``t2`` group (:mod:`.program`
says which all-reduce follows it) and the next begins by reading that sum. A part reads
and writes the rank's scratch (:class:`~.rank_state.RankState`): ``x{l}`` is the rank's
hidden slice of the residual stream into layer ``l``'s attention (``x{L}``: into the
head), ``y{l}`` into its FFN. Each norm and the product after it are
:mod:`.normed_products`'. With one rank the sums are the partials themselves, and this
is the whole decoder.
"""

from __future__ import annotations

import numpy as np

from cluster.training.decoder.normed_products import product, product_partial
from cluster.training.decoder.numerics import causal_attention, gelu
from cluster.training.decoder.rank_state import RankState


def vocabulary_rows(state: RankState, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``ids`` as rows of this rank's share of the vocabulary, and which of them it holds."""
    rows = state.params["tok"].shape[0]
    local = ids - state.split.i * rows
    held = (local >= 0) & (local < rows)
    return np.where(held, local, 0), held


def qkv_weight(state: RankState, layer: int) -> np.ndarray:
    """The rank's queries', keys' and values' weights as one ``(H_j, columns)`` matrix."""
    weight = state.params[f"{layer}.qkv.w"]
    return weight.reshape(weight.shape[0], -1)


def embed(state: RankState, tokens: np.ndarray, labels: np.ndarray) -> None:
    """Keep the micro-batch; look up the tokens this rank's rows hold (zero for the
    others): the lookups to sum."""
    state.scratch["tokens"], state.scratch["labels"] = tokens, labels
    rows, held = vocabulary_rows(state, tokens)
    state.scratch["emb"] = state.params["tok"][rows] * held[..., None]


def embedded(state: RankState) -> None:
    """The summed lookups plus the positions: the stream into layer 0."""
    tokens, positions = state.scratch["tokens"], state.params["pos"]
    looked_up = state.take("emb", (*tokens.shape, positions.shape[1]))
    state.scratch["x0"] = looked_up + positions[:tokens.shape[1]]


def attention(state: RankState, layer: int) -> None:
    """Layer ``layer``'s first norm and queries, keys and values: partial sums."""
    state.scratch[f"qkv{layer}"] = product_partial(
        state, state.scratch[f"x{layer}"], f"{layer}.ln1", qkv_weight(state, layer))


def attention_heads(state: RankState, layer: int) -> None:
    """The rank's heads' causal attention and their share of the output projection:
    the output to sum."""
    p, scratch = state.params, state.scratch
    bias = p[f"{layer}.qkv.b"]
    z = product(state, f"qkv{layer}", scratch[f"x{layer}"], f"{layer}.ln1", bias.size)
    qkv = (z + bias.ravel()).reshape(*z.shape[:2], *bias.shape)
    context, probabilities = causal_attention(qkv)
    scratch[f"q{layer}"], scratch[f"p{layer}"], scratch[f"c{layer}"] = (
        qkv, probabilities, context)
    scratch[f"attn{layer}"] = np.einsum("bsad,adh->bsh", context, p[f"{layer}.out.w"])


def attended(state: RankState, layer: int) -> None:
    """The residual stream plus the summed attention output and its bias: into the FFN."""
    x = state.scratch[f"x{layer}"]
    state.scratch[f"y{layer}"] = (x + state.take(f"attn{layer}", x.shape)
                                  + state.params[f"{layer}.out.b"])


def ffn(state: RankState, layer: int) -> None:
    """Layer ``layer``'s second norm and the FFN's first product: partial sums."""
    state.scratch[f"fc{layer}"] = product_partial(
        state, state.scratch[f"y{layer}"], f"{layer}.ln2", state.params[f"{layer}.fc.w"])


def ffn_columns(state: RankState, layer: int) -> None:
    """The rank's columns of the first product, GELU, and its rows of the second
    product: the output to sum."""
    p, scratch = state.params, state.scratch
    bias = p[f"{layer}.fc.b"]
    u = product(state, f"fc{layer}", scratch[f"y{layer}"], f"{layer}.ln2", bias.size) + bias
    scratch[f"u{layer}"] = u
    scratch[f"ffn{layer}"] = gelu(u) @ p[f"{layer}.proj.w"]


def fed_forward(state: RankState, layer: int) -> None:
    """The stream plus the summed FFN output and its bias: into the next layer."""
    y = state.scratch[f"y{layer}"]
    state.scratch[f"x{layer + 1}"] = (y + state.take(f"ffn{layer}", y.shape)
                                      + state.params[f"{layer}.proj.b"])


def head(state: RankState) -> None:
    """The final norm and this rank's vocabulary's logits (the head tied to the token
    table): partial sums."""
    state.scratch["head"] = product_partial(
        state, state.scratch[f"x{state.config.layers}"], "lnf", state.params["tok"].T)


def logits(state: RankState) -> None:
    """This rank's vocabulary's logits; each token's largest, to take the largest over
    the ``t1`` group."""
    x = state.scratch[f"x{state.config.layers}"]
    found = product(state, "head", x, "lnf", state.params["tok"].shape[0])
    state.scratch["logits"] = found
    state.scratch["max"] = found.max(axis=-1)


def loss_partials(state: RankState) -> None:
    """Against the group's largest logit: this rank's sum of exponentials per token, and
    its target's logit where it holds the target (0 elsewhere), to sum."""
    scratch = state.scratch
    labels = scratch["labels"]
    shifted = scratch.pop("logits") - state.take("max", labels.shape)[..., None]
    rows, held = vocabulary_rows(state, labels)
    scratch["exp"] = exp = np.exp(shifted)
    scratch["sumexp"] = exp.sum(axis=-1)
    scratch["target"] = np.take_along_axis(shifted, rows[..., None], -1)[..., 0] * held
