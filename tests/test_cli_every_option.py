"""Every command and every option of ``ipupod``, fed hostile values: huge, negative and
4,300-digit numbers, NaN and infinities, unicode and control characters, empty and very long
strings, and where a path may go an empty file, a binary file, a directory, a missing path,
a FIFO with no writer and a path under a file.

Whatever the input, the command ends with exit status 0, 1 or 2, prints no traceback, says
what went wrong in one ``error:`` (or click's ``Error:``) line, and does not hang. The
commands and options are found by walking the click commands, so a new one is covered
without editing this file.

The commands run in this process. Those that talk to a service get an address where nothing
listens; Ray is never started: ``ray.init`` is replaced by a stand-in that stops the command
where it would start Ray, and an input that gets that far is one the command accepted
(``serve`` and real mode check everything they can before it).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import click
import pytest
from click.testing import CliRunner
from hypothesis import event, given, settings
from hypothesis import strategies as st

from cluster.cli.main import cli, main

DEADLINE_SECONDS = 60  # an example still running after this long has hung

EXPECTED_COMMANDS = {
    "bench", "calibrate", "chakra show", "create partition", "devices", "fault cut",
    "fault degrade", "fault heal", "fault kill", "fault list", "links", "list partitions",
    "monitor", "partition create", "plan", "partition list", "partition remove", "partition show",
    "pipeline-report", "remove partition", "replay", "scaling-report", "serve", "show partition",
    "status", "topology list", "topology show", "trace show", "train", "train-report", "user add",
    "user list", "user remove", "user rotate", "validate", "workload import",
}
SERVICE = ["--host=127.0.0.1", "--port={refused}", "--token-file={token}"]
BASE: dict[str, list[str]] = {  # what keeps each command fast, off Ray and off real services
    "bench": ["--minbytes=1K", "--maxbytes=1K"],
    "calibrate": ["--measured-step-ms=10", "--model=resnet50", "--micro-batch=1",
                  "--steps=1"],
    "train": ["--mode=phantom", "--steps=1"],
    "plan": ["--model=gpt3-125m", "--topology=pod16", "--global-batch=4"],
    "train-report": ["--servers=1", "--real-up-to=0", "--steps=1", "--out={out}"],
    "pipeline-report": ["--ipus-per-replica=2", "--schedules=1f1b", "--micro-batches=4",
                        "--model=mlp", "--out={out}"],
    "scaling-report": ["--topologies=pod16", "--model=mlp", "--out={out}"],
    "serve": ["--port=0", "--metrics-port=-1"],
    "monitor": [*SERVICE, "--count=1", "--interval=0.1"],
    "workload import": ["--out={out}.yaml"],
}
ARGUMENTS = {"collective": "allreduce", "name": "p", "card": "s0.card0", "link": "s0.card0.ipu0",
             "spec": "pod16",
             "trace": str(Path(__file__).resolve().parent.parent / "examples" / "chakra" / "step")}

NUMBERS = st.sampled_from([
    "0", "-0", "-1", "1.5", str(2**31), str(2**63), str(10**30), f"-{10**30}", "9" * 4301,
    "-" + "9" * 4301, "1e308", "1e309", "-1e309", "1e-320", "nan", "-nan", "inf", "-inf",
    "٣", "²", "0x10", "1_000", " 1 ", "１",
])
STRINGS = st.one_of(
    st.text(max_size=16).filter(lambda s: not s.startswith(("/", "~")) and ".." not in s),
    st.sampled_from(["", " ", "\x00", "a\x00b", "\x1b[2J", "\n", "\u202e", "x" * 5000,
                     "é" * 400, "1,,2", ",", "-", "--", "all", "consecutive:0", "auto"]),
)
PLACES = ["empty", "binary", "directory", "directory.yaml", "missing", "missing.yaml", "fifo",
          "under-a-file"]


def _refill(places: dict[str, str]) -> None:
    """The hostile paths as :func:`places` made them, in an empty working folder: a
    command's output (``--out``, ``--trace``) is not a later example's input (a trace
    written as ``1.5`` then read as ``--model=1.5`` made the run depend on its order)."""
    for name in [*PLACES, "work"]:
        path = Path(places[name])
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
    for name in ("directory", "directory.yaml", "work"):
        Path(places[name]).mkdir()
    os.mkfifo(places["fifo"])  # no writer: opening it to read blocks
    Path(places["empty"]).write_bytes(b"")
    Path(places["binary"]).write_bytes(bytes(range(256)) * 8)
    os.chdir(places["work"])


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Hostile paths, a token file, a port where nothing listens; the commands run in a
    scratch folder (a report's ``--out ''`` is the working directory) with the service's
    address pointing at that port, and ``ray.init`` refusing."""
    root = tmp_path_factory.mktemp("hostile")
    (root / "token").write_text("a-token\n")
    with socket.socket() as probe:  # bound, then closed: nothing listens there
        probe.bind(("127.0.0.1", 0))
        refused = probe.getsockname()[1]
    state = root / "state"
    state.mkdir()
    (state / f"token-{refused}").write_text("a-token\n")
    named = {name: str(root / name) for name in PLACES}
    named["under-a-file"] = str(root / "empty" / "x.yaml")
    named.update(token=str(root / "token"), refused=str(refused), out=str(root / "report"),
                 work=str(root / "work"))
    with pytest.MonkeyPatch.context() as patch, \
            mock.patch("ray.init", side_effect=WouldStartRay), \
            mock.patch("ray.is_initialized", return_value=False):
        patch.chdir(root)  # given back after the module; _refill moves into root / "work"
        _refill(named)
        patch.setenv("IPUOF_VIPU_API_HOST", "127.0.0.1")
        patch.setenv("IPUOF_VIPU_API_PORT", str(refused))
        patch.setenv("IPUPOD_STATE_DIR", str(state))
        patch.delenv("IPUPOD_TOKEN_FILE", raising=False)
        patch.delenv("RAY_ADDRESS", raising=False)
        previous = signal.signal(signal.SIGALRM, _hung)
        try:
            yield named
        finally:
            signal.signal(signal.SIGALRM, previous)


class WouldStartRay(BaseException):
    """Raised where the command would start Ray: the input got past every check."""


class Hung(BaseException):
    """Raised when an example runs past ``DEADLINE_SECONDS``."""


def _hung(*_: object) -> None:
    raise Hung


def leaf_commands() -> dict[str, click.Command]:
    """Every command that runs (not a group), by its words: ``"partition create"``."""
    found: dict[str, click.Command] = {}

    def walk(command: click.Command, words: list[str]) -> None:
        if isinstance(command, click.Group):
            context = click.Context(command)
            for name in command.list_commands(context):
                sub = command.get_command(context, name)
                assert sub is not None, (words, name)
                walk(sub, [*words, name])
        else:
            found[" ".join(words)] = command

    walk(cli, [])
    return found


COMMANDS = leaf_commands()


def _is_flag(param: click.Parameter) -> bool:
    """Whether ``param`` is switched on or off rather than given a value."""
    return isinstance(param, click.Option) and bool(param.is_flag or param.count)


def _targets() -> list[tuple[str, str | None]]:
    """(command, parameter) for every parameter that takes a value; (command, None) for a
    command that takes none, so it still runs once."""
    targets: list[tuple[str, str | None]] = []
    for words, command in sorted(COMMANDS.items()):
        valued = [p.name for p in command.params if not _is_flag(p) and p.name]
        targets += [(words, name) for name in valued] or [(words, None)]
    return targets


def _value(param: click.Parameter, places: dict[str, str]) -> st.SearchStrategy[str]:
    """Hostile values for ``param``: numbers, strings and paths for any, and for a choice
    its valid values too (so one hostile value meets many valid neighbours)."""
    hostile = st.one_of(NUMBERS, STRINGS, st.sampled_from(PLACES).map(places.__getitem__))
    if isinstance(param.type, click.Choice):
        return st.one_of(hostile, st.sampled_from([str(c) for c in param.type.choices]))
    return hostile


def _argv(words: str, options: dict[str, str], arguments: dict[str, str],
          flags: list[str]) -> list[str]:
    """``ipupod WORDS --option=value ... FLAGS -- ARGUMENTS``: values as one word each (a
    value that starts with a dash stays a value), the arguments after ``--``."""
    params = {p.name: p for p in COMMANDS[words].params}
    given = [f"{_longest(params[name])}={value}" for name, value in options.items()]
    return [*words.split(), *given, *flags, "--", *arguments.values()]


def _base(words: str, places: dict[str, str]) -> dict[str, str]:
    """The command's safe options, by parameter name, placeholders filled."""
    by_option = {opt: p.name for p in COMMANDS[words].params for opt in p.opts if p.name}
    given = BASE.get(words, SERVICE if _is_client(words) else [])
    pairs = (item.format(**places).split("=", 1) for item in given)
    return {by_option[option]: value for option, value in pairs}


def _is_client(words: str) -> bool:
    """Whether the command calls a running service (it takes the client's options)."""
    return "token_file" in {p.name for p in COMMANDS[words].params} and words not in (
        "serve", "bench")


def run(argv: list[str]) -> tuple[int | str, str, str]:
    """Run ``ipupod argv`` here: its exit status (or ``"ray"`` where it would start Ray),
    standard output and standard error. An exception other than an exit fails the test
    with its traceback, as it would print one."""
    runner = CliRunner()
    status: int | str
    with runner.isolation() as (out, err, _):
        signal.alarm(DEADLINE_SECONDS)
        try:
            main(argv)
            status = 0
        except SystemExit as end:
            status = end.code if isinstance(end.code, int) else 1
        except WouldStartRay:
            status = "ray"
        except Hung:
            status = "hung"
        finally:
            signal.alarm(0)
    return (status, out.getvalue().decode(errors="replace"),
            err.getvalue().decode(errors="replace"))


def check_ending(argv: list[str], status: int | str, out: str, err: str) -> None:
    """The property: exit 0, 1 or 2 (or stopped where Ray would start), no traceback, and a
    failure ends in exactly one ``error:`` / ``Error:`` line."""
    shown = f"{[a[:80] for a in argv]} -> {status}\n{err[-2000:]}"
    assert status != "hung", f"still running after {DEADLINE_SECONDS} s: {shown}"
    assert status in (0, 1, 2, "ray"), shown
    assert "Traceback (most recent call last)" not in out + err, shown
    if status in (1, 2):
        lines = err.rstrip("\n").split("\n")
        errors = [line for line in lines if line.startswith(("error:", "Error:"))]
        assert len(errors) == 1 and lines[-1] == errors[0], shown


def test_the_walk_finds_every_command() -> None:
    assert set(COMMANDS) >= EXPECTED_COMMANDS
    assert sum(len(c.params) for c in COMMANDS.values()) > 200


@settings(max_examples=25, deadline=None, derandomize=True, database=None)
@pytest.mark.parametrize("words, target", _targets())
@given(data=st.data())
def test_any_value_of_any_option_ends_in_a_result_or_one_error_line(
        places: dict[str, str], words: str, target: str | None, data: st.DataObject) -> None:
    _refill(places)
    command = COMMANDS[words]
    params = {p.name: p for p in command.params}
    base = _base(words, places)
    arguments = {p.name: ARGUMENTS.get(p.name or "", "x") for p in command.params
                 if isinstance(p, click.Argument) and p.name}
    chosen = [target] if target else []
    others = [n for n in params if n and n != target and not _is_flag(params[n])]
    if others:
        chosen += data.draw(st.lists(st.sampled_from(others), max_size=2, unique=True))
    for name in chosen:
        param = params[name]
        value = data.draw(_value(param, places), label=name)
        if isinstance(param, click.Argument):
            arguments[name] = value
        else:
            base[name] = value
    flags = [f for p in command.params if _is_flag(p)
             if data.draw(st.booleans(), label=p.name) for f in p.opts[:1]]
    argv = _argv(words, base, arguments, flags)
    status, out, err = run(argv)
    event(f"status {status}")
    check_ending(argv, status, out, err)


def _longest(option: click.Parameter) -> str:
    """The option's longest name (``--minbytes`` rather than ``-b``)."""
    return max(option.opts, key=len)


@pytest.mark.parametrize("argv, says", [
    (["topology", "show", "{directory}"], "is a directory"),
    (["bench", "allreduce", "--topology={directory.yaml}"], "is a directory"),
    (["train", "--mode=phantom", "--topology={directory}"], "is a directory"),
    (["serve", "--port=0", "--metrics-port=-1", "--topology={directory}"], "is a directory"),
    (["train", "--mode=phantom", "--model={directory}"], "is a directory"),
    (["status", "--token-file={directory}"], "is a directory"),
    (["topology", "show", "{fifo}"], "not a regular file"),
    (["train", "--mode=phantom", "--model={fifo}"], "not a regular file"),
    (["status", "--token-file={fifo}"], "not a regular file"),
    (["validate", "--published={fifo}"], "not a regular file"),
    (["status", "--token-file={binary}"], "holds no token"),
    (["devices", "--token-file={empty}"], "holds no token"),
    (["topology", "show", "{under-a-file}"], "no topology file"),
    (["scaling-report", "--out=a\x00b"], "nul byte"),
    (["validate", "--published=" + "9" * 4301], "file name too long"),
    (["serve", "--port=0", "--metrics-port=-1", "--host=x\ny"], "cannot listen on host 'x\\ny'"),
    (["status", "--host=x\x1b[2Jy"], "is not a host name"),
    (["user", "add", "u", "--credential-file={missing}/u.token"],
     "--credential-file '{missing}/u.token': the folder '{missing}' does not exist"),
    (["user", "rotate", "u", "--credential-file={under-a-file}"], "is not a folder"),
    (["serve", "--port=0", "--metrics-port=-1", "--token-file={missing}/t"],
     "--token-file '{missing}/t': the folder '{missing}' does not exist"),
    (["serve", "--port=0", "--metrics-port=-1", "--audit-log={missing}/a"],
     "--audit-log '{missing}/a': the folder"),
    (["serve", "--port=0", "--metrics-port=-1", "--state={missing}/s"],
     "--state '{missing}/s': the folder"),
    (["serve", "--port=0", "--metrics-port=-1", "--fresh-state"], "keeps no state"),
    (["train", "--torch={directory}:f", "--sample-shape=3"], "is a directory"),
    (["train", "--torch={fifo}:f", "--sample-shape=3"], "not a regular file"),
    (["train", "--torch={missing}:f", "--sample-shape=3"], "does not exist"),
    (["train", "--torch={empty}:f", "--sample-shape=3"], "has no 'f'"),
    (["train", "--torch={binary}:f", "--sample-shape=3"], "cannot read factory file"),
])
def test_a_path_or_host_that_cannot_be_used_is_named_in_one_line(places, argv, says):
    _refill(places)  # an earlier command may have written its output over them
    for name, path in places.items():
        argv = [word.replace(f"{{{name}}}", path) for word in argv]
        says = says.replace(f"{{{name}}}", path)
    status, out, err = run(argv)
    check_ending(argv, status, out, err)
    assert status == 2 and says.lower() in err.lower(), (argv, status, err)
    assert not Path(places["missing"]).exists()  # no folder made on the way


@settings(max_examples=40, deadline=None, derandomize=True, database=None)
@given(spec=st.one_of(STRINGS, STRINGS.map(lambda text: f"{text}:{text}")))
def test_any_torch_factory_text_ends_in_one_error_line(places, spec):
    """``train --torch`` with the shape given, so that the factory itself is loaded."""
    _refill(places)
    argv = ["train", f"--torch={spec}", "--sample-shape=3", "--steps=1"]
    status, out, err = run(argv)
    check_ending(argv, status, out, err)
    assert status == 2, (argv, err)


def test_an_option_given_through_the_environment_does_not_outlive_its_command():
    """--tls-ca reaches the client as IPUPOD_TLS_CA; a later option's error stops click
    before it cleans up, and the variable must still be gone (later commands and the
    processes they start would otherwise use a CA nobody gave them)."""
    before = os.environ.get("IPUPOD_TLS_CA")
    status, _, _ = run(["status", "--tls-ca", "-0", "--port", "0"])
    assert status == 2
    assert os.environ.get("IPUPOD_TLS_CA") == before
