"""The ``ipupod`` command line: one module per command group, shared output helpers in
:mod:`cluster.cli.output`."""
