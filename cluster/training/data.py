"""Synthetic data, how a step's global batch is split across replicas, and a reference run.

Data-parallel training with gradient accumulation splits each step's global batch of
``replicas * accumulation * micro_batch`` rows: every replica takes a contiguous block and
walks through it one micro-batch per micro-step. Because the loss is a mean, averaging the
mean gradients of these equal micro-batches gives exactly the gradient of the whole batch,
so :func:`train_reference` (one process, whole batch at once) is what a correct distributed
trainer must reproduce, up to float32 rounding.
"""

from __future__ import annotations

import numpy as np

from cluster.training.numpy_mlp import DTYPE, MLPSpec, init_params, loss_and_grad, sgd_momentum

CENTRES_PER_CLASS = 2
"""Each class is a mixture of this many blobs, so that it is not linearly separable."""
CENTRE_SPREAD = 3.0
"""Centres are drawn ``N(0, CENTRE_SPREAD**2 / input_size)`` per feature, so two centres lie
about ``CENTRE_SPREAD * sqrt(2)`` noise standard deviations apart whatever ``input_size``: the
difficulty does not change with the width of the input."""
NOISE_STD = 1.0
"""Standard deviation of the per-feature noise around a centre."""


def make_dataset(
    seed: int, samples: int, input_size: int, classes: int
) -> tuple[np.ndarray, np.ndarray]:
    """A reproducible classification problem: ``x`` float32 ``(samples, input_size)``, ``y`` int64.

    Each class owns ``CENTRES_PER_CLASS`` centres drawn from ``np.random.default_rng(seed)``
    (see :data:`CENTRE_SPREAD`); a sample picks a class uniformly, one of its centres, and
    adds ``N(0, NOISE_STD**2)`` noise per feature. Blobs overlap and classes are mixtures,
    so the problem is learnable but not trivial: a one-hidden-layer MLP gets well above
    chance within 50 SGD steps (e.g. ~80% with 16 features and 4 classes) and keeps improving
    for thousands more.
    """
    if samples < 1 or input_size < 1 or classes < 2:
        raise ValueError(
            f"need samples >= 1, input_size >= 1, classes >= 2; got {samples}, {input_size}, "
            f"{classes}"
        )
    rng = np.random.default_rng(seed)
    centre_std = CENTRE_SPREAD / np.sqrt(input_size)
    centres = rng.normal(0.0, centre_std, size=(classes, CENTRES_PER_CLASS, input_size))
    y = rng.integers(0, classes, size=samples, dtype=np.int64)
    blob = rng.integers(0, CENTRES_PER_CLASS, size=samples)
    noise = rng.normal(0.0, NOISE_STD, size=(samples, input_size))
    x = (centres[y, blob] + noise).astype(DTYPE)
    return x, y


def step_batch(
    x: np.ndarray, y: np.ndarray, step: int, global_batch: int
) -> tuple[np.ndarray, np.ndarray]:
    """The samples of training step ``step``: rows ``[step*global_batch, (step+1)*global_batch)``.

    Row indices wrap around modulo ``len(x)``, so any number of steps (epochs) can be run
    over a finite data set; the result is a copy.
    """
    if len(x) != len(y) or len(x) == 0:
        raise ValueError(f"x and y must be non-empty and of equal length, got {len(x)}, {len(y)}")
    if step < 0 or global_batch < 1:
        raise ValueError(f"need step >= 0 and global_batch >= 1, got {step}, {global_batch}")
    rows = np.arange(step * global_batch, (step + 1) * global_batch) % len(x)
    return x[rows], y[rows]


def replica_slice(
    batch_x: np.ndarray,
    batch_y: np.ndarray,
    replica: int,
    replicas: int,
    micro_batch: int,
    accumulation: int,
    micro_step: int,
) -> tuple[np.ndarray, np.ndarray]:
    """The micro-batch that replica ``replica`` processes at micro-step ``micro_step``.

    The step's global batch (``replicas * accumulation * micro_batch`` rows, in order) is cut
    into one contiguous block of ``accumulation * micro_batch`` rows per replica, replica
    ``r`` owning the block starting at row ``r * accumulation * micro_batch``; micro-step
    ``a`` is the ``a``-th run of ``micro_batch`` rows of that block. Returns views.
    """
    if replicas < 1 or micro_batch < 1 or accumulation < 1:
        raise ValueError(
            f"need replicas, micro_batch, accumulation >= 1, got {replicas}, {micro_batch}, "
            f"{accumulation}"
        )
    if not 0 <= replica < replicas:
        raise ValueError(f"replica {replica} out of range [0, {replicas})")
    if not 0 <= micro_step < accumulation:
        raise ValueError(f"micro_step {micro_step} out of range [0, {accumulation})")
    expected = replicas * accumulation * micro_batch
    if len(batch_x) != expected or len(batch_y) != expected:
        raise ValueError(
            f"the step batch must have replicas*accumulation*micro_batch = {expected} rows, "
            f"got {len(batch_x)} and {len(batch_y)}"
        )
    start = (replica * accumulation + micro_step) * micro_batch
    return batch_x[start : start + micro_batch], batch_y[start : start + micro_batch]


def train_reference(
    spec: MLPSpec,
    x: np.ndarray,
    y: np.ndarray,
    *,
    replicas: int,
    micro_batch: int,
    accumulation: int,
    steps: int,
    lr: float,
    momentum: float,
    seed: int,
) -> list[float]:
    """Single-process training that a data-parallel run must match; the loss of each step.

    Parameters start from ``init_params(spec, seed)`` and velocity from zero. Step ``s``
    takes ``step_batch(x, y, s, replicas * accumulation * micro_batch)``, computes
    :func:`loss_and_grad` on that whole batch at once and applies :func:`sgd_momentum`.
    The returned losses are those computed before each step's update.
    """
    if replicas < 1 or micro_batch < 1 or accumulation < 1 or steps < 0:
        raise ValueError(
            f"need replicas, micro_batch, accumulation >= 1 and steps >= 0, got {replicas}, "
            f"{micro_batch}, {accumulation}, {steps}"
        )
    global_batch = replicas * accumulation * micro_batch
    params = init_params(spec, seed)
    velocity = np.zeros_like(params)
    losses: list[float] = []
    for step in range(steps):
        bx, by = step_batch(x, y, step, global_batch)
        loss, grad = loss_and_grad(spec, params, bx, by)
        sgd_momentum(params, velocity, grad, lr, momentum)
        losses.append(loss)
    return losses
