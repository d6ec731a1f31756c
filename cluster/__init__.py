"""The IPU-POD as a whole, in layers (``docs/architecture.md``): the pure model of the
machine (:mod:`cluster.model`: hardware, topologies, routing, the cost model), the control
service (:mod:`cluster.service`), training priced in simulated time or run for real
(:mod:`cluster.training`) and the command line (:mod:`cluster.cli`). The collectives
(:mod:`gcl`) and the emulated devices (:mod:`ipu_node`) are packages of their own, between
the model and the service and training; :mod:`cluster.errors`, below all of them, holds
the errors a user's mistake raises, and :mod:`cluster.setting_names` how those errors word
each setting."""
