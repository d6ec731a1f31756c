"""What an import tells the user beside the workload: warnings, each one line.

The importers count what they meet and say what they could not: ops of unknown FLOPs,
parameters the traced forward never used (a branch the input did not take), a graph made
for inference (batch norms folded into convolutions), a number format the IPU does not
have. Each is an :class:`ImportNote` warning; ``ipupod workload import`` prints every one
as ``warning: ...`` on standard error, a program can catch or filter them by class.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cluster.model.units import plural


class ImportNote(UserWarning):
    """Something the import could not count, or counted differently from the model."""


class UncountedOpsWarning(ImportNote):
    """Ops whose FLOPs the importer does not know: counted as zero, named here."""


class UnusedParametersWarning(ImportNote):
    """Modules whose parameters the traced forward never used: not in the workload."""


class InferenceGraphWarning(ImportNote):
    """An ONNX graph exported for inference: batch norms folded into convolutions."""


class NumberFormatWarning(ImportNote):
    """A number format the IPU does not have, priced as the nearest one it has."""


def uncounted_message(uncounted: dict[str, int]) -> str:
    """One line naming the ops not counted and how often each ran."""
    listed = ", ".join(f"{op} (x{times})" for op, times in sorted(uncounted.items()))
    return f"FLOPs not counted (taken as 0) for ops: {listed}"


def unused_message(modules: Sequence[tuple[str, int]]) -> str:
    """One line naming the modules (path, parameters) the traced forward did not use."""
    total = sum(count for _, count in modules)
    verb = "was" if len(modules) == 1 else "were"
    shown = ", ".join(name for name, _ in modules[:10])
    more = f" and {len(modules) - 10} more" if len(modules) > 10 else ""
    return (f"{plural(len(modules), 'module')}, {plural(total, 'parameter')}, {verb} not used "
            f"by the traced forward: {shown}{more} (a branch of data-dependent control flow "
            "this input did not take, or modules the forward never calls); they are not in "
            "the workload")


FOLDED_MESSAGE = (
    "{file} is an inference graph: its batch norms were folded into the convolutions (the "
    "legacy exporter, or optimize=True), so they are missing from the layers, parameters "
    "and FLOPs; export a training graph with torch.onnx.export(model, (sample,), "
    "'model.onnx', dynamo=True, optimize=False)")

FORMAT_PRICED_AS = {"bfloat16": "float16", "float64": "float32"}
"""Number formats the IPU has not (IEEE half and single precision only): priced as the
format of the same width (bfloat16) or as its widest (float64, bytes halved)."""


def format_message(found: str) -> str:
    """One line saying a model's number format is priced as another."""
    priced = FORMAT_PRICED_AS[found]
    return (f"the model runs in {found}, which the IPU does not have: priced as {priced} "
            f"(weights, activations and arithmetic); convert the model to {priced} to "
            "silence this")


def unused_modules(module: Any, unused: set[int]) -> list[tuple[str, int]]:
    """The outermost modules of ``module`` (a ``torch.nn.Module``) all of whose parameters
    are in ``unused`` (their ids), with their parameter counts, in definition order."""
    found: list[tuple[str, int]] = []
    for path, child in module.named_modules():
        if any(path.startswith(f"{outer}.") for outer, _ in found) or (found and not path):
            continue
        parameters = list(child.parameters())
        if parameters and all(id(p) in unused for p in parameters):
            found.append((path or type(module).__name__, sum(p.numel() for p in parameters)))
    return found
