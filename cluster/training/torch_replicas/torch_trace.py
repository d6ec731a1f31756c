"""The simulated timeline of a ``--torch`` run (``ipupod train --torch ... --trace FILE``):
each step of the module's imported workload as phantom mode prices it (:mod:`.pricing`),
drawn as ``ipupod train --trace`` draws a workload's run
(:func:`~cluster.training.step_trace.config_trace`: the step's parts, each stage's
compute, the gradient allreduce's phases). The run is real, so the caller adds what the
devices did on the wall clock (:class:`~ipu_node.wall_trace.WallRecorder`) beside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cluster.model.trace import Trace
from cluster.training.plan import TrainPlan
from cluster.training.step_trace import config_trace


def torch_trace(record: Mapping[str, Any], priced: TrainPlan) -> Trace:
    """The simulated timeline of ``record`` (what ``train --torch --json`` prints), whose
    step was priced as ``priced`` (:func:`~.run.priced_run`)."""
    parts = record["sim_step_parts"]
    run = {"topology": record["topology"], "model": record["model"], "mode": record["mode"],
           "replicas": record["replicas"], "ipus_per_replica": priced.config.ipus_per_replica,
           "pipeline_schedule": priced.config.pipeline_schedule, "algorithm": record["algorithm"],
           "stage_ipus": list(priced.config.stage_ipus),
           "steps": [{**parts, "step": step["step"], "loss": step["loss"],
                      "sim_seconds": step["sim_seconds"]} for step in record["steps"]]}
    trace = config_trace(run, priced)
    trace.metadata["tool"] = "ipupod train --torch"
    return trace
