"""PopART's pipeline runs in lock-step cycles: each op in the cycle PopART gives it, a cycle
as long as its busiest IPU, and every stage boundary's copies after each cycle."""

import pickle
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.model.presets import build_preset
from cluster.training.config import Mode, TrainConfig
from cluster.training.pipeline.lock_step import lock_step_time
from cluster.training.pipeline.pass_schedule import (
    Op,
    Pass,
    PipelineSchedule,
    TooFewMicroBatches,
    describe,
)
from cluster.training.pipeline.schedules import pipeline_schedule
from cluster.training.pipeline.timing import pipeline_time
from cluster.training.placement import replica_ipus
from cluster.training.plan import plan_for
from cluster.training.step_timing import replica_pipeline_time
from cluster.training.workloads import Layer, LayerKind, Workload


def _cycles(schedule: PipelineSchedule) -> dict[str, int]:
    assert schedule.cycles is not None
    return {describe(op): cycle for ops, cycles in zip(schedule.order, schedule.cycles)
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
    assert pipeline_schedule("popart", 4, 7).stashed() == [7, 5, 3, 1]


def test_fewer_micro_batches_than_pipeline_stages_are_refused_as_popart_does():
    # 4 forward stages make 7 pipeline stages; PopART needs as many micro-batches.
    with pytest.raises(TooFewMicroBatches, match="--gradient-accumulation 7 or more"):
        pipeline_schedule("popart", 4, 6)
    with pytest.raises(TooFewMicroBatches, match="got 1"):
        pipeline_schedule("popart", 2, 1)
    # a run's options are refused before anything is built or launched
    with pytest.raises(TooFewMicroBatches, match="--gradient-accumulation 7 or more"):
        plan_for(TrainConfig(model="bert-large", topology="pod16", mode=Mode.PHANTOM, servers=1,
                    replicas_per_server=4, ipus_per_replica=4, accumulation=6,
                    pipeline_schedule="popart"))
    plan_for(TrainConfig(model="bert-large", topology="pod16", mode=Mode.PHANTOM, servers=1,
                replicas_per_server=16, ipus_per_replica=1, accumulation=1,
                pipeline_schedule="popart"))  # one stage is no pipeline
    # with the final stage back on the first IPU, the error says where the 5th stage is
    with pytest.raises(TooFewMicroBatches, match="9 or more .*the 5 stages are the 4 IPUs'"):
        plan_for(TrainConfig(model="bert-large", topology="pod16", mode=Mode.PHANTOM, servers=1,
                    replicas_per_server=4, ipus_per_replica=4, accumulation=8,
                    final_stage_on_first_ipu=True, pipeline_schedule="popart"))


def test_too_few_micro_batches_keeps_its_count_across_processes():
    error = pickle.loads(pickle.dumps(TooFewMicroBatches("needs 7", 7)))
    assert (str(error), error.needed) == ("needs 7", 7)


def test_a_lock_step_pipeline_costs_what_hand_arithmetic_says():
    # Two stages, three micro-batches, five cycles: IPU 0 runs F0, F1, F2+B0, B1, B2
    # (1, 1, 1+3, 3, 3 s); IPU 1 runs F+B of one micro-batch in cycles 1-3 (6 s each).
    # The cycles last 1, 6, 6, 6, 3 s: 22 s, of which 18 s IPU 1's compute; five copies.
    time = lock_step_time(pipeline_schedule("popart", 2, 3), [1.0, 2.0], [3.0, 4.0], 0.5)
    assert (time.compute_seconds, time.bubble_seconds, time.inter_stage_seconds) == (
        18, 4, 2.5)
    assert time.span_seconds == 24.5
    assert time.stage_compute_seconds == (12.0, 18.0)


def test_two_stages_on_one_ipu_add_up_within_a_cycle():
    # Stage 2 back on IPU 0: 3 stages, 5 micro-batches, 9 cycles. IPU 0 runs
    # 1, 1, 1+3, 1+3, 1+2+3, 2+3, 2+3, 2, 2 s (stage 0's forward 1 s and backward 2 s,
    # stage 2's forward and backward 3 s); IPU 1 runs 0, 2, 2, 2+4, 2+4, 2+4, 4, 4, 0 s.
    # The cycles last 1, 2, 4, 6, 6, 6, 5, 4, 2 s: 36 s, 30 s of it either IPU's compute.
    time = lock_step_time(pipeline_schedule("popart", 3, 5), [1.0, 2.0, 1.0],
                          [2.0, 4.0, 2.0], 0.25, [0, 1, 0])
    assert (time.compute_seconds, time.bubble_seconds, time.inter_stage_seconds) == (
        30, 6, 2.25)


@settings(deadline=None, max_examples=60)
@given(stages=st.integers(2, 6), extra=st.integers(0, 8), copy=st.floats(0, 2),
       forward=st.lists(st.floats(0, 4), min_size=6, max_size=6),
       backward=st.lists(st.floats(0, 8), min_size=6, max_size=6))
def test_lock_step_is_never_faster_than_running_each_op_as_soon_as_it_can(
        stages, extra, copy, forward, backward):
    # The cycles are one way to run the same ops in the same orders, each input having
    # crossed: the earliest-start run of that order, with the same transfer, is no slower.
    schedule = pipeline_schedule("popart", stages, 2 * stages - 1 + extra)
    locked = lock_step_time(schedule, forward[:stages], backward[:stages], copy)
    free = pipeline_time(schedule, forward[:stages], backward[:stages], [copy] * (stages - 1),
                         [copy] * (stages - 1))
    assert locked.compute_seconds == pytest.approx(free.compute_seconds)
    assert locked.span_seconds >= free.span_seconds - 1e-9


@settings(deadline=None, max_examples=40)
@given(stages=st.integers(2, 16), extra=st.integers(0, 20), copy=st.floats(0, 2))
def test_equal_stages_leave_the_bubble_fill_drain_leaves(stages, extra, copy):
    # Forward 1 s and backward 2 s everywhere: K - 1 cycles of forwards alone, M - K + 1
    # full cycles and K - 1 of backwards alone, so the span is (M + K - 1) x 3 s, the
    # bubble (K - 1) x 3 s, as fill-drain's; every one of the M + 2K - 2 cycles copies.
    micro = 2 * stages - 1 + extra
    time = lock_step_time(pipeline_schedule("popart", stages, micro), [1.0] * stages,
                          [2.0] * stages, copy)
    assert time.compute_seconds == pytest.approx(micro * 3)
    assert time.bubble_seconds == pytest.approx((stages - 1) * 3)
    assert time.inter_stage_seconds == pytest.approx((micro + 2 * stages - 2) * copy)


@settings(deadline=None, max_examples=60)
@given(stages=st.integers(2, 6), extra=st.integers(0, 6), copy=st.floats(0, 2),
       wrap=st.booleans(), forward=st.lists(st.floats(0, 4), min_size=6, max_size=6),
       backward=st.lists(st.floats(0, 8), min_size=6, max_size=6))
def test_each_cycle_lasts_its_busiest_ipus_ops_then_the_copies(
        stages, extra, copy, wrap, forward, backward):
    # The oracle, cycle by cycle from PopART's rule: stage s runs F(m) in cycle m + s and
    # B(m) in m + 2(K-1) - s; a cycle lasts as long as the IPU with the most to do,
    # stages on one IPU adding up (the last stage back on IPU 0 when wrapped).
    micro = 2 * stages - 1 + extra
    ipus = [*range(stages - 1), 0] if wrap else list(range(stages))
    busy = np.zeros((micro + 2 * stages - 2, stages))
    for s in range(stages):
        for m in range(micro):
            busy[m + s, ipus[s]] += forward[s]
            busy[m + 2 * (stages - 1) - s, ipus[s]] += backward[s]
    time = lock_step_time(pipeline_schedule("popart", stages, micro), forward[:stages],
                          backward[:stages], copy, ipus)
    assert time.span_seconds == pytest.approx(busy.max(axis=1).sum() + len(busy) * copy)
    assert time.compute_seconds + time.bubble_seconds == pytest.approx(busy.max(axis=1).sum())


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


def test_lock_step_costing_refuses_free_running_schedules_and_bad_durations():
    with pytest.raises(ValueError, match="not lock-step"):
        lock_step_time(pipeline_schedule("1f1b", 2, 3), [1.0, 1.0], [1.0, 1.0], 0.0)
    popart = pipeline_schedule("popart", 2, 3)
    with pytest.raises(ValueError, match="copy_seconds must be 0 s or more"):
        lock_step_time(popart, [1.0, 1.0], [1.0, 1.0], -1.0)
    with pytest.raises(ValueError, match="backward_seconds needs 2"):
        lock_step_time(popart, [1.0, 1.0], [1.0], 0.0)
    with pytest.raises(ValueError, match="stage_ipus"):
        lock_step_time(popart, [1.0, 1.0], [1.0, 1.0], 0.0, [0])


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


def test_the_wrap_back_to_the_first_ipu_shares_a_link_with_another_boundary_on_a_pod64():
    # Eight-IPU replicas along a POD64's IPU-Links (0, 1, 3, 2, 4, 5, 7, 6), a ninth stage
    # back on IPU 0. The wrap's route from IPU 6 to IPU 0 takes three IPU-Links, one of
    # them the 2 -> 4 link of another boundary, and the gradient back to IPU 6 shares
    # the 4 -> 2 link: two 2 MiB copies on one link at 32 GB/s, plus 3 x 0.3 us on the
    # longest route and 0.5 us of sync, in each of the 17 + 2 x 8 cycles.
    workload = Workload("nine", tuple(Layer(f"b{i}", LayerKind.DENSE, 1000, 10**9, 2**16,
                                            2**16) for i in range(9)), input_bytes=256)
    config = TrainConfig(topology="pod64", servers=1, ipus_per_replica=8, accumulation=17,
                         micro_batch=32, replicas_per_server=8, pipeline_schedule="popart",
                         final_stage_on_first_ipu=True)
    topology = build_preset("pod64")
    chains = replica_ipus(config, topology).reshape(8, 8)
    assert chains[0].tolist() == [0, 1, 3, 2, 4, 5, 7, 6]
    time = replica_pipeline_time(config, topology, workload, chains)
    cycle = 2 * 2**21 / 32e9 + 3 * 0.3e-6 + 0.5e-6
    assert time.inter_stage_seconds == pytest.approx(33 * cycle)
