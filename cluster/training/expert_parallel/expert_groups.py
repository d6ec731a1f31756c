"""``--expert-parallel E``: each mixture-of-experts layer's experts over ``E`` replicas.

An expert group is the same IPU of ``E`` consecutive replicas of a server or rack (on
IPU-Links: with a replica of one IPU, ``E`` consecutive IPUs; with tensor groups, the same
tensor rank of ``E`` of them). Each IPU of a replica holds ``1/E`` of the experts of its
MoE layers; the replicas of a group still take their own micro-batches
(data parallelism for every other layer) and send each token to the IPU holding its
expert by an all-to-all. :func:`parse_expert_parallel` reads the option's text once, at
the edge; :func:`check_expert_parallel` refuses what cannot be split as asked.
"""

from __future__ import annotations

import re

from cluster.errors import SettingError
from cluster.training.workloads.layers import Workload

_DEGREE = re.compile(r"[0-9]{1,6}")


def parse_expert_parallel(text: str | None) -> int:
    """``--expert-parallel``'s text (None: off, 1) as the expert group's size, or a
    SettingError saying what it takes."""
    if text is None:
        return 1
    if _DEGREE.fullmatch(text.strip()) is None or int(text) < 1:
        raise SettingError("expert_parallel", "{expert_parallel} takes the IPUs an expert "
                           "group spreads each layer's experts over (a whole number such as "
                           "8), not {given!r}", given=text[:40])
    return int(text)


def check_expert_parallel(workload: Workload, degree: int, replicas_per_server: int) -> None:
    """A SettingError unless ``workload``'s experts split over ``degree`` replicas of a
    server or rack of ``replicas_per_server``: it has mixture-of-experts layers, and
    ``degree`` divides each one's experts and the replicas of a server."""
    if degree == 1:
        return
    moe = [layer for layer in workload.layers if layer.experts is not None]
    if not moe:
        raise SettingError("expert_parallel", "{expert_parallel} spreads mixture-of-experts "
                           "layers' experts; {name} has none: leave out {expert_parallel}",
                           name=workload.name[:60])
    for layer in moe:
        assert layer.experts is not None
        if layer.experts.count % degree:
            raise SettingError("expert_parallel", "{expert_parallel} {degree} does not divide "
                               "the {count} experts of {layer}: use one that does",
                               degree=degree, count=layer.experts.count, layer=layer.name)
    if replicas_per_server % degree:
        raise SettingError("expert_parallel", "{expert_parallel} {degree}: an expert group is "
                           "{degree} replicas of one server or rack, which has "
                           "{replicas}: use {replicas_per_server} a multiple of {degree}, "
                           "or an {expert_parallel} that divides {replicas}",
                           degree=degree, replicas=replicas_per_server)
