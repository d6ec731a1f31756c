"""Which settings real mode trains a decoder with, refused here once, before anything runs.

Its engine runs replicas of one IPU or of one tensor group (1-D or 2-D), keeps every activation
(no recomputation) and every weight on the IPUs (no phased execution), and has no
experts to spread.
"""

from __future__ import annotations

from typing import Protocol

from cluster.errors import SettingError
from cluster.training.model_ref import ModelRef
from cluster.training.tensor_parallel.layout import TensorParallel
from gcl.modes import Mode


class RunSettings(Protocol):
    """The settings of a run this checks (a ``TrainConfig``'s)."""

    @property
    def mode(self) -> Mode: ...
    @property
    def model(self) -> ModelRef: ...
    @property
    def tensor_parallel(self) -> TensorParallel: ...
    @property
    def ipus_per_replica(self) -> int: ...
    @property
    def recompute(self) -> bool | None: ...
    @property
    def phased(self) -> bool: ...
    @property
    def final_stage_on_first_ipu(self) -> bool: ...


def check_real_decoder(config: RunSettings) -> None:
    """A SettingError naming the setting to change if ``config`` trains a decoder in real
    mode in a way its engine does not."""
    if config.mode != Mode.REAL or config.model.decoder is None:
        return
    layout = config.tensor_parallel
    if config.ipus_per_replica != layout.size:
        raise SettingError("ipus_per_replica", "{mode} real trains {model} {name} on replicas "
                           "of one IPU or of one tensor group: give {ipus_per_replica} the "
                           "group's IPUs ({tensor_parallel} T or T1xT2: T or T1 x T2), not "
                           "{given} with {tensor_parallel} {layout}", name=config.model.text,
                           given=config.ipus_per_replica, layout=str(layout))
    if config.recompute or config.phased or config.final_stage_on_first_ipu:
        raise SettingError("recompute" if config.recompute else "phased",
                           "{mode} real keeps {model} {name}'s activations and weights on "
                           "the IPUs: leave out {recompute}, {phased} and "
                           "{final_stage_on_first_ipu}", name=config.model.text)
