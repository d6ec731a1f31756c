"""Pipelined replicas: schedules as pure data (:mod:`.pass_schedule`, :mod:`.schedules`),
how a schedule costs (:mod:`.timing`, :mod:`.lock_step`), layers split into stages
(:mod:`.stages`), a stage's arithmetic (:mod:`.stage_math`), the cards' tasks
(:mod:`.stage_tasks`) and the real-mode driver (:mod:`.real_pipeline`)."""
