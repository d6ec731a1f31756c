"""Shared fixtures: one local Ray for the whole test session, started on first use."""

import pytest


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from ipu_node.ray_session import ensure_ray

    ensure_ray(None, 256)
    yield ray
    ray.shutdown()


@pytest.fixture
def ipupod_here(ray_session, capsys):
    """``ipupod ARGS`` run in this process, on the session's Ray, as a CompletedProcess: for
    tests of what a command prints, without a process and a private Ray of its own each
    (the commands beside a Ray, private or not, are tests/test_ray_beside_ray.py's)."""
    import subprocess

    from cluster.cli.main import main

    def run(*args: str) -> subprocess.CompletedProcess:
        capsys.readouterr()
        try:
            main(list(args))
            status = 0
        except SystemExit as end:
            status = end.code if isinstance(end.code, int) else 1
        out, err = capsys.readouterr()
        return subprocess.CompletedProcess(["ipupod", *args], status, out, err)

    return run
