"""Shared fixtures: one local Ray for the whole test session, started on first use."""

import pytest


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from ipu_node.ray_session import ensure_ray

    ensure_ray(None, 256)
    yield ray
    ray.shutdown()
