"""What kind of model a run trains and how a replica's layers spread: enums, decided once.

The model's name as typed (a built-in name or a workload file) is told apart by
:class:`ModelKind`, once, where :func:`~cluster.training.model_ref.model_ref` makes the
run's ``ModelRef``: the trainer's own MLP (real or phantom mode,
its layer widths from the run's settings) or a workload (phantom mode, its layers' counts
from a builder or a file). :class:`Split` is ``--split`` as a value.
"""

from __future__ import annotations

from cluster.model.text_enum import TextEnum

MLP_NAME = "mlp"  # the built-in name of the trainer's own model


class ModelKind(TextEnum):
    """The trainer's NumPy MLP, or a workload priced from its counts."""

    MLP = "mlp"
    WORKLOAD = "workload"

    @classmethod
    def of(cls, model: str) -> ModelKind:
        """The kind of the model named ``model`` (a built-in name or a file path)."""
        return ModelKind.MLP if model == MLP_NAME else ModelKind.WORKLOAD


class Split(TextEnum):
    """How a replica of several IPUs spreads its layers: stages of a pipeline, or the
    widest layer by columns (``shard``)."""

    PIPELINE = "pipeline"
    SHARD = "shard"
