"""A small GPT decoder in NumPy, with its exact backward, as one process or as the ranks
of a tensor group: what real mode trains for ``--model gpt-tiny``.

Pre-norm blocks (layer norm, causal multi-head self-attention, residual; layer norm, a
GELU FFN of ``4 h``, residual), token and learned position embeddings, a final layer
norm, a head tied to the token table, softmax cross-entropy over every token; no dropout.
Its shape is a :class:`~cluster.training.workloads.decoder.DecoderConfig`, the same one
its workload is priced from (:mod:`cluster.training.workloads.gpt_tiny`).
:mod:`.layout` lays out its parameters (a rank's share of them), :mod:`.numerics` and
:mod:`.normed_products` its pieces, :mod:`.forward` and :mod:`.backward` a rank's passes
in parts (on a :mod:`.rank_state`), :mod:`.program` the parts and the all-reduces
between them, :mod:`.group` runs them in this process, :mod:`.tokens` its data and the
single-process reference, and :mod:`.real_settings` refuses what it does not train
(which names it trains: :data:`cluster.training.model_ref.REAL_DECODERS`).
"""
