"""Training on the emulated machine: data-parallel replicas, each one IPU, a pipeline of
several, or one layer split over several, priced on the emulated hardware and, for the
NumPy MLP, trained for real on the emulated devices.

One room per concern: the workloads priced (:mod:`.workloads`, pure), a step's parts and
their pricing (:mod:`.step_parts`, :mod:`.step_timing`, :mod:`.pipeline`, :mod:`.sharding`),
a run priced and recorded (:mod:`.trainer`, :mod:`.numpy_mlp`, :mod:`.data`), real mode's
step loops on the devices (:mod:`.engines`, the only room with the runtime, beside the
torch runtime in :mod:`.torch_replicas`), the emulator against measured steps
(:mod:`.fidelity`), and what is written about runs (:mod:`.reports`); the run's settings
and defaults (:mod:`.config`, :mod:`.defaults`, :mod:`.fit`) are shared by all of them.
``docs/architecture.md`` says where to add what.
"""
