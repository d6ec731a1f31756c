"""Which front end reads a model: ``file.py:factory`` is PyTorch, anything else ONNX.

:func:`import_model` is what ``ipupod workload import`` calls; :func:`write_workload`
writes the file atomically (a temporary file beside it, renamed), so a failed import or
write never leaves half a workload file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from cluster.errors import SettingError, UserError, quoted
from cluster.training.importers.torch_factory import build_module_and_sample, split_spec
from cluster.training.importers.torch_import import check_input_shape
from cluster.training.workloads.layers import Workload
from cluster.training.workloads.workload_yaml import MAX_NAME_CHARS, to_yaml


def is_factory_spec(model: str) -> bool:
    """``path/to/file.py:name`` (a PyTorch factory) rather than an ONNX file."""
    path_text, colon, _ = model.rpartition(":")
    return bool(colon) and path_text.endswith(".py")


def default_name(model: str) -> str:
    """The workload's name when none is given: the factory's name or the file's stem."""
    name = split_spec(model)[1] if is_factory_spec(model) else Path(model).stem
    shown = "".join(c for c in name if c.isprintable())[:MAX_NAME_CHARS]
    return shown or "imported"


def import_model(model: str, input_shape: tuple[int, ...] | None, name: str | None = None,
                 strict: bool = False, integer_input: bool = False) -> Workload:
    """The workload of ``model``: a PyTorch factory (``file.py:name``; ``input_shape``, or
    the sample input the factory returns beside its module) or an ONNX file
    (``input_shape`` fixes a symbolic batch)."""
    title = name or default_name(model)
    if input_shape is not None:  # a zero or a typo: refused before the factory is loaded
        input_shape = check_input_shape(input_shape)
    if not is_factory_spec(model) and model.lower().endswith(".py"):
        raise UserError(f"{quoted(model)} is a Python file: name the function in it that "
                        f"returns the model, as {model}:FACTORY")
    if is_factory_spec(model):
        module, sample = build_module_and_sample(model)
        if input_shape is None and sample is None:
            raise SettingError("input_shape", "a PyTorch factory needs {input_shape}: the "
                               "shape of one input, batch first (e.g. 1,3,224,224), unless it "
                               "returns (module, sample input)")
        from cluster.training.importers.torch_import import import_torch_module

        return import_torch_module(module, input_shape, title, strict, integer_input,
                                   None if input_shape is not None else sample)
    from cluster.training.importers.onnx_import import import_onnx_file

    return import_onnx_file(model, title, input_shape, strict)


def write_workload(workload: Workload, out: Path, comment: str) -> None:
    """Write ``workload`` as YAML to ``out`` atomically; a UserError if it cannot be."""
    text = to_yaml(workload, comment)
    folder = out.parent if str(out.parent) else Path(".")
    if not folder.is_dir():
        raise UserError(f"cannot write {quoted(str(out))}: the folder {quoted(str(folder))} "
                        "does not exist")
    try:
        descriptor, temporary = tempfile.mkstemp(prefix=f".{out.name}-", suffix=".tmp",
                                                 dir=folder)
    except OSError as error:
        raise UserError(f"cannot write {quoted(str(out))}: {error.strerror}") from None
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(temporary, 0o644)
        os.replace(temporary, out)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        raise UserError(f"cannot write {quoted(str(out))}: {error.strerror}") from None
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
