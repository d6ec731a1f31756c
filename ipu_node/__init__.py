"""Emulated cards (C2) and machines (IPU-M2000): Ray actors holding their IPUs' memory,
tensors and counters, serving the gRPC link channels their neighbours stream chunks to
(:mod:`ipu_node.device`, :mod:`ipu_node.link`), and the launcher that places them on Ray
(:mod:`ipu_node.pod`)."""
