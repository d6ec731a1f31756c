"""A model-parallel step's micro-batches as one rank's Chakra nodes (``ipupod train
--chakra-out``): for each micro-batch, its share of the forward pass's compute (a COMP node
of the step's compute over the micro-batches and ``1 + BACKWARD_FLOPS_FACTOR``), then the
forward's collectives, then the backward pass's share and its collectives, each after the
one before. Where the compute is cut does not change the step's time: the collectives do
not overlap compute (as the pricing assumes), so only their sum and order count."""

from __future__ import annotations

from dataclasses import dataclass

from cluster.training.chakra.et_nodes import CommType
from cluster.training.chakra.et_writer import collective_node, compute_node
from cluster.training.workloads import BACKWARD_FLOPS_FACTOR
from ipupod_proto import chakra_et_pb2 as et


@dataclass(frozen=True)
class PassCollective:
    """A collective a micro-batch runs ``count`` times: its node's name, Chakra type,
    ``comm_size`` (bytes) and process group."""

    name: str
    comm_type: CommType
    size_bytes: int
    pg_name: str
    count: int


def micro_batch_nodes(first_id: int, micro_batches: int, compute_seconds: float,
                      forward: list[PassCollective],
                      backward: list[PassCollective]) -> list[et.Node]:
    """Every micro-batch's passes and collectives (``compute_seconds``: the whole step's
    compute), ids from ``first_id``, the first after node ``first_id - 1``."""
    micro = compute_seconds / micro_batches
    shares = (("forward (its share)", micro / (1 + BACKWARD_FLOPS_FACTOR), forward),
              ("backward (its share)", micro - micro / (1 + BACKWARD_FLOPS_FACTOR), backward))
    nodes: list[et.Node] = []
    for index in range(micro_batches):
        for name, seconds, collectives in shares:
            node_id = first_id + len(nodes)
            nodes.append(compute_node(node_id, f"{name}, micro-batch {index}", seconds,
                                      deps=[node_id - 1]))
            for c in collectives:
                for _ in range(c.count):
                    node_id = first_id + len(nodes)
                    nodes.append(collective_node(node_id, c.name, c.comm_type, c.size_bytes,
                                                 pg_name=c.pg_name, deps=[node_id - 1]))
    return nodes
