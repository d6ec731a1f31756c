"""Train a small PyTorch CNN on two emulated DSS 8440 servers, the way PopTorch trains on IPUs.

    .venv/bin/python examples/poptorch_style_training.py

The model computes its own loss in ``forward(images, labels)``, as a PopTorch training model
does, and marks its second half as pipeline stage 1 with ``BeginBlock``: each replica spans
two IPUs. ``Options`` asks for 4 replicas (two per server), 2 micro-batches accumulated per
step and 2 steps per call. Each call streams the combined batch to the replicas' cards,
which run forward and backward in PyTorch, average their gradients with GCL's allreduce over
the emulated IPU-Links, PCIe and InfiniBand, and each step their own SGD optimiser. At the
end the weights are copied back to the host model and compared with the same training in
this process on the whole batch (float32: they agree to about 1e-7).

It imports the installed package and torch: run it with the Python of the virtualenv the
package is installed in, with the extra (``pip install -e '.[torch]'``).
"""

from __future__ import annotations

import copy
import sys
from typing import Any

try:
    import numpy as np

    from cluster.cli.output import errors_as_lines
    from cluster.training.importers.torch_factory import require_torch
    from cluster.training.torch_replicas import BeginBlock, Options, training_model
except ModuleNotFoundError as missing:  # not the Python the package is installed in
    print(f"error: cannot import {missing.name!r}: run the examples with the Python of the "
          "virtualenv the package is installed in (pip install -e .), e.g. "
          ".venv/bin/python examples/poptorch_style_training.py", file=sys.stderr)
    sys.exit(2)

CALLS = 4
SAMPLES_PER_CALL = 2 * 4 * 2 * 8  # device iterations x replicas x accumulation x micro-batch


def build_model(torch: Any) -> Any:
    """A two-stage CNN for 3x16x16 images in 10 classes that returns ``(logits, loss)``."""
    nn = torch.nn

    class SmallCnn(nn.Module):  # type: ignore[name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(),
                                          nn.MaxPool2d(2))
            self.head = BeginBlock(nn.Sequential(nn.Flatten(), nn.Linear(8 * 8 * 8, 10)),
                                   ipu_id=1)  # stage 1, on each replica's second IPU
            self.loss = nn.CrossEntropyLoss()

        def forward(self, images: Any, labels: Any = None) -> Any:
            logits = self.head(self.features(images))
            return logits if labels is None else (logits, self.loss(logits, labels))

    torch.manual_seed(0)
    return SmallCnn()


def main() -> None:
    """Train for a few calls, print each loss and step time, check against one process."""
    torch = require_torch()
    model = build_model(torch)
    reference = copy.deepcopy(model)
    options = Options().replicationFactor(4).deviceIterations(2).topology("dss8440x2")
    options.Training.gradientAccumulation(2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = np.random.default_rng(0)
    batches = [(torch.from_numpy(data.standard_normal((SAMPLES_PER_CALL, 3, 16, 16),
                                                      dtype=np.float32)),
                torch.from_numpy(data.integers(0, 10, SAMPLES_PER_CALL)))
               for _ in range(CALLS)]
    with training_model(model, options, optimizer) as poptorch_model:
        for call, (images, labels) in enumerate(batches):
            loss = poptorch_model(images, labels)
            step = poptorch_model.last_step
            print(f"call {call}: loss {float(loss):.4f}, a step "
                  f"{step['sim_seconds'] * 1e3:.3f} ms simulated, "
                  f"{step['wall_seconds'] * 1e3:.0f} ms of wall time here, replicas "
                  f"identical: {step['replicas_identical']}")
    # detached: the host model holds the trained weights; train the same in one process
    check = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    for images, labels in batches:
        for i in range(2):  # a step per device iteration, on its whole batch
            part = slice(i * SAMPLES_PER_CALL // 2, (i + 1) * SAMPLES_PER_CALL // 2)
            check.zero_grad()
            reference(images[part], labels[part])[1].backward()
            check.step()
    trained = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    expected = torch.cat([p.detach().reshape(-1) for p in reference.parameters()])
    difference = float((trained - expected).abs().max() / expected.abs().max())
    print(f"weights against single-process training: relative difference {difference:.1e}")


if __name__ == "__main__":
    with errors_as_lines():
        main()
