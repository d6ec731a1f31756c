"""Shared fixtures: one local Ray for the whole test session, started on first use."""

import pytest


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from ipu_node.ray_session import ensure_ray

    ensure_ray(None, 256)
    yield ray
    ray.shutdown()


def _run_in_this_process(capsys, args: tuple[str, ...]):
    """``ipupod ARGS`` run by ``main`` here, as a CompletedProcess of what it printed."""
    import subprocess

    from cluster.cli.main import main

    capsys.readouterr()
    try:
        main(list(args))
        status = 0
    except SystemExit as end:
        status = end.code if isinstance(end.code, int) else 1
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["ipupod", *args], status, out, err)


@pytest.fixture
def ipupod_main(capsys):
    """``ipupod ARGS`` run in this process without Ray (phantom runs, refusals, files), as
    a CompletedProcess."""
    return lambda *args: _run_in_this_process(capsys, args)


@pytest.fixture
def ipupod_here(ray_session, capsys):
    """``ipupod ARGS`` run in this process, on the session's Ray, as a CompletedProcess: for
    tests of what a command prints, without a process and a private Ray of its own each
    (the commands beside a Ray, private or not, are tests/test_ray_beside_ray.py's)."""
    return lambda *args: _run_in_this_process(capsys, args)
