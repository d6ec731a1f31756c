"""Training on the emulated POD, in two modes that share one pricing of a step.

- What a network asks of the IPUs, layer by layer: the built-in workloads (ResNet-50,
  BERT, GPT-2 XL, the trainer's MLP) and workload files (:mod:`cluster.training.workloads`).
- Pricing a training step in simulated seconds (phantom mode): compute, memory per IPU,
  pipelined and sharded stages, the gradient allreduce and the optimiser's update.
- Really training a small NumPy MLP across the emulated devices (real mode), whose
  replicas and micro-steps must reproduce a single-process reference run.
- Fidelity (:mod:`cluster.training.fidelity`): the priced steps against Graphcore's
  published MLPerf times; and the reports (tables and plots) a run writes.

``docs/architecture.md`` says which module holds which part; ``docs/training.md`` how to
run it.
"""
