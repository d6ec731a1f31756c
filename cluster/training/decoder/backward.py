"""The decoder's backward pass as one rank of a tensor group runs it, in parts, as
:mod:`.forward`'s: each ends where a gradient is summed over a ``t1`` or ``t2`` group, the
next reads the sum. ``dx`` in the scratch is the gradient of the rank's hidden slice of
the residual stream where the pass has reached. Every parameter gradient is added to the
rank's (micro-batches accumulate).
"""

from __future__ import annotations

import numpy as np

from cluster.training.decoder.forward import qkv_weight, vocabulary_rows
from cluster.training.decoder.normed_products import gradient_partial, norm_backward, normed
from cluster.training.decoder.numerics import causal_attention_backward, gelu, gelu_backward
from cluster.training.decoder.rank_state import RankState


def loss(state: RankState) -> float:
    """The micro-batch's mean loss over its tokens; the gradient of this rank's logits,
    its share of the token table's gradient (as the head), and its partial gradient of
    the final norm's output, to sum. Returns the loss."""
    g, scratch = state.grads, state.scratch
    labels = scratch["labels"]
    sumexp = state.take("sumexp", labels.shape)
    target = state.take("target", labels.shape)
    d_logits = scratch.pop("exp") / sumexp[..., None]
    rows, held = vocabulary_rows(state, labels)
    np.put_along_axis(d_logits, rows[..., None],
                      np.take_along_axis(d_logits, rows[..., None], -1) - held[..., None], -1)
    d_logits /= d_logits.dtype.type(labels.size)
    g["tok"] += np.einsum("bsv,bsh->vh", d_logits, normed(state, "head", "lnf"))
    scratch["dhead"] = gradient_partial(state, "head", d_logits, state.params["tok"].T)
    return float((np.log(sumexp) - target).mean())


def headed_back(state: RankState) -> None:
    """The final norm's backward from its output's summed gradient: ``dx``."""
    state.scratch["dx"] = norm_backward(state, "head", "dhead", "lnf")


def ffn_back(state: RankState, layer: int) -> None:
    """Layer ``layer``'s second product's backward from ``dx``: its rows' gradients, and
    its partial gradient of the rank's columns of GELU's output, to sum."""
    p, g, scratch = state.params, state.grads, state.scratch
    dx = scratch["dx"]
    g[f"{layer}.proj.b"] += dx.sum(axis=(0, 1))
    g[f"{layer}.proj.w"] += np.einsum("bsf,bsh->fh", gelu(scratch[f"u{layer}"]), dx)
    scratch[f"dproj{layer}"] = dx @ p[f"{layer}.proj.w"].T


def ffn_columns_back(state: RankState, layer: int) -> None:
    """GELU's and the first product's backward from the summed gradient: its columns'
    gradients and the partial gradient of the second norm's output, to sum."""
    g, scratch = state.grads, state.scratch
    u = scratch.pop(f"u{layer}")
    d_u = gelu_backward(u, state.take(f"dproj{layer}", u.shape))
    g[f"{layer}.fc.w"] += np.einsum("bsh,bsf->hf", normed(state, f"fc{layer}", f"{layer}.ln2"),
                                    d_u)
    g[f"{layer}.fc.b"] += d_u.sum(axis=(0, 1))
    scratch[f"dffn{layer}"] = gradient_partial(state, f"fc{layer}", d_u,
                                               state.params[f"{layer}.fc.w"])


def ffn_backed(state: RankState, layer: int) -> None:
    """The second norm's backward, added to ``dx``: the gradient into the FFN's block."""
    state.scratch["dx"] = state.scratch["dx"] + norm_backward(
        state, f"fc{layer}", f"dffn{layer}", f"{layer}.ln2")


def attention_back(state: RankState, layer: int) -> None:
    """Layer ``layer``'s output projection's backward from ``dx``: its gradients, and the
    partial gradient of the rank's heads' context, to sum."""
    p, g, scratch = state.params, state.grads, state.scratch
    dx = scratch["dx"]
    g[f"{layer}.out.b"] += dx.sum(axis=(0, 1))
    g[f"{layer}.out.w"] += np.einsum("bsad,bsh->adh", scratch.pop(f"c{layer}"), dx)
    scratch[f"dout{layer}"] = np.einsum("bsh,adh->bsad", dx, p[f"{layer}.out.w"])


def attention_heads_back(state: RankState, layer: int) -> None:
    """The heads' attention and their queries', keys' and values' backward from the
    summed context gradient: their gradients and the partial gradient of the first
    norm's output, to sum."""
    g, scratch = state.grads, state.scratch
    qkv = scratch.pop(f"q{layer}")
    d_context = state.take(f"dout{layer}", (*qkv.shape[:2], *qkv.shape[3:]))
    d_qkv = causal_attention_backward(qkv, scratch.pop(f"p{layer}"), d_context)
    g[f"{layer}.qkv.w"] += np.einsum(
        "bsh,bscad->hcad", normed(state, f"qkv{layer}", f"{layer}.ln1"), d_qkv)
    g[f"{layer}.qkv.b"] += d_qkv.sum(axis=(0, 1))
    scratch[f"dattn{layer}"] = gradient_partial(
        state, f"qkv{layer}", d_qkv.reshape(*d_qkv.shape[:2], -1), qkv_weight(state, layer))


def attention_backed(state: RankState, layer: int) -> None:
    """The first norm's backward, added to ``dx``: the gradient into layer ``layer``."""
    state.scratch["dx"] = state.scratch["dx"] + norm_backward(
        state, f"qkv{layer}", f"dattn{layer}", f"{layer}.ln1")


def embed_back(state: RankState) -> None:
    """The positions' gradient and this rank's rows of the token table's, from ``dx``;
    the scratch emptied for the next micro-batch."""
    g, scratch = state.grads, state.scratch
    dx, tokens = scratch["dx"], scratch["tokens"]
    g["pos"][:tokens.shape[1]] += dx.sum(axis=0)
    rows, held = vocabulary_rows(state, tokens)
    np.add.at(g["tok"], rows[held], dx[held])
    scratch.clear()
