"""Tensor parallelism of a transformer: each layer split over a replica's tensor group.

:mod:`.layout` is the option (``--tensor-parallel T`` or ``T1xT2``), :mod:`.split` what
each IPU of a group holds and computes, :mod:`.layer_allreduces` the all-reduces each layer
runs, :mod:`.allreduce_time` their simulated seconds (the step's "tensor-parallel collectives"
part). Imported by module, not from here: the config needs :mod:`.layout` before the
plan that :mod:`.allreduce_time` prices exists.
"""
