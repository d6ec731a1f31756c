"""The IPU-POD as a whole, in layers (``docs/architecture.md``): the pure model of the
machine (:mod:`cluster.model`), the control service (:mod:`cluster.service`), data-parallel
training (:mod:`cluster.training`) and the command line (:mod:`cluster.cli`)."""
