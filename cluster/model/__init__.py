"""The pure model of the machine: hardware catalogue, units, topologies (builder, presets,
YAML files), routing, link faults and the network cost model.

Nothing here imports GCL, the runtime (Ray, the links), gRPC or the CLI: the model is what
every other layer builds on (``docs/architecture.md``).
"""
