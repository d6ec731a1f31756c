"""The decoder's backward pass as one rank of a 1-D tensor group runs it, in parts, as
:mod:`.forward`'s: each ends where a gradient is summed over the group, the next reads
the sum. ``dx`` in the scratch is the gradient of the residual stream where the pass has
reached. Every parameter gradient is added to the rank's (micro-batches accumulate).
"""

from __future__ import annotations

import numpy as np

from cluster.training.decoder.forward import vocabulary_rows
from cluster.training.decoder.numerics import (
    causal_attention_backward,
    gelu,
    gelu_backward,
    layer_norm_backward,
)
from cluster.training.decoder.rank_state import RankState


def loss(state: RankState) -> float:
    """The micro-batch's mean loss over its tokens; the gradient of this rank's logits,
    its share of the token table's gradient (as the head), and its partial gradient of
    the final norm's output, to sum. Returns the loss."""
    p, g, scratch = state.params, state.grads, state.scratch
    labels = scratch["labels"]
    sumexp = state.take("sumexp", labels.shape)
    target = state.take("target", labels.shape)
    count = labels.size
    d_logits = scratch.pop("exp") / sumexp[..., None]
    rows, held = vocabulary_rows(state, labels)
    np.put_along_axis(d_logits, rows[..., None],
                      np.take_along_axis(d_logits, rows[..., None], -1) - held[..., None], -1)
    d_logits /= d_logits.dtype.type(count)
    g["tok"] += np.einsum("bsv,bsh->vh", d_logits, scratch.pop("f"))
    scratch["dhead"] = d_logits @ p["tok"]
    return float((np.log(sumexp) - target).mean())


def headed_back(state: RankState) -> None:
    """The final norm's backward from its output's summed gradient: ``dx``."""
    g = state.grads
    x = state.scratch[f"x{state.config.layers}"]
    d_f = state.take("dhead", x.shape)
    state.scratch["dx"] = layer_norm_backward(d_f, state.params["lnf.g"], state.norm("lnf"),
                                              g["lnf.g"], g["lnf.b"])


def ffn_back(state: RankState, layer: int) -> None:
    """Layer ``layer``'s FFN backward from ``dx``: its rows' and columns' gradients, and
    its partial gradient of the second norm's output, to sum."""
    p, g, scratch = state.params, state.grads, state.scratch
    dx, u, m = scratch["dx"], scratch.pop(f"u{layer}"), scratch.pop(f"m{layer}")
    g[f"{layer}.proj.b"] += dx.sum(axis=(0, 1))
    g[f"{layer}.proj.w"] += np.einsum("bsf,bsh->fh", gelu(u), dx)
    d_u = gelu_backward(u, dx @ p[f"{layer}.proj.w"].T)
    g[f"{layer}.fc.w"] += np.einsum("bsh,bsf->hf", m, d_u)
    g[f"{layer}.fc.b"] += d_u.sum(axis=(0, 1))
    scratch[f"dffn{layer}"] = d_u @ p[f"{layer}.fc.w"].T


def ffn_backed(state: RankState, layer: int) -> None:
    """The second norm's backward from its output's summed gradient, added to ``dx``:
    the gradient into the FFN's block."""
    g, scratch = state.grads, state.scratch
    d_m = state.take(f"dffn{layer}", scratch["dx"].shape)
    scratch["dx"] = scratch["dx"] + layer_norm_backward(
        d_m, state.params[f"{layer}.ln2.g"], state.norm(f"ln2.{layer}"),
        g[f"{layer}.ln2.g"], g[f"{layer}.ln2.b"])


def attention_back(state: RankState, layer: int) -> None:
    """Layer ``layer``'s attention backward from ``dx``: its heads' gradients and its
    partial gradient of the first norm's output, to sum."""
    p, g, scratch = state.params, state.grads, state.scratch
    dx, context = scratch["dx"], scratch.pop(f"ctx{layer}")
    g[f"{layer}.out.b"] += dx.sum(axis=(0, 1))
    g[f"{layer}.out.w"] += np.einsum("bsad,bsh->adh", context, dx)
    d_context = np.einsum("bsh,adh->bsad", dx, p[f"{layer}.out.w"])
    d_qkv = causal_attention_backward(scratch.pop(f"qkv{layer}"), scratch.pop(f"p{layer}"),
                                      d_context)
    g[f"{layer}.qkv.w"] += np.einsum("bsh,bscad->hcad", scratch.pop(f"a{layer}"), d_qkv)
    g[f"{layer}.qkv.b"] += d_qkv.sum(axis=(0, 1))
    scratch[f"dattn{layer}"] = np.einsum("bscad,hcad->bsh", d_qkv, p[f"{layer}.qkv.w"])


def attention_backed(state: RankState, layer: int) -> None:
    """The first norm's backward from its output's summed gradient, added to ``dx``:
    the gradient into layer ``layer``."""
    g, scratch = state.grads, state.scratch
    d_a = state.take(f"dattn{layer}", scratch["dx"].shape)
    scratch["dx"] = scratch["dx"] + layer_norm_backward(
        d_a, state.params[f"{layer}.ln1.g"], state.norm(f"ln1.{layer}"),
        g[f"{layer}.ln1.g"], g[f"{layer}.ln1.b"])


def embed_back(state: RankState) -> None:
    """The positions' gradient and this rank's rows of the token table's, from ``dx``;
    the scratch emptied for the next micro-batch."""
    g, scratch = state.grads, state.scratch
    dx, tokens = scratch["dx"], scratch["tokens"]
    g["pos"][:tokens.shape[1]] += dx.sum(axis=0)
    rows, held = vocabulary_rows(state, tokens)
    np.add.at(g["tok"], rows[held], dx[held])
    scratch.clear()
