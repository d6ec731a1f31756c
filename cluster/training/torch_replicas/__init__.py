"""PyTorch models trained data-parallel on the emulated POD's card actors (real mode).

``ipupod train --torch file.py:factory`` (:mod:`.run`) and a PopTorch-shaped API
(:mod:`.poptorch_style`): ``Options``, ``training_model`` and ``BeginBlock``, re-exported
here. torch is imported only when a model is built or a replica runs, so importing this
package needs no torch (``pip install -e '.[torch]'`` brings it).
"""

from cluster.training.torch_replicas.poptorch_style import (
    BeginBlock,
    Options,
    TrainingModel,
    training_model,
    trainingModel,
)

__all__ = ["BeginBlock", "Options", "TrainingModel", "trainingModel", "training_model"]
