"""Expert parallelism: each mixture-of-experts layer's experts spread over an expert group.

:mod:`.layout` is the option (``--expert-parallel E``) and its checks, :mod:`.split` what
each IPU of a group holds, :mod:`.all_to_all` the all-to-alls each MoE layer runs and
their simulated seconds (the step's "expert-parallel collectives" part). Imported by
module, not from here: the config needs :mod:`.layout` before the plan exists.
"""
