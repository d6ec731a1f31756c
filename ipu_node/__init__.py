"""One emulated card (C2) or machine (IPU-M2000): a Ray actor holding its IPUs' memory,
tensors and counters, and serving the gRPC link channels its neighbours stream chunks to.

The actors and their link servers arrive with the "Emulated devices" issue; until then the
GCL runs in phantom mode (sizes only) on the topology and cost model in :mod:`cluster`.
"""
