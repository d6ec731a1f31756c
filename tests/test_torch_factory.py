"""Factory specs (``file.py:name``): each mistake is one UserError naming the file or the
factory and what went wrong; a good spec loads the callable from a fresh module."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from cluster.errors import UserError
from cluster.training.importers.torch_factory import (
    build_module,
    build_module_and_sample,
    load_factory,
    split_spec,
)
from tests.extras import NEEDS_TORCH_EXTRA


def write(tmp_path: Path, text: str, name: str = "model.py") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_good_spec_loads_the_named_callable(tmp_path: Path) -> None:
    path = write(tmp_path, "def make():\n    return 42\n")
    assert load_factory(f"{path}:make")() == 42


def test_two_files_of_the_same_name_load_as_different_modules(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = write(tmp_path / "a", "def make():\n    return 1\n")
    second = write(tmp_path / "b", "def make():\n    return 2\n")
    assert load_factory(f"{first}:make")() == 1
    assert load_factory(f"{second}:make")() == 2


def test_the_last_colon_splits_the_spec() -> None:
    assert split_spec("C:/models/net.py:make") == (Path("C:/models/net.py"), "make")


@pytest.mark.parametrize("spec", ["model.py", ":make", "model.py:", ""])
def test_a_spec_without_file_and_name_is_refused(spec: str) -> None:
    with pytest.raises(UserError, match="path/to/file.py:name"):
        load_factory(spec)


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"nope\.py' does not exist"):
        load_factory(f"{tmp_path / 'nope.py'}:make")


def test_a_directory_is_not_a_factory_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="is a directory"):
        load_factory(f"{tmp_path}:make")


def test_an_unreadable_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "model.py"
    path.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(UserError, match="cannot read factory file"):
        load_factory(f"{path}:make")


def test_a_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "x = 1\ndef make(:\n")
    with pytest.raises(UserError, match=r"model\.py' has a syntax error at line 2"):
        load_factory(f"{path}:make")


def test_an_exception_while_loading_names_the_file_and_the_exception(tmp_path: Path) -> None:
    path = write(tmp_path, "raise RuntimeError('no GPU\\n here')\n")
    with pytest.raises(UserError, match=r"model\.py' raised RuntimeError: no GPU here$"):
        load_factory(f"{path}:make")


def test_a_missing_name_is_named(tmp_path: Path) -> None:
    path = write(tmp_path, "def make():\n    return 1\n")
    with pytest.raises(UserError, match="has no 'build'"):
        load_factory(f"{path}:build")


def test_a_name_that_is_not_callable_is_refused(tmp_path: Path) -> None:
    path = write(tmp_path, "make = 3\n")
    with pytest.raises(UserError, match="'make' in .* is an int, not a function"):
        load_factory(f"{path}:make")


def test_a_factory_that_raises_is_named_with_its_exception(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason=NEEDS_TORCH_EXTRA)
    path = write(tmp_path, "def make():\n    raise ValueError('bad width')\n")
    with pytest.raises(UserError, match=r"model\.py:make raised ValueError: bad width$"):
        build_module(f"{path}:make")


def test_a_factory_that_returns_no_module_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason=NEEDS_TORCH_EXTRA)
    path = write(tmp_path, "def make():\n    return [1, 2]\n")
    with pytest.raises(UserError, match="returned a list, not a torch.nn.Module"):
        build_module(f"{path}:make")


def test_a_factory_that_returns_a_module_builds_it(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason=NEEDS_TORCH_EXTRA)
    path = write(tmp_path, "import torch\ndef make():\n    return torch.nn.Linear(3, 2)\n")
    assert isinstance(build_module(f"{path}:make"), torch.nn.Linear)


def test_without_torch_the_message_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # what an absent package looks like
    with pytest.raises(UserError, match=r"torch is not installed .*pip install -e '\.\[torch\]'"):
        build_module("model.py:make")


def test_a_factory_may_return_a_module_and_its_sample(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason=NEEDS_TORCH_EXTRA)
    path = write(tmp_path, "import torch\ndef make():\n"
                           "    return torch.nn.Linear(3, 2), torch.ones(1, 3)\n")
    module, sample = build_module_and_sample(f"{path}:make")
    assert isinstance(module, torch.nn.Linear) and sample is not None
    assert sample[0].shape == (1, 3)
    assert isinstance(build_module(f"{path}:make"), torch.nn.Linear)


def test_a_sample_that_is_not_tensors_is_refused(tmp_path: Path) -> None:
    pytest.importorskip("torch", reason=NEEDS_TORCH_EXTRA)
    path = write(tmp_path, "import torch\ndef make():\n    return torch.nn.Linear(3, 2), [1]\n")
    with pytest.raises(UserError, match="sample is not a tensor or a tuple of tensors"):
        build_module(f"{path}:make")
