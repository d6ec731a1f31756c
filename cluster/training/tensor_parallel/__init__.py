"""Tensor parallelism of a transformer: each layer split over a replica's tensor group.

:mod:`.layout` is the option (``--tensor-parallel T`` or ``T1xT2``), :mod:`.split` what
each IPU of a group holds and computes, :mod:`.layer_allreduces` the all-reduces each layer
runs. Their simulated seconds (the step's "tensor-parallel collectives" part) are
:mod:`cluster.training.tensor_parallel_time`, a layer above: it prices a resolved plan,
and the config, below the plan, needs this package. Imported by module, not from here.
"""
