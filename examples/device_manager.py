"""Acquire IPUs from a running `ipupod serve` the way a PopART application does.

    ipupod serve &                          # in another terminal
    python examples/device_manager.py 8

With IPUOF_VIPU_API_PARTITION_ID set, the named partition is used instead of a new one.
"""

from __future__ import annotations

import sys

from cluster.service.device_manager import DeviceManager


def main(ipus: int = 8) -> None:
    """Acquire ``ipus`` IPUs and print an allreduce sweep from 1 MiB to 16 MiB on them."""
    with DeviceManager().acquireAvailableDevice(numIpus=ipus) as device:
        print(f"device {device.id}: IPUs {device.ipus}")
        result = device.bench("allreduce", min_bytes=1 << 20, max_bytes=16 << 20, factor=4)
        for row in result.rows:
            print(f"  {row.bytes:>10} B  {row.algorithm:<24} {row.sim_seconds * 1e6:9.2f} us "
                  f"simulated  busbw {row.busbw_GBps:6.2f} GB/s")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
