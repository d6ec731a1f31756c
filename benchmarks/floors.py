"""What this machine cannot do faster: the floors real mode is measured against.

- :func:`memory_floor_seconds`: one process doing the memory traffic an allreduce of
  ``ranks`` buffers needs, with NumPy and nothing else: every buffer read once and summed
  into one (``ranks - 1`` additions of the whole buffer), then the sum written back over
  every other buffer (``ranks - 1`` copies). Whatever the algorithm, an in-place allreduce
  reads, sums and writes at least these bytes; the emulator's card processes add the links
  and the processes on top.
- :func:`bare_actor_floor_seconds`: Ray started from nothing and ``count`` bare actors (no
  imports, one method) started and answering once: what any launch of that many Ray actors
  costs on this machine.

Wall seconds, best and median of the repeats.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np


def memory_floor_seconds(buffer_bytes: int, ranks: int, repeats: int) -> dict[str, Any]:
    """Wall seconds for one process to sum ``ranks`` float32 buffers of ``buffer_bytes``
    each and write the sum over all of them (best and median of ``repeats``)."""
    count = buffer_bytes // 4
    buffers = [np.full(count, rank + 1, dtype=np.float32) for rank in range(ranks)]
    seconds = []
    for _ in range(repeats):
        started = time.perf_counter()
        total = buffers[0]
        for other in buffers[1:]:
            np.add(total, other, out=total)
        for other in buffers[1:]:
            np.copyto(other, total)
        seconds.append(time.perf_counter() - started)
    return {"seconds": seconds, "best_seconds": min(seconds),
            "median_seconds": statistics.median(seconds),
            "bytes_read": (ranks - 1) * 2 * buffer_bytes,
            "bytes_written": (ranks - 1) * 2 * buffer_bytes}


def bare_actor_floor_seconds(count: int) -> dict[str, Any]:
    """Wall seconds from nothing (Ray not started) to ``count`` bare actors that each
    answered once, and of that, starting Ray; then Ray is shut down."""
    import ray

    from ipu_node.ray_session import ensure_ray

    @ray.remote(num_cpus=0)
    class Bare:
        """An actor with nothing in it: what Ray itself costs."""

        def ping(self) -> int:
            return 1

    started = time.perf_counter()
    ensure_ray(None, count)
    ray_started = time.perf_counter()
    actors = [Bare.remote() for _ in range(count)]  # type: ignore[attr-defined]
    answered = sum(ray.get([actor.ping.remote() for actor in actors]))
    ready = time.perf_counter()
    ray.shutdown()
    return {"actors": count, "answered": answered, "launch_seconds": ready - started,
            "ray_start_seconds": ray_started - started}
