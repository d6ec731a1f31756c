"""Reports on training runs, written as README.md and PNG plots: the data-parallel scaling
report across servers (:mod:`.servers`), the pipelining and topology sweeps of a workload
(:mod:`.sweeps`), and what a report says it assumed (:mod:`.settings`)."""
