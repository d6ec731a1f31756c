"""The model a run trains, resolved once where ``--model`` is read: a typed value.

:func:`model_ref` reads the text the user typed (a built-in name or a workload file)
once: its :class:`~cluster.training.kinds.ModelKind`, for a built-in its registry entry
(:data:`~cluster.training.workloads.registry.BUILTINS`), and the decoder real mode trains
for it if any (:data:`REAL_DECODERS`), each looked up here, once.
A :class:`~cluster.training.config.TrainConfig` carries the :class:`ModelRef`, and
``dataclasses.replace`` carries it on without the text being read again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cluster.training.kinds import ModelKind
from cluster.training.workloads.decoder import DecoderConfig
from cluster.training.workloads.gpt_tiny import GPT_TINY
from cluster.training.workloads.registry import BUILTINS, Builtin

REAL_DECODERS: dict[str, DecoderConfig] = {GPT_TINY.name: GPT_TINY}
"""The decoders real mode trains (:mod:`cluster.training.decoder`), by name."""


@dataclass(frozen=True)
class ModelRef:
    """A model as the user named it (``text``, printed as given), its kind, for a
    built-in its registry entry (``None`` for a workload file or an unknown name, which
    the workload build reads or refuses), and the shape of the decoder real mode trains
    for it (``None``: real mode trains no decoder of that name). Two are equal if named
    alike: the rest follows from the name."""

    text: str
    kind: ModelKind
    builtin: Builtin | None = field(compare=False)
    decoder: DecoderConfig | None = field(default=None, compare=False)

    def __str__(self) -> str:
        return self.text


def model_ref(text: str) -> ModelRef:
    """The model named ``text``, told apart and looked up once."""
    return ModelRef(text, ModelKind.of(text), BUILTINS.get(text), REAL_DECODERS.get(text))
