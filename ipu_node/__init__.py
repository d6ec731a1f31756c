"""Emulated hardware on Ray: a card (C2) or machine (IPU-M2000) actor per unit holding its
IPUs' memory, tensors, counters and model replicas (:mod:`ipu_node.card`,
:mod:`cluster.training.replica`), the gRPC link channels between them (:mod:`ipu_node.links.channel`,
:mod:`ipu_node.links.wire`), DSS 8440 host actors that own PCIe and InfiniBand and relay between
servers (:mod:`ipu_node.host`, :mod:`ipu_node.ownership`), and the launcher that places
them all on Ray (:mod:`ipu_node.pod`), with fault injection and recovery
(:mod:`ipu_node.faults`)."""
