"""A mixture-of-experts layer's routing, which expert parallelism splits over IPUs.

A layer with :class:`Experts` holds ``count`` feed-forward networks (its parameters are
all of them) and a router that sends each token to ``top_k`` of them (Shazeer et al. 2017;
Lepikhin et al. 2020, GShard; Fedus et al. 2021, Switch Transformers). With static shapes,
as on the IPU, each expert computes a buffer of ``capacity_factor`` times its even share
of the routed tokens, full or not: ``ceil(C k T / E)`` of ``T`` tokens. A factor over 1
leaves room for an uneven router (tokens beyond an expert's buffer are dropped); the
padding is computed all the same, which is what the layer's FLOPs count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from cluster.errors import SpecError

MAX_EXPERTS = 4096  # per layer


@dataclass(frozen=True)
class Experts:
    """``count`` experts per layer, ``top_k`` of them per token, each expert's buffer
    ``capacity_factor`` times its even share (from ``top_k / count``, dropping tokens
    below 1, to ``count / top_k``, every token fitting any one expert)."""

    count: int
    top_k: int
    capacity_factor: float

    def __post_init__(self) -> None:
        for field, value, high in (("count", self.count, MAX_EXPERTS),
                                   ("top_k", self.top_k, self.count)):
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= high:
                raise SpecError(f"experts.{field} must be a whole number from 1 to {high:,}, "
                                f"not {value!r}")
        low, high_factor = self.top_k / self.count, self.count / self.top_k
        factor = self.capacity_factor
        if (isinstance(factor, bool) or not isinstance(factor, (int, float))
                or not low <= factor <= high_factor):
            raise SpecError(f"experts.capacity_factor must be a number from {low:g} to "
                            f"{high_factor:g} for top-{self.top_k} of {self.count}, "
                            f"not {factor!r}")

    def capacity(self, tokens: int) -> int:
        """Tokens one expert's buffer holds when ``tokens`` tokens are routed."""
        return math.ceil(self.capacity_factor * self.top_k * tokens / self.count)

    def slots(self, tokens: int) -> int:
        """Token-expert pairs computed for ``tokens`` tokens, padding included."""
        return self.count * self.capacity(tokens)
