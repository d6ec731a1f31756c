"""Pipeline schedules are data with the dependencies of the model; their costing splits
a pipeline's span into compute, bubble and transfers, exactly as hand arithmetic says."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cluster.errors import UserError
from cluster.model.presets import build_preset
from cluster.training.config import TrainConfig
from cluster.training.numpy_mlp import MLPSpec, init_params, loss_and_grad
from cluster.training.pipeline import stage_math
from cluster.training.pipeline.pass_schedule import Op, Pass, PipelineSchedule
from cluster.training.pipeline.schedules import pipeline_schedule, schedule_names
from cluster.training.pipeline.stages import split_layers, stage_chain
from cluster.training.pipeline.timing import pipeline_time
from cluster.training.step_timing import replica_pipeline_time
from cluster.training.workloads import Layer, LayerKind, Workload


@settings(deadline=None, max_examples=60)
@given(stages=st.integers(1, 16), micro=st.integers(1, 32), name=st.sampled_from(["fill-drain",
                                                                                   "1f1b"]))
def test_equal_stages_leave_the_bubble_the_fill_drain_formula_gives(stages, micro, name):
    schedule = pipeline_schedule(name, stages, micro)
    time = pipeline_time(schedule, [1.0] * stages, [2.0] * stages, [0.0] * (stages - 1),
                         [0.0] * (stages - 1))
    assert time.compute_seconds == micro * 3.0
    assert time.bubble_seconds == pytest.approx((stages - 1) * 3.0)
    assert time.bubble_seconds / time.span_seconds == pytest.approx(
        (stages - 1) / (micro + stages - 1))
    assert time.inter_stage_seconds == 0
    assert len(schedule.rounds()) == 2 * (micro + stages - 1)


def test_a_two_stage_pipeline_costs_what_hand_arithmetic_says():
    # F0@0 0-1, send 0.5, F0@1 1.5-2.5, B0@1 2.5-4.5, send 0.5, B0@0 5-7: span 7 s, of
    # which 3 s the busiest stage's compute, 3 s waiting, 1 s the two transfers.
    time = pipeline_time(pipeline_schedule("fill-drain", 2, 1), [1.0, 1.0], [2.0, 2.0], [0.5],
                         [0.5])
    assert (time.compute_seconds, time.bubble_seconds, time.inter_stage_seconds) == (3, 3, 1)
    assert time.stage_compute_seconds == (3.0, 3.0)


def test_a_phantom_pipeline_of_equal_layers_pins_the_bubble_on_a_real_topology():
    layer = Layer("block", LayerKind.DENSE, parameters=1000, forward_flops=10**9,
                  output_bytes=4096, stashed_bytes=4096)
    workload = Workload("equal", tuple(Layer(f"b{i}", layer.kind, 1000, 10**9, 4096, 4096)
                                       for i in range(8)), input_bytes=256)
    topology = build_preset("dss8440")
    for stages, micro in ((2, 1), (4, 6), (8, 3)):
        config = TrainConfig(servers=1, ipus_per_replica=stages, accumulation=micro,
                             micro_batch=16, replicas_per_server=16 // stages)
        chains = np.arange(16).reshape(16 // stages, stages)
        time = replica_pipeline_time(config, topology, workload, chains)
        stage_seconds = 3 * 16 * (8 // stages) * 1e9 / 31.1e12  # GC2 fp32 peak
        assert time.compute_seconds == pytest.approx(micro * stage_seconds)
        assert time.bubble_seconds == pytest.approx((stages - 1) / (micro + stages - 1)
                                                    * (time.compute_seconds
                                                       + time.bubble_seconds))
        assert time.inter_stage_seconds > 0


def test_one_forward_one_backward_stashes_fewer_micro_batches_than_fill_drain():
    assert pipeline_schedule("fill-drain", 4, 6).stashed() == [6, 6, 6, 6]
    assert pipeline_schedule("1f1b", 4, 6).stashed() == [4, 3, 2, 1]
    assert pipeline_schedule("1f1b", 4, 2).stashed() == [2, 2, 2, 1]


def test_schedule_orders_that_cannot_run_are_refused():
    forward, backward = Op(0, Pass.FORWARD, 0), Op(0, Pass.BACKWARD, 0)
    with pytest.raises(ValueError, match="before its forward"):
        PipelineSchedule("odd", 1, 1, ((backward, forward),))
    # stage 1 waits for stage 0's backward before its forward: a deadlock
    order = ((Op(0, Pass.FORWARD, 0), Op(0, Pass.BACKWARD, 0)),
             (Op(1, Pass.FORWARD, 0), Op(1, Pass.BACKWARD, 0)))
    assert PipelineSchedule("fine", 2, 1, order).rounds()
    stuck = ((Op(0, Pass.FORWARD, 0), Op(0, Pass.BACKWARD, 0), Op(0, Pass.FORWARD, 1),
              Op(0, Pass.BACKWARD, 1)),
             (Op(1, Pass.FORWARD, 1), Op(1, Pass.BACKWARD, 1), Op(1, Pass.FORWARD, 0),
              Op(1, Pass.BACKWARD, 0)))
    with pytest.raises(ValueError, match="deadlocks"):
        PipelineSchedule("stuck", 2, 2, stuck)
    with pytest.raises(ValueError, match="once"):
        PipelineSchedule("short", 1, 2, ((forward, backward),))


def test_unknown_schedules_and_shapes_are_user_errors():
    assert schedule_names() == ["fill-drain", "1f1b", "popart"]
    with pytest.raises(UserError, match="fill-drain or 1f1b"):
        pipeline_schedule("zigzag", 2, 2)
    with pytest.raises(UserError, match="micro-batch"):
        pipeline_schedule("1f1b", 2, 0)


def test_layers_split_into_stages_with_the_lightest_busiest_stage():
    assert split_layers([8, 16, 16, 1], 2) == [range(0, 2), range(2, 4)]
    assert split_layers([5, 1, 1, 1, 1, 1], 3) == [range(0, 1), range(1, 5), range(5, 6)]
    assert split_layers([1] * 4, 4) == [range(i, i + 1) for i in range(4)]
    with pytest.raises(UserError, match="3 layers: 4 pipeline stages"):
        split_layers([1, 1, 1], 4)


def test_stages_follow_the_ipu_links_of_a_dss8440_ladder():
    topology = build_preset("dss8440")
    assert stage_chain(topology, [0, 1]) == [0, 1]  # one C2 card: its rung
    assert stage_chain(topology, [0, 1, 2, 3]) == [0, 1, 3, 2]  # rung, rail, rung
    assert stage_chain(topology, list(range(8, 16))) == [8, 9, 11, 10, 12, 13, 15, 14]


@pytest.mark.parametrize("cuts", [[range(0, 1), range(1, 4)], [range(0, 2), range(2, 3),
                                                                  range(3, 4)]])
def test_stages_compute_exactly_what_the_whole_model_computes(cuts):
    spec = MLPSpec(12, (16, 8, 8), 5)
    params = init_params(spec, 3)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(6, 12)).astype(np.float32)
    y = rng.integers(0, 5, size=6)
    loss, grad = loss_and_grad(spec, params, x, y)
    a, kept, views = x, [], []
    for s, layers in enumerate(cuts):
        start, stop = stage_math.stage_offsets(spec, layers)
        views.append(stage_math.unflatten(spec, layers, params[start:stop]))
        a, inputs = stage_math.forward(views[-1], a, s == len(cuts) - 1)
        kept.append(inputs)
    staged_loss, delta = stage_math.loss_gradient(a, y)
    assert staged_loss == loss
    staged = np.empty_like(grad)
    for s in range(len(cuts) - 1, -1, -1):
        start, stop = stage_math.stage_offsets(spec, cuts[s])
        delta = stage_math.backward(views[s], kept[s], delta,
                                    stage_math.unflatten(spec, cuts[s], staged[start:stop]),
                                    starts_model=s == 0)
    assert delta is None and np.array_equal(staged, grad)
