"""``replay(trace, topology, options)``: a Chakra trace replayed on a topology in phantom
mode (sizes only; ``docs/chakra.md``): its layout worked out, the engine run with the
pricer, the result summed up."""

from __future__ import annotations

from typing import Any

from cluster.model.topology import Topology
from cluster.training.chakra.et_nodes import ChakraTrace
from cluster.training.chakra.replay_engine import ReplayEngine, ReplayRecord
from cluster.training.chakra.replay_layout import replay_layout
from cluster.training.chakra.replay_pricing import ReplayOptions, ReplayPricer
from cluster.training.chakra.replay_summary import replay_summary


def replay(trace: ChakraTrace, topology: Topology,
           options: ReplayOptions = ReplayOptions()) -> tuple[ReplayRecord, dict[str, Any]]:
    """The replay of ``trace`` on ``topology`` and its summary (plain data, with the
    options it ran with), or a UserError naming why it cannot run."""
    layout = replay_layout(trace, topology, options.ranks_to)
    record = ReplayEngine(trace, layout, ReplayPricer(topology, options)).run()
    summary = {"trace": trace.source, "topology": topology.name, "mode": "phantom",
               "compute": str(options.compute), "algorithm": options.algorithm,
               "dtype": str(options.dtype), **replay_summary(record, topology)}
    return record, summary
