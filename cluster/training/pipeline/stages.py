"""Where a pipelined replica's stages go: which layers each stage holds, which IPU runs it.

Layers are split into contiguous stages with the busiest stage as light as possible (in
training FLOPs: the pipeline runs at the pace of its slowest stage). A replica's ``K``
IPUs are an aligned block of ``K`` (one C2 card, adjacent cards, an IPU-M2000, ...);
its stages follow the IPU-Links through the block, so that each boundary is as few hops
as the block allows (on a DSS 8440's ladder: rung, rail, rung, ...).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate, pairwise

import numpy as np

from cluster.errors import SettingError
from cluster.model.routing import router_of
from cluster.model.topology import Topology


def split_layers(layer_flops: Sequence[int], stages: int) -> list[range]:
    """Contiguous layer ranges, one per stage, minimising the largest stage's FLOPs
    (among equal splits, later stages take fewer layers); a SettingError if there are fewer layers
    than stages."""
    count = len(layer_flops)
    if stages > count:
        raise SettingError("ipus_per_replica", "the model has {count} layer{plural}: "
                           "{stages} pipeline stages need at least {stages} (add hidden "
                           "layers with {hidden}, or use fewer {ipus_per_replica})",
                           count=count, plural="s" if count != 1 else "", stages=stages)
    prefix = np.concatenate([[0], np.cumsum(np.asarray(layer_flops, dtype=np.float64))])
    # best[k][j]: the least possible largest stage when layers [0, j) make k stages
    best = np.full((stages + 1, count + 1), np.inf)
    cut = np.zeros((stages + 1, count + 1), dtype=np.int64)
    best[0][0] = 0.0
    for k in range(1, stages + 1):
        for j in range(k, count - (stages - k) + 1):
            starts = np.arange(k - 1, j)
            worst = np.maximum(best[k - 1][starts], prefix[j] - prefix[starts])
            pick = int(np.argmin(worst[::-1]))  # the latest start among equals
            best[k][j], cut[k][j] = worst[::-1][pick], starts[::-1][pick]
    bounds = [count]
    for k in range(stages, 0, -1):
        bounds.append(int(cut[k][bounds[-1]]))
    bounds.reverse()
    return [range(a, b) for a, b in pairwise(bounds)]


def stage_layers(layer_flops: Sequence[int], stages: int,
                 layers_per_stage: Sequence[int] | None = None) -> list[range]:
    """The layers of each stage: ``layers_per_stage`` consecutive layers each when given
    (Graphcore's ``layers_per_ipu``: a recipe's own placement), else balanced on FLOPs
    (:func:`split_layers`); a SettingError if the counts do not cover the model."""
    if layers_per_stage is None:
        return split_layers(layer_flops, stages)
    counts = list(layers_per_stage)
    if len(counts) != stages or min(counts, default=0) < 1 or sum(counts) != len(layer_flops):
        raise SettingError("layers_per_ipu", "{layers_per_ipu} gives {given} stage(s) of "
                           "{counts} layers: it needs {stages} counts of 1 or more that add "
                           "up to the model's {layers} layers", given=len(counts),
                           counts="+".join(map(str, counts[:16])), stages=stages,
                           layers=len(layer_flops))
    bounds = [0, *accumulate(counts)]
    return [range(a, b) for a, b in pairwise(bounds)]


def stage_chain(topology: Topology, block: Sequence[int]) -> list[int]:
    """The IPUs of ``block`` in stage order: from its first IPU, each next stage on the
    nearest IPU not used yet (fewest links, then the lowest number)."""
    chain, left = [int(block[0])], sorted(int(i) for i in block[1:])
    while left:
        src = np.full(len(left), chain[-1], dtype=np.int64)
        routes = router_of(topology).route(src, np.array(left, dtype=np.int64))
        hops = np.bincount(routes.pair_flow, minlength=len(left))
        chain.append(left.pop(int(np.argmin(hops))))
    return chain
