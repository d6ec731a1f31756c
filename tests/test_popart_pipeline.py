"""PopART's pipeline runs in lock-step cycles: each op in the cycle PopART gives it, a cycle
as long as its busiest IPU, and every stage boundary's copies after each cycle."""

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.model.presets import build_preset
from cluster.training.config import TrainConfig
from cluster.training.pipeline.lock_step import lock_step_time
from cluster.training.pipeline.schedule import Op, Pass, PipelineSchedule
from cluster.training.pipeline.schedules import pipeline_schedule
from cluster.training.pipeline.timing import pipeline_time
from cluster.training.timing import replica_pipeline_time
from cluster.training.workloads import Layer, LayerKind, Workload


def _cycles(schedule: PipelineSchedule) -> dict[str, int]:
    assert schedule.cycles is not None
    return {f"{'F' if op.pass_ is Pass.FORWARD else 'B'}{op.micro}@{op.stage}": cycle
            for ops, cycles in zip(schedule.order, schedule.cycles)
            for op, cycle in zip(ops, cycles)}


def test_each_op_runs_in_the_cycle_popart_gives_it():
    # PopART's own example (popprograms.cpp): 3 IPUs, 5 micro-batches, pipeline stages
    # 0..4; IPU 0 runs PS0 alone for 4 cycles, then PS0(4) with PS4(0), then PS4 alone.
    schedule = pipeline_schedule("popart", 3, 5)
    cycles = _cycles(schedule)
    assert [cycles[f"F{m}@0"] for m in range(5)] == [0, 1, 2, 3, 4]
    assert [cycles[f"B{m}@0"] for m in range(5)] == [4, 5, 6, 7, 8]
    assert [cycles[f"F{m}@2"] for m in range(5)] == [cycles[f"B{m}@2"] for m in range(5)]
    assert schedule.order[0][4:6] == (Op(0, Pass.FORWARD, 4), Op(0, Pass.BACKWARD, 0))
    assert 1 + max(cycles.values()) == 5 + 2 * (3 - 1)


def test_stage_s_stashes_twice_the_stages_after_it_plus_one():
    assert pipeline_schedule("popart", 4, 12).stashed() == [7, 5, 3, 1]
    assert pipeline_schedule("popart", 4, 4).stashed() == [4, 4, 3, 1]


def test_a_lock_step_pipeline_costs_what_hand_arithmetic_says():
    # Cycles of two stages, two micro-batches: IPU 0 runs F0, F1, B0, B1 in cycles 0-3
    # (1, 1, 3, 3 s); IPU 1 runs F0+B0 in cycle 1 and F1+B1 in cycle 2 (6 s each). The
    # cycles last 1, 6, 6, 3 s: 16 s, of which 12 s IPU 1's compute; then four copies.
    time = lock_step_time(pipeline_schedule("popart", 2, 2), [1.0, 2.0], [3.0, 4.0], 0.5,
                          [0, 1])
    assert (time.compute_seconds, time.bubble_seconds, time.inter_stage_seconds) == (12, 4, 2)
    assert time.span_seconds == 18
    assert time.stage_compute_seconds == (8.0, 12.0)


def test_two_stages_on_one_ipu_add_up_within_a_cycle():
    # Stage 2 back on IPU 0: 3 stages, 2 micro-batches, 6 cycles. IPU 0 runs 1, 1, 1+2,
    # 1+2, 2, 2 s; IPU 1 runs 0, 2, 2, 4, 4, 0 s. The cycles last 1, 2, 3, 4, 4, 2 s.
    time = lock_step_time(pipeline_schedule("popart", 3, 2), [1.0, 2.0, 1.0],
                          [2.0, 4.0, 2.0], 0.25, [0, 1, 0])
    assert (time.compute_seconds, time.bubble_seconds, time.inter_stage_seconds) == (
        12, 4, 1.5)


@settings(deadline=None, max_examples=60)
@given(stages=st.integers(2, 6), micro=st.integers(1, 12),
       forward=st.lists(st.floats(0, 4), min_size=6, max_size=6),
       backward=st.lists(st.floats(0, 8), min_size=6, max_size=6))
def test_lock_step_is_never_faster_than_running_each_op_as_soon_as_it_can(
        stages, micro, forward, backward):
    schedule = pipeline_schedule("popart", stages, micro)
    locked = lock_step_time(schedule, forward[:stages], backward[:stages], 0.0,
                            list(range(stages)))
    free = pipeline_time(schedule, forward[:stages], backward[:stages], [0.0] * (stages - 1),
                         [0.0] * (stages - 1))
    assert locked.compute_seconds == pytest.approx(free.compute_seconds)
    assert locked.span_seconds >= free.span_seconds - 1e-9


def test_cycles_that_read_what_another_stage_has_not_copied_yet_are_refused():
    order = ((Op(0, Pass.FORWARD, 0), Op(0, Pass.BACKWARD, 0)),
             (Op(1, Pass.FORWARD, 0), Op(1, Pass.BACKWARD, 0)))
    assert PipelineSchedule("fine", 2, 1, order, ((0, 2), (1, 1))).cycles
    with pytest.raises(ValueError, match="not after F0@0"):
        PipelineSchedule("early", 2, 1, order, ((0, 2), (0, 1)))
    with pytest.raises(ValueError, match="in the order"):
        PipelineSchedule("backwards", 2, 1, order, ((2, 0), (1, 1)))
    with pytest.raises(ValueError, match="stage cycles"):
        PipelineSchedule("short", 2, 1, order, ((0, 2),))
    with pytest.raises(ValueError, match="not lock-step"):
        lock_step_time(pipeline_schedule("1f1b", 2, 1), [1.0, 1.0], [1.0, 1.0], 0.0, [0, 1])
    with pytest.raises(ValueError, match="copy_seconds"):
        lock_step_time(pipeline_schedule("popart", 2, 1), [1.0, 1.0], [1.0, 1.0], -1.0, [0, 1])


def test_every_cycle_pays_one_exchange_of_all_boundaries_on_a_pod16():
    # Two-IPU replicas on an IPU-M2000: a MiB each way per cycle over the IPU-Link of the
    # pair, both directions at once: 2**20 B / 32 GB/s + 0.3 us link + 0.5 us sync, in
    # each of the 4 + 2 cycles.
    workload = Workload("equal", tuple(Layer(f"b{i}", LayerKind.DENSE, 1000, 10**9, 2**16, 2**16)
                                       for i in range(2)), input_bytes=256)
    config = TrainConfig(topology="pod16", servers=1, ipus_per_replica=2, accumulation=4,
                         micro_batch=16, replicas_per_server=8, pipeline_schedule="popart")
    chains, topology = np.arange(16).reshape(8, 2), build_preset("pod16")
    time = replica_pipeline_time(config, topology, workload, chains)
    assert time.inter_stage_seconds == pytest.approx(6 * (2**20 / 32e9 + 0.3e-6 + 0.5e-6))
    free_running = replica_pipeline_time(replace(config, pipeline_schedule="1f1b"), topology,
                                         workload, chains)
    assert time.compute_seconds == free_running.compute_seconds > 0
