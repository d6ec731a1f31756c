"""The emulator against measured step times (``docs/fidelity.md``).

- :mod:`.mllog`: step times from MLPerf Training result logs, by a stated method;
- :mod:`.published`: the table of Graphcore's published runs derived from them, and each
  run as the emulator's :class:`~cluster.training.config.TrainConfig`;
- :mod:`.calibration`: the compute efficiency from one measured step time;
- :mod:`.validation`: every published run predicted from its model's IPU-POD16, and how
  the step grows between systems at equal work per IPU.
"""

from cluster.training.fidelity.calibration import Calibration, calibrate
from cluster.training.fidelity.mllog import RunSteps, parse_events, run_steps
from cluster.training.fidelity.published import PublishedStep, load_published, train_config
from cluster.training.fidelity.validation import Growth, Prediction, growths, predict

__all__ = ["Calibration", "Growth", "Prediction", "PublishedStep", "RunSteps", "calibrate",
           "growths", "load_published", "parse_events", "predict", "run_steps", "train_config"]
