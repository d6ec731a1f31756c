"""The decoder's pieces without parameters, with their exact backward passes, in the
dtype they are given (float32 in training, float64 for gradient checks): GELU and causal
attention (the layer norm: :mod:`.normed_products`). Arrays are ``(batch, tokens, ...)``.
"""

from __future__ import annotations

import numpy as np

NORM_EPSILON = 1e-5  # added to the variance, as GPT-2's and Megatron's layer norms
GELU_CUBIC = 0.044715  # GELU's tanh form (Hendrycks and Gimpel 2016; GPT-2's)


def _gelu_tanh(u: np.ndarray) -> np.ndarray:
    scale = u.dtype.type(np.sqrt(2 / np.pi))
    return np.tanh(scale * (u + u.dtype.type(GELU_CUBIC) * u ** 3))


def gelu(u: np.ndarray) -> np.ndarray:
    """GELU in its tanh form: ``u/2 (1 + tanh(sqrt(2/pi) (u + 0.044715 u^3)))``."""
    return u * (1 + _gelu_tanh(u)) / 2


def gelu_backward(u: np.ndarray, dy: np.ndarray) -> np.ndarray:
    """The gradient of :func:`gelu`'s input ``u`` from its output's ``dy``."""
    t = _gelu_tanh(u)
    scale = u.dtype.type(np.sqrt(2 / np.pi))
    slope = scale * (1 + u.dtype.type(3 * GELU_CUBIC) * u * u)
    return dy * ((1 + t) / 2 + u * (1 - t * t) * slope / 2)


def causal_attention(qkv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Causal self-attention of ``qkv`` ``(batch, tokens, 3, heads, head size)``: each
    token's context ``(batch, tokens, heads, head size)`` and the probabilities
    ``(batch, heads, tokens, tokens)`` (softmax of the scaled scores, later tokens masked)."""
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    tokens, size = q.shape[2], q.shape[3]
    scores = q @ k.transpose(0, 1, 3, 2) / q.dtype.type(np.sqrt(size))
    scores = np.where(np.tri(tokens, dtype=bool), scores, -np.inf)
    scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
    probabilities = scores / scores.sum(axis=-1, keepdims=True)
    return (probabilities @ v).transpose(0, 2, 1, 3), probabilities


def causal_attention_backward(qkv: np.ndarray, probabilities: np.ndarray,
                              d_context: np.ndarray) -> np.ndarray:
    """The gradient of :func:`causal_attention`'s ``qkv`` from its context's."""
    q, k, v = (qkv[:, :, i].transpose(0, 2, 1, 3) for i in range(3))
    scale = q.dtype.type(1 / np.sqrt(q.shape[3]))
    d_out = d_context.transpose(0, 2, 1, 3)
    d_v = probabilities.transpose(0, 1, 3, 2) @ d_out
    d_p = d_out @ v.transpose(0, 1, 3, 2)
    d_scores = probabilities * (d_p - (d_p * probabilities).sum(axis=-1, keepdims=True))
    d_q = d_scores @ k * scale
    d_k = d_scores.transpose(0, 1, 3, 2) @ q * scale
    return np.stack([d.transpose(0, 2, 1, 3) for d in (d_q, d_k, d_v)], axis=2)
