"""Data-parallel training of a small NumPy MLP across emulated servers: the model (a flat
float32 parameter vector, a hand-written forward and backward pass, SGD with momentum,
FLOP counts that price a step's compute) lives in :mod:`cluster.training.numpy_mlp`, and the
synthetic data set, the deterministic split of each step's global batch into replicas and
gradient-accumulation micro-steps, and a single-process reference run that a distributed
trainer must reproduce live in :mod:`cluster.training.data`."""
