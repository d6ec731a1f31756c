"""GCL, the collectives: schedules as pure data, replica groups, algorithms, phantom-mode
timing and the benchmark harness."""

from gcl.groups import CommGroup, CommGroupType
from gcl.phantom import Timing, simulate
from gcl.planner import plan

__all__ = ["CommGroup", "CommGroupType", "Timing", "plan", "simulate"]
