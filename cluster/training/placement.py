"""Where a training run's replicas live: which servers, which IPUs, in which stage order."""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from cluster.model.hardware import DeviceKind
from cluster.model.presets import build_preset
from cluster.model.spec import load_topology
from cluster.model.topology import Topology
from cluster.training.config import TrainConfig
from cluster.training.pipeline.stages import stage_chain
from gcl import CommGroup


def topology_for(config: TrainConfig) -> Topology:
    """``config.topology`` if given (a preset or YAML file), else DSS 8440 servers."""
    if config.topology:
        return load_topology(config.topology)
    return build_preset("dss8440" if config.servers == 1 else f"dss8440x{config.servers}")


def server_ipus(topology: Topology) -> list[np.ndarray]:
    """The IPUs of each server (DSS 8440) or rack (POD), in order; a topology without
    servers is one."""
    if not topology.servers:
        return [np.arange(topology.ipu_count)]
    return [np.sort(np.concatenate([np.array(topology.units[u].ipus) for u in server.units]))
            for server in topology.servers]


def replica_ipus(config: TrainConfig, topology: Topology) -> np.ndarray:
    """Each replica's IPUs in stage order, replica after replica: the first
    ``replicas_per_server`` aligned blocks of ``ipus_per_replica`` IPUs of every server or
    rack, each block ordered along its IPU-Links (:func:`stage_chain`)."""
    return _placed(topology, config.ipus_per_replica, config.replicas_per_server).copy()


@lru_cache(maxsize=4)
def _placed(topology: Topology, ipus_per_replica: int, replicas_per_server: int) -> np.ndarray:
    """:func:`replica_ipus` for a topology (by identity: it is read-only) and the two
    settings it follows, worked out once: fitting a run and running it place the same
    replicas (routing each chain took 4 s on pod65536)."""
    k = ipus_per_replica
    chains: list[int] = []
    for ipus in server_ipus(topology):
        for r in range(replicas_per_server):
            block = ipus[r * k:(r + 1) * k].tolist()
            chains.extend(block if k == 1 else stage_chain(topology, block))
    return np.array(chains, dtype=np.int64)


def gradient_group(config: TrainConfig) -> CommGroup:
    """The replica group of the gradient allreduce over :func:`replica_ipus`: every
    replica (one IPU each), or each stage's IPU with the same stage of every other replica
    (CommGroup ORTHOGONAL of the replica count)."""
    if config.ipus_per_replica == 1:
        return CommGroup()
    return CommGroup.orthogonal(config.replicas)


def machines(topology: Topology) -> str:
    """What the topology is built of, as its users count it: "4 IPU-M2000s in 1 IPU-POD16
    rack", "2 DSS 8440 servers of 8 C2 cards each", or its units when it has no
    servers."""
    kinds = sorted({unit.kind for unit in topology.units})
    units = " and ".join(f"{sum(u.kind == kind for u in topology.units)} {kind}"
                         f"{'' if sum(u.kind == kind for u in topology.units) == 1 else 's'}"
                         for kind in kinds)
    if not topology.servers:
        return units
    groups = sorted({server.kind for server in topology.servers})
    count = len(topology.servers)
    if DeviceKind.IPU_M2000 in kinds:  # a POD: racks of IPU-M2000s
        return f"{units} in {count} {'/'.join(groups)} rack{'' if count == 1 else 's'}"
    per = len(topology.servers[0].units)
    return (f"{count} {', '.join(groups)} server{'' if count == 1 else 's'} of {per} "
            f"{' and '.join(kinds)} card{'' if per == 1 else 's'}{' each' if count > 1 else ''}")
