"""A replica's tensor-parallel layout: ``--tensor-parallel T`` (1-D) or ``T1xT2`` (2-D).

:func:`parse_tensor_parallel` reads the option's text once, at the edge; everything
below takes the :class:`TensorParallel` it gives. 1-D is Megatron's (Shoeybi et al. 2019):
each transformer layer's heads, and its FFN's columns then rows, split over ``T`` IPUs.
2-D is Graphcore's GPT-3 (PopXL): ``T1`` splits the heads and the FFN as 1-D does,
``T2`` the hidden dimension of the weights and activations. A replica's tensor group is
``T1 x T2`` consecutive IPUs of one server or rack, up to a POD64 rack's 64 along its
IPU-Link ladder: ``T1`` innermost (the IPUs of one ``t1`` group follow one another along
the IPU-Links, within an IPU-M2000 or adjacent ones), ``T2`` across them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cluster.errors import SettingError

GROUP_SIZES = (1, 2, 4, 8, 16, 32, 64)  # IPUs of a tensor group: an aligned block of a rack
_LAYOUT = re.compile(r"([0-9]{1,6})(?:\s*x\s*([0-9]{1,6}))?")  # T or T1xT2


@dataclass(frozen=True)
class TensorParallel:
    """``t1`` IPUs splitting each layer's heads and FFN, times ``t2`` splitting its hidden
    dimension (1: 1-D); ``TensorParallel()`` is off."""

    t1: int = 1
    t2: int = 1

    @property
    def size(self) -> int:
        """IPUs of one tensor group: ``t1 x t2``."""
        return self.t1 * self.t2

    @property
    def on(self) -> bool:
        """Whether layers are split at all (a group of 2 IPUs or more)."""
        return self.size > 1

    @property
    def two_d(self) -> bool:
        """Whether it is 2-D (given as ``T1xT2``, ``T2`` above 1)."""
        return self.t2 > 1

    def __str__(self) -> str:
        """As ``--tensor-parallel`` takes it: ``4`` or ``4x4``."""
        return f"{self.t1}x{self.t2}" if self.two_d else str(self.t1)


def parse_tensor_parallel(text: str | None) -> TensorParallel:
    """``--tensor-parallel``'s text (``4``, ``4x4``; None: off) as a :class:`TensorParallel`,
    or a SettingError saying what it takes."""
    if text is None:
        return TensorParallel()
    found = _LAYOUT.fullmatch(text.strip().lower())
    if found is None:
        raise SettingError("tensor_parallel", "{tensor_parallel} takes T (1-D, e.g. 4) or "
                           "T1xT2 (2-D, e.g. 4x4), not {given!r}", given=text[:40])
    t1, t2 = int(found[1]), int(found[2] or 1)
    layout = TensorParallel(t1, t2)
    if min(t1, t2) < 1 or layout.size not in GROUP_SIZES:
        raise SettingError("tensor_parallel", "{tensor_parallel} {given}: a tensor group is "
                           "a power-of-two block of {choices} IPUs of one server or rack, "
                           "each of its sides at least 1", given=text[:40],
                           choices=", ".join(map(str, GROUP_SIZES)))
    return layout


OFF = TensorParallel()
"""No tensor parallelism: each layer whole on its IPU."""
