"""Import speed: wall time of ``ipupod workload import`` on torchvision's ResNet-50, against
a named peer.

Times whole processes, from exec to exit, of

  (a) ``ipupod workload import examples/models/factories.py:resnet50 --input-shape
      1,3,224,224 --out ...`` (the PyTorch front end: build the model, one traced forward
      pass, grouping, the YAML file);
  (b) ``ipupod workload import resnet50.onnx --out ...`` on the same network exported once
      before the timing (``torch.onnx.export(..., dynamo=True, optimize=False)``), and
  (c) the peer: the same Python building the same model and running one plain forward
      pass (``import torch, torchvision``, ``resnet50(weights=None)``, a 1x3x224x224 input):
      the least an import that runs the network can cost,

alternated in each repeat (a, b, c, a, b, c, ...) so that machine noise hits all alike.
Goal: (a) under 30 s (issue 29). Needs the extra: ``pip install -e '.[torch]'``.

    .venv/bin/python benchmarks/import_speed.py              # a table
    .venv/bin/python benchmarks/import_speed.py --json       # the same as JSON
    .venv/bin/python benchmarks/import_speed.py --repeats 5
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FACTORY = f"{ROOT / 'examples' / 'models' / 'factories.py'}:resnet50"
SHAPE = "1,3,224,224"
GOAL_SECONDS = 30.0
PEER_CODE = ("import torch, torchvision\n"
             "model = torchvision.models.resnet50(weights=None)\n"
             "model(torch.randn(1, 3, 224, 224))\n")
EXPORT_CODE = ("import sys, torch, torchvision\n"
               "model = torchvision.models.resnet50(weights=None).eval()\n"
               "torch.onnx.export(model, (torch.randn(1, 3, 224, 224),), sys.argv[1],\n"
               "                  dynamo=True, optimize=False, verbose=False)\n")


def ipupod(*args: str) -> list[str]:
    """The argv running ``ipupod args`` with this Python."""
    return [sys.executable, "-c", "from cluster.cli.main import main; main()", *args]


def wall_seconds(argv: list[str]) -> float:
    """Wall seconds of one whole process; a failure stops the benchmark with its error."""
    start = time.perf_counter()
    run = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if run.returncode != 0:
        sys.exit(f"error: {argv[2:4]} failed: {run.stderr.strip().splitlines()[-1:]}")
    return elapsed


def measure(repeats: int) -> dict[str, list[float]]:
    """Wall seconds of the three processes, ``repeats`` times each, alternated."""
    with tempfile.TemporaryDirectory() as folder:
        onnx_file = str(Path(folder) / "resnet50.onnx")
        subprocess.run([sys.executable, "-c", EXPORT_CODE, onnx_file], check=True,
                       capture_output=True)
        cases = {
            "workload import (PyTorch factory)": ipupod(
                "workload", "import", FACTORY, "--input-shape", SHAPE,
                "--out", str(Path(folder) / "a.yaml")),
            "workload import (ONNX file)": ipupod(
                "workload", "import", onnx_file, "--out", str(Path(folder) / "b.yaml")),
            "peer: build + one forward pass": [sys.executable, "-c", PEER_CODE],
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for _ in range(repeats):
            for name, argv in cases.items():
                times[name].append(wall_seconds(argv))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each process")
    parser.add_argument("--json", action="store_true", help="print JSON, not a table")
    options = parser.parse_args()
    if not 1 <= options.repeats <= 20:
        sys.exit("error: --repeats runs from 1 to 20")
    times = measure(options.repeats)
    medians = {name: statistics.median(values) for name, values in times.items()}
    pytorch = medians["workload import (PyTorch factory)"]
    if options.json:
        print(json.dumps({"seconds": times, "median_seconds": medians,
                          "goal_seconds": GOAL_SECONDS, "met": pytorch < GOAL_SECONDS}))
        return
    print(f"{'process (torchvision ResNet-50, whole process)':<48} {'median (s)':>10}  runs (s)")
    for name, values in times.items():
        runs = " ".join(f"{v:.1f}" for v in values)
        print(f"{name:<48} {medians[name]:>10.1f}  {runs}")
    verdict = "met" if pytorch < GOAL_SECONDS else "MISSED"
    print(f"goal: the PyTorch import under {GOAL_SECONDS:.0f} s: {verdict}")


if __name__ == "__main__":
    main()
