"""Load a user's PyTorch model factory from a ``path/to/file.py:name`` spec.

The spec names a Python file and a callable in it (a function or class returning a
``torch.nn.Module``). The file is loaded as a module under a unique name, so two specs
from files of the same name never collide. Every mistake (no colon, no file, a syntax
error, a missing name, a factory that raises) is a one-line :class:`UserError`.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from cluster.errors import UserError, quoted

if TYPE_CHECKING:
    import torch

TORCH_EXTRA_HINT = "install the extra with `pip install -e '.[torch]'`"
_MODULE_NUMBERS = itertools.count()


def require_torch() -> ModuleType:
    """``import torch``, or a :class:`UserError` saying how to install the extra."""
    return require_module("torch")


def require_module(name: str) -> ModuleType:
    """Import ``name`` (torch, torchvision, onnx, ...), or a :class:`UserError` that names
    the missing package and the extra that brings it."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        raise UserError(
            f"{name} is not installed ({one_line(error)}): {TORCH_EXTRA_HINT}"
        ) from None


def a_type(value: object) -> str:
    """``'an int'``, ``'a list'``: the type of ``value`` with its article."""
    name = type(value).__name__
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def one_line(error: BaseException) -> str:
    """An exception's message on one line: ``ValueError: bad shape``."""
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def check_regular_file(path: Path, what: str, wanted: str) -> None:
    """A UserError unless ``path`` is a regular file (a FIFO would block the read; a name
    too long or with a NUL byte cannot even be looked up)."""
    try:
        if path.is_file():
            return
        problem = ("is a directory" if path.is_dir() else
                   "is not a regular file" if path.exists() else "does not exist")
    except (OSError, ValueError) as error:
        problem = f"cannot be looked up ({one_line(error)[:100]})"
    raise UserError(f"{what} {quoted(str(path))} {problem}: give {wanted}")


def split_spec(spec: str) -> tuple[Path, str]:
    """``file.py:name`` -> (path, name); the last colon splits, so a Windows drive works."""
    path_text, colon, name = spec.rpartition(":")
    if not colon or not path_text or not name:
        raise UserError(
            f"factory {quoted(spec)} is not path/to/file.py:name "
            "(a Python file and the function in it that returns a torch.nn.Module)"
        )
    return Path(path_text), name.strip()


def _load_file(path: Path) -> ModuleType:
    """Run a Python file as a fresh module; any failure is a UserError naming the file."""
    check_regular_file(path, "factory file", "a Python file")
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise UserError(
            f"cannot read factory file {quoted(str(path))}: {one_line(error)}"
        ) from None
    module_name = f"_ipupod_factory_{next(_MODULE_NUMBERS)}_{path.stem}"
    spec = importlib.util.spec_from_loader(module_name, loader=None, origin=str(path))
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    module.__file__ = str(path)
    sys.modules[module_name] = module  # dataclasses and pickling look the module up
    try:
        exec(compile(source, str(path), "exec"), module.__dict__)
    except SyntaxError as error:
        del sys.modules[module_name]
        raise UserError(
            f"factory file {quoted(str(path))} has a syntax error at line {error.lineno}: "
            f"{error.msg}"
        ) from None
    except Exception as error:  # noqa: BLE001 - the user's code: any failure is reported
        del sys.modules[module_name]
        raise UserError(
            f"loading factory file {quoted(str(path))} raised {one_line(error)}"
        ) from None
    return module


def load_factory(spec: str) -> Callable[..., Any]:
    """The callable named by ``path/to/file.py:name``, loaded from that file."""
    path, name = split_spec(spec)
    module = _load_file(path)
    if not hasattr(module, name):
        raise UserError(f"factory file {quoted(str(path))} has no {quoted(name)}")
    factory = getattr(module, name)
    if not callable(factory):
        raise UserError(
            f"{quoted(name)} in {quoted(str(path))} is {a_type(factory)}, "
            "not a function returning a torch.nn.Module"
        )
    return factory


def build_module(spec: str) -> torch.nn.Module:
    """Call the factory named by ``spec`` with no arguments and check it built a module
    (a factory returning ``(module, sample)`` gives its module)."""
    return build_module_and_sample(spec)[0]


def build_module_and_sample(spec: str) -> tuple[torch.nn.Module, tuple[Any, ...] | None]:
    """The module the factory builds, and the sample input it returns beside it, if any:
    a factory returns a module, or ``(module, sample)`` where ``sample`` is a tensor or a
    tuple of the forward's positional arguments."""
    torch_module = require_torch()
    factory = load_factory(spec)
    try:
        built = factory()
    except Exception as error:  # noqa: BLE001 - the user's code: any failure is reported
        raise UserError(f"factory {spec} raised {one_line(error)}") from None
    sample: tuple[Any, ...] | None = None
    if isinstance(built, tuple) and len(built) == 2:
        built, given = built
        sample = given if isinstance(given, tuple) else (given,)
        if not sample or not all(isinstance(t, torch_module.Tensor) for t in sample):
            raise UserError(f"factory {spec} returned (module, sample) whose sample is not "
                            "a tensor or a tuple of tensors")
    if not isinstance(built, torch_module.nn.Module):
        raise UserError(
            f"factory {spec} returned {a_type(built)}, not a torch.nn.Module "
            "(or a (module, sample input) pair)"
        )
    return built, sample
