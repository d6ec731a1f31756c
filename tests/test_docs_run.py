"""The docs say what the product does, and they stay true: every transcript in README.md and
docs/*.md (a ```text block whose first line is `$ ipupod ...`) is run and must print what
the block shows (the wall-clock columns aside), and every ```sh block marked
`<!-- runnable -->` must run without error."""

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)
ROW = re.compile(r"^\s+\d")  # a bench table row
WALLS = (8, 13)  # a bench row's fields that are wall seconds: out of place, in place


def blocks(kind: str) -> list[tuple[str, str]]:
    """(where, body) of the fenced blocks of ``kind`` ("transcript" or "runnable")."""
    found = []
    for path in DOCS:
        text = path.read_text()
        for match in FENCE.finditer(text):
            language, body = match.group(1), match.group(2)
            line = text[:match.start()].count("\n") + 1
            where = f"{path.relative_to(ROOT)}:{line}"
            before = text[:match.start()].rstrip().splitlines()[-1:] or [""]
            transcript = language == "text" and body.startswith("$ ipupod ")
            runnable = language == "sh" and before[0] == "<!-- runnable -->"
            served = language == "sh" and before[0] == "<!-- runnable with a service -->"
            if ((kind == "transcript" and transcript) or (kind == "runnable" and runnable)
                    or (kind == "served" and served)):
                found.append((where, body))
    return found


def environment() -> dict[str, str]:
    """This interpreter's scripts (ipupod) first on PATH, the repository importable."""
    return {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}"
            f"{os.environ.get('PATH', '')}", "PYTHONPATH": str(ROOT)}


# Programs a runnable block may call that are not Python packages, and how to get each.
PROGRAMS = {"dot": "Graphviz's dot (Debian package graphviz)",
            "prometheus": "Prometheus (Debian package prometheus)"}
COMMAND_WORD = re.compile(r"(?:^|[|;&]|\$\()\s*(\w[\w.-]*)", re.M)


def missing_programs(body: str) -> list[str]:
    """What the block runs that this machine lacks, as install hints."""
    called = set(COMMAND_WORD.findall(body))
    return [hint for program, hint in PROGRAMS.items()
            if program in called and shutil.which(program) is None]


def without_wall(text: str) -> list[str]:
    return [" ".join(f for i, f in enumerate(line.split()) if i not in WALLS)
            if ROW.match(line) else line.rstrip() for line in text.strip("\n").splitlines()]


def test_the_docs_have_transcripts_and_runnable_blocks():
    assert len(blocks("transcript")) >= 2 and len(blocks("runnable")) >= 1
    assert len(blocks("served")) >= 1


@pytest.mark.parametrize("where, body", blocks("transcript"))
def test_every_transcript_prints_what_it_shows(where, body):
    command, _, shown = body.partition("\n")
    argv = shlex.split(command[2:])
    run = subprocess.run(argv, cwd=ROOT, env=environment(), capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, f"{where}: {run.stderr[-1000:]}"
    assert without_wall(run.stdout) == without_wall(shown), where


@pytest.mark.parametrize("where, body", blocks("runnable"))
def test_every_runnable_block_runs(where, body, tmp_path):
    if missing := missing_programs(body):
        pytest.skip(f"{where} runs {', '.join(missing)}: install it, or run .ci/run as root "
                    "(it installs both)")
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    run = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=tmp_path,
                         env=environment(), capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{where}: {run.stderr[-1000:]}"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """`ipupod serve` as README.md starts it (on any free port, a pod16 to spare this
    machine), and a folder whose `.venv/bin` is this interpreter's, as the docs assume."""
    folder = tmp_path_factory.mktemp("served")
    (folder / ".venv").mkdir()
    (folder / ".venv" / "bin").symlink_to(Path(sys.executable).parent)
    token = folder / "token"
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("ipupod")), "serve", "--topology", "pod16",
         "--port", "0", "--metrics-port", "-1", "--token-file", str(token)],
        cwd=folder, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True)
    try:
        line = server.stdout.readline() if server.stdout else ""
        port = re.search(r"on 127\.0\.0\.1:(\d+)", line)
        assert port, f"ipupod serve said {line!r}"
        yield folder, {**environment(), "IPUOF_VIPU_API_PORT": port.group(1),
                       "IPUPOD_TOKEN_FILE": str(token)}
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            server.kill()


@pytest.mark.parametrize("where, body", blocks("served"))
def test_every_block_for_a_running_service_runs(where, body, served):
    folder, env = served
    run = subprocess.run(["bash", "-euo", "pipefail", "-c", body], cwd=folder, env=env,
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, f"{where}: {run.stderr[-1000:]}"
    assert "Traceback" not in run.stderr
