"""Expert parallelism: each mixture-of-experts layer's experts spread over an expert group.

:mod:`.expert_groups` is the option (``--expert-parallel E``) and its checks,
:mod:`.expert_share` what each IPU of a group holds. The all-to-alls each MoE layer runs
and their simulated seconds (the step's "expert-parallel collectives" part) are
:mod:`cluster.training.expert_parallel_time`, above the plan it prices. Imported by
module, not from here.
"""
