"""The NumPy MLP and data pipeline behind data-parallel training: gradients, splits, FLOPs."""

from __future__ import annotations

import numpy as np
import pytest

from cluster.training.data import (
    make_dataset,
    replica_slice,
    step_batch,
    train_reference,
)
from cluster.training.numpy_mlp import (
    MLPSpec,
    accuracy,
    forward_flops,
    init_params,
    loss_and_grad,
    sgd_momentum,
    training_flops,
)

SMALL = MLPSpec(input_size=16, hidden=(32,), classes=4)


def test_layer_shapes_and_parameter_count_follow_the_spec():
    spec = MLPSpec(input_size=5, hidden=(7, 3), classes=2)
    assert spec.layer_shapes() == [(5, 7), (7, 3), (3, 2)]
    assert spec.parameter_count == 5 * 7 + 7 + 7 * 3 + 3 + 3 * 2 + 2
    params = init_params(spec, seed=0)
    assert params.dtype == np.float32 and params.shape == (spec.parameter_count,)


def test_init_params_has_he_normal_weights_and_zero_biases_in_the_documented_layout():
    spec = MLPSpec(input_size=400, hidden=(300,), classes=10)
    params = init_params(spec, seed=3)
    w1 = params[: 400 * 300]
    b1 = params[400 * 300 : 400 * 300 + 300]
    w2 = params[400 * 300 + 300 : -10]
    b2 = params[-10:]
    assert not b1.any() and not b2.any()
    assert w1.std() == pytest.approx(np.sqrt(2 / 400), rel=0.02)
    assert w2.std() == pytest.approx(np.sqrt(2 / 300), rel=0.05)


def test_gradient_matches_finite_differences_in_float64():
    spec = MLPSpec(input_size=4, hidden=(5, 3), classes=3)
    rng = np.random.default_rng(7)
    params = init_params(spec, seed=1).astype(np.float64)
    params += rng.normal(0, 0.1, size=params.shape)  # non-zero biases, exercised too
    x = rng.normal(size=(6, 4))
    y = rng.integers(0, 3, size=6)
    _, grad = loss_and_grad(spec, params, x, y)
    assert grad.dtype == np.float64
    eps = 1e-6
    numeric = np.empty_like(params)
    for i in range(params.size):
        plus, minus = params.copy(), params.copy()
        plus[i] += eps
        minus[i] -= eps
        numeric[i] = (
            loss_and_grad(spec, plus, x, y)[0] - loss_and_grad(spec, minus, x, y)[0]
        ) / (2 * eps)
    np.testing.assert_allclose(grad, numeric, rtol=1e-5, atol=1e-8)


def test_float32_gradient_agrees_with_float64_gradient():
    x, y = make_dataset(seed=2, samples=32, input_size=16, classes=4)
    params = init_params(SMALL, seed=2)
    loss32, grad32 = loss_and_grad(SMALL, params, x, y)
    loss64, grad64 = loss_and_grad(SMALL, params.astype(np.float64), x.astype(np.float64), y)
    assert isinstance(loss32, float) and grad32.dtype == np.float32
    assert loss32 == pytest.approx(loss64, rel=1e-5)
    assert np.linalg.norm(grad32 - grad64) <= 1e-5 * np.linalg.norm(grad64)


def test_loss_is_stable_for_huge_logits():
    spec = MLPSpec(input_size=2, hidden=(), classes=3)
    params = np.array([1e4, 0, -1e4, 0, 0, 0, 0, 0, 0], dtype=np.float32)  # W (2x3), b (3)
    x = np.array([[1.0, 0.0]], dtype=np.float32)
    loss, grad = loss_and_grad(spec, params, x, np.array([2]))
    assert np.isfinite(loss) and np.all(np.isfinite(grad))
    assert loss == pytest.approx(2e4, rel=1e-6)


def test_mean_of_replica_micro_batch_gradients_equals_the_whole_batch_gradient():
    replicas, accumulation, micro_batch = 4, 3, 8
    x, y = make_dataset(seed=1, samples=1000, input_size=16, classes=4)
    bx, by = step_batch(x, y, step=5, global_batch=replicas * accumulation * micro_batch)
    params = init_params(SMALL, seed=4)
    _, whole = loss_and_grad(SMALL, params, bx, by)
    replica_means = []
    for r in range(replicas):
        micro = [
            loss_and_grad(SMALL, params, *replica_slice(bx, by, r, replicas, micro_batch,
                                                        accumulation, a))[1]
            for a in range(accumulation)
        ]
        replica_means.append(np.mean(micro, axis=0))
    averaged = np.mean(replica_means, axis=0)
    assert np.linalg.norm(averaged - whole) <= 1e-6 * np.linalg.norm(whole)


def test_train_reference_loss_decreases_over_50_steps():
    x, y = make_dataset(seed=0, samples=2048, input_size=16, classes=4)
    losses = train_reference(
        SMALL, x, y, replicas=2, micro_batch=8, accumulation=2, steps=50, lr=0.05,
        momentum=0.9, seed=0,
    )
    assert len(losses) == 50 and all(isinstance(v, float) for v in losses)
    assert np.mean(losses[-10:]) < 0.6 * np.mean(losses[:5])


def test_a_trained_mlp_beats_chance_clearly_after_50_steps():
    x, y = make_dataset(seed=0, samples=2048, input_size=16, classes=4)
    params = init_params(SMALL, seed=0)
    velocity = np.zeros_like(params)
    for step in range(50):
        loss, grad = loss_and_grad(SMALL, params, *step_batch(x, y, step, 32))
        sgd_momentum(params, velocity, grad, lr=0.05, momentum=0.9)
    assert accuracy(SMALL, params, x, y) > 0.5  # chance is 0.25


def test_same_seed_gives_identical_data_params_and_losses():
    x1, y1 = make_dataset(seed=11, samples=300, input_size=16, classes=4)
    x2, y2 = make_dataset(seed=11, samples=300, input_size=16, classes=4)
    assert x1.dtype == np.float32 and y1.dtype == np.int64 and x1.shape == (300, 16)
    assert np.array_equal(x1, x2) and np.array_equal(y1, y2)
    assert np.array_equal(init_params(SMALL, seed=5), init_params(SMALL, seed=5))
    assert not np.array_equal(init_params(SMALL, seed=5), init_params(SMALL, seed=6))
    kwargs = dict(replicas=2, micro_batch=4, accumulation=2, steps=10, lr=0.05, momentum=0.9,
                  seed=5)
    assert train_reference(SMALL, x1, y1, **kwargs) == train_reference(SMALL, x2, y2, **kwargs)


def test_sgd_momentum_updates_in_place_in_float32():
    params = np.array([1.0, 2.0], dtype=np.float32)
    velocity = np.array([0.5, -1.0], dtype=np.float32)
    grad = np.array([0.25, 0.5], dtype=np.float32)
    sgd_momentum(params, velocity, grad, lr=0.1, momentum=0.9)
    expected_v = np.float32(0.9) * np.array([0.5, -1.0], np.float32) + grad
    assert velocity.dtype == np.float32 and params.dtype == np.float32
    np.testing.assert_array_equal(velocity, expected_v)
    np.testing.assert_array_equal(
        params, np.array([1.0, 2.0], np.float32) - np.float32(0.1) * expected_v
    )
    with pytest.raises(TypeError):
        sgd_momentum(params.astype(np.float64), velocity, grad, 0.1, 0.9)


def test_step_batch_takes_consecutive_rows_and_wraps_around():
    x = np.arange(10, dtype=np.float32).reshape(10, 1)
    y = np.arange(10, dtype=np.int64)
    bx, by = step_batch(x, y, step=1, global_batch=4)
    assert by.tolist() == [4, 5, 6, 7] and bx[:, 0].tolist() == [4, 5, 6, 7]
    assert step_batch(x, y, step=2, global_batch=4)[1].tolist() == [8, 9, 0, 1]
    assert step_batch(x, y, step=3, global_batch=7)[1].tolist() == [1, 2, 3, 4, 5, 6, 7]


def test_replica_slices_partition_the_step_batch_in_order():
    replicas, accumulation, micro_batch = 3, 4, 5
    n = replicas * accumulation * micro_batch
    bx = np.arange(n * 2, dtype=np.float32).reshape(n, 2)
    by = np.arange(n, dtype=np.int64)
    parts = [
        replica_slice(bx, by, r, replicas, micro_batch, accumulation, a)
        for r in range(replicas)
        for a in range(accumulation)
    ]
    assert all(len(px) == micro_batch and len(py) == micro_batch for px, py in parts)
    np.testing.assert_array_equal(np.concatenate([p[0] for p in parts]), bx)
    np.testing.assert_array_equal(np.concatenate([p[1] for p in parts]), by)
    # replica 1 owns rows [20, 40); its micro-step 2 is rows [30, 35)
    assert replica_slice(bx, by, 1, replicas, micro_batch, accumulation, 2)[1].tolist() == [
        30, 31, 32, 33, 34,
    ]
    with pytest.raises(ValueError):
        replica_slice(bx[:-1], by[:-1], 0, replicas, micro_batch, accumulation, 0)


def test_training_flops_are_three_forwards_and_forward_flops_match_hand_count():
    spec = MLPSpec(input_size=784, hidden=(256, 128), classes=10)
    batch = 32
    hand = 2 * batch * (784 * 256 + 256 * 128 + 128 * 10)
    assert hand == 15_024_128
    assert forward_flops(spec, batch) == hand
    assert training_flops(spec, batch) == 3 * hand
    assert training_flops(SMALL, 7) == 3 * forward_flops(SMALL, 7)
