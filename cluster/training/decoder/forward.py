"""The decoder's forward pass as one rank of a 1-D tensor group runs it, in parts.

Each part ends where the rank needs a sum over its group (:mod:`.program` says which
all-reduce follows it) and the next begins by reading that sum. A part reads and writes
the rank's scratch (:class:`~.rank_state.RankState`): ``x{l}`` is the residual stream
into layer ``l``'s attention (``x{L}``: into the head), ``y{l}`` into its FFN. With one
rank the sums are the partials themselves, and this is the whole decoder.
"""

from __future__ import annotations

import numpy as np

from cluster.training.decoder.numerics import causal_attention, gelu, layer_norm
from cluster.training.decoder.rank_state import RankState


def _hidden(state: RankState, tokens: np.ndarray) -> tuple[int, int, int]:
    """(batch, tokens, hidden) of the residual stream."""
    return (*tokens.shape, state.config.block.hidden)


def vocabulary_rows(state: RankState, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``ids`` as rows of this rank's share of the vocabulary, and which of them it holds."""
    rows = state.params["tok"].shape[0]
    local = ids - state.split.i * rows
    held = (local >= 0) & (local < rows)
    return np.where(held, local, 0), held


def embed(state: RankState, tokens: np.ndarray, labels: np.ndarray) -> None:
    """Keep the micro-batch; look up the tokens this rank's rows hold (zero for the
    others): the lookups to sum."""
    state.scratch["tokens"], state.scratch["labels"] = tokens, labels
    rows, held = vocabulary_rows(state, tokens)
    state.scratch["emb"] = state.params["tok"][rows] * held[..., None]


def embedded(state: RankState) -> None:
    """The summed lookups plus the positions: the stream into layer 0."""
    tokens = state.scratch["tokens"]
    looked_up = state.take("emb", _hidden(state, tokens))
    state.scratch["x0"] = looked_up + state.params["pos"][:tokens.shape[1]]


def attention(state: RankState, layer: int) -> None:
    """Layer ``layer``'s norm, its heads' queries, keys and values, their causal
    attention, and their share of the output projection: the output to sum."""
    p, scratch = state.params, state.scratch
    a, cache = layer_norm(scratch[f"x{layer}"], p[f"{layer}.ln1.g"], p[f"{layer}.ln1.b"])
    qkv = np.einsum("bsh,hcad->bscad", a, p[f"{layer}.qkv.w"]) + p[f"{layer}.qkv.b"]
    context, probabilities = causal_attention(qkv)
    state.stash_norm(f"ln1.{layer}", cache)
    scratch[f"a{layer}"], scratch[f"qkv{layer}"] = a, qkv
    scratch[f"p{layer}"], scratch[f"ctx{layer}"] = probabilities, context
    scratch[f"attn{layer}"] = np.einsum("bsad,adh->bsh", context, p[f"{layer}.out.w"])


def attended(state: RankState, layer: int) -> None:
    """The residual stream plus the summed attention output and its bias: into the FFN."""
    x = state.scratch[f"x{layer}"]
    state.scratch[f"y{layer}"] = (x + state.take(f"attn{layer}", x.shape)
                                  + state.params[f"{layer}.out.b"])


def ffn(state: RankState, layer: int) -> None:
    """Layer ``layer``'s second norm, its columns of the first product and GELU, and its
    rows of the second product: the output to sum."""
    p, scratch = state.params, state.scratch
    m, cache = layer_norm(scratch[f"y{layer}"], p[f"{layer}.ln2.g"], p[f"{layer}.ln2.b"])
    u = m @ p[f"{layer}.fc.w"] + p[f"{layer}.fc.b"]
    state.stash_norm(f"ln2.{layer}", cache)
    scratch[f"m{layer}"], scratch[f"u{layer}"] = m, u
    scratch[f"ffn{layer}"] = gelu(u) @ p[f"{layer}.proj.w"]


def fed_forward(state: RankState, layer: int) -> None:
    """The stream plus the summed FFN output and its bias: into the next layer."""
    y = state.scratch[f"y{layer}"]
    state.scratch[f"x{layer + 1}"] = (y + state.take(f"ffn{layer}", y.shape)
                                      + state.params[f"{layer}.proj.b"])


def head(state: RankState) -> None:
    """The final norm and this rank's vocabulary's logits (the head tied to the token
    table); each token's largest of them, to take the largest over the group."""
    p, scratch = state.params, state.scratch
    f, cache = layer_norm(scratch[f"x{state.config.layers}"], p["lnf.g"], p["lnf.b"])
    state.stash_norm("lnf", cache)
    scratch["f"] = f
    scratch["logits"] = logits = f @ p["tok"].T
    scratch["max"] = logits.max(axis=-1)


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
