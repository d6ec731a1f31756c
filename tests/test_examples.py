"""The example scripts run as their docstrings say: with the Python the package is installed
in. Each is run by a test (here, or beside what it shows), and without the package each
says in one line how to run it."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((ROOT / "examples").glob("*.py"))


def test_there_are_examples():
    assert {path.name for path in EXAMPLES} >= {"device_manager.py", "faults.py",
                                                 "real_allreduce.py"}


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_every_example_is_run_by_a_test_with_this_python(example):
    runs = [path.name for path in (ROOT / "tests").glob("test_*.py")
            if re.search(r'sys\.executable, str\(root / "examples" / "' + re.escape(example.name),
                         path.read_text())]
    assert runs, f"no test runs examples/{example.name} with sys.executable"


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_without_the_package_an_example_says_in_one_line_how_to_run_it(example, tmp_path):
    # -I -S: no site-packages, no PYTHONPATH: a Python the package is not installed in
    run = subprocess.run([sys.executable, "-I", "-S", str(example)], cwd=tmp_path,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr
    assert run.stdout == "" and run.stderr.count("\n") == 1, run.stderr
    assert run.stderr.startswith("error: cannot import ")
    assert f".venv/bin/python examples/{example.name}" in run.stderr
    assert "pip install -e ." in run.stderr and "Traceback" not in run.stderr


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda path: path.name)
def test_every_example_docstring_runs_it_with_the_virtualenvs_python(example):
    doc = example.read_text().split('"""')[1]
    assert f".venv/bin/python examples/{example.name}" in doc
    assert not re.search(r"^\s+python ", doc, re.M)  # not a bare `python` (any Python)


def test_the_real_allreduce_example_names_the_algorithm_auto_picks_on_its_default_topology():
    from cluster.model.presets import build_preset
    from gcl import plan

    doc = (ROOT / "examples" / "real_allreduce.py").read_text()
    claimed = re.search(r"on two servers (\w+)\)", doc)
    assert claimed, "the docstring no longer names the algorithm"
    count = int(re.search(r"standard_normal\(1 << (\d+)\)", doc).group(1))
    assert plan("allreduce", build_preset("dss8440x2"), 1 << count).algorithm == \
        claimed.group(1)
