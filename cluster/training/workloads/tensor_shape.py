"""What tensor parallelism needs to know of a layer: its role in a transformer and the
shape of the activation its collectives carry.

A layer with a :class:`TensorShape` can be split over a tensor-parallel group
(:mod:`cluster.training.tensor_parallel`): an ``attention`` or ``ffn`` half of a
transformer block (Megatron: heads, and the FFN's columns then rows, over the group), the
vocabulary-parallel ``embedding``, ``head`` and ``loss``, and a mixture-of-experts
layer's ``experts`` (each expert's FFN split as the dense FFN is, with expert
parallelism's all-to-alls beside: :mod:`cluster.training.tensor_parallel.expert_split`).
``hidden`` is the hidden size
``h`` and ``tokens`` the tokens per sample the layer's activation has (the sequence, or
BERT's masked positions for its heads): an all-reduce of that activation moves
``tokens x hidden`` values per sample. ``heads``: the attention's query heads (0 for the
other roles), which a tensor-parallel group must divide. ``inner``: the width of what a
layer's first products make per token, which 2-D tensor parallelism sums over the IPUs
splitting the hidden dimension: attention's queries, keys and values ``h + 2 g d``, the
FFN's first products ``f`` (``2 f`` gated), the head's logits ``V`` (0 for the embedding
and the loss).
"""

from __future__ import annotations

from dataclasses import dataclass

from cluster.errors import SpecError
from cluster.model.text_enum import TextEnum


class TensorRole(TextEnum):
    """Where a layer sits in a transformer, which says how tensor parallelism splits it
    and which collectives it then runs."""

    EMBEDDING = "embedding"
    ATTENTION = "attention"
    FFN = "ffn"
    HEAD = "head"
    LOSS = "loss"
    EXPERTS = "experts"  # a mixture-of-experts layer (it has experts; no other role does)


INNER_ROLES = frozenset({TensorRole.ATTENTION, TensorRole.FFN, TensorRole.HEAD})
"""The roles whose first products have an ``inner`` width."""


@dataclass(frozen=True)
class TensorShape:
    """A layer's ``role``, ``hidden`` size, ``tokens`` per sample, attention ``heads``
    (0 unless ``role`` is attention) and ``inner`` width (0 for the embedding and the
    loss)."""

    role: TensorRole
    hidden: int
    tokens: int
    heads: int = 0
    inner: int = 0

    def __post_init__(self) -> None:
        for name in ("hidden", "tokens", "heads", "inner"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise SpecError(f"a layer's tensor {name} must be a whole number of 0 or "
                                f"more, not {value!r}")
        if self.hidden < 1 or self.tokens < 1:
            raise SpecError("a layer's tensor hidden and tokens must be 1 or more")
        if (self.role is TensorRole.ATTENTION) != (self.heads > 0):
            raise SpecError("a layer's tensor heads are 1 or more for an attention layer, "
                            "and 0 for any other")
        if (self.role in INNER_ROLES) != (self.inner > 0):
            raise SpecError("a layer's tensor inner width is 1 or more for attention, ffn "
                            "and head, and 0 for any other role")

    @property
    def activation_values(self) -> int:
        """Values per sample of the activation an all-reduce of this layer carries:
        ``tokens x hidden``."""
        return self.tokens * self.hidden
