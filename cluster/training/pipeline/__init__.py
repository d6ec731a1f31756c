"""Pipelined replicas: schedules as pure data (:mod:`.pass_schedule`, :mod:`.schedules`),
how a schedule costs (:mod:`.timing`, :mod:`.lock_step`), layers split into stages
(:mod:`.stages`) and a stage's arithmetic (:mod:`.stage_math`). Pure: the real-mode
engine and the cards' tasks are :mod:`cluster.training.engines.pipelined` and
:mod:`cluster.training.engines.stage_tasks`."""
