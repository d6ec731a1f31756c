"""Acquire IPUs from a running `ipupod serve` the way a PopART application does.

    .venv/bin/ipupod serve                         # in another terminal
    .venv/bin/python examples/device_manager.py 8

Like every example, it imports the installed package: run it with the Python of the
virtualenv the package is installed in (``pip install -e .``, as README's quick start does).
With IPUOF_VIPU_API_PARTITION_ID set, the named partition is used instead of a new one.
"""

from __future__ import annotations

import sys

try:
    from cluster.cli.output import errors_as_lines
    from cluster.errors import UserError
    from cluster.service.device_manager import DeviceManager
    from gcl.collectives import CollectiveName
except ModuleNotFoundError as missing:  # not the Python the package is installed in
    print(f"error: cannot import {missing.name!r}: run the examples with the Python of the "
          "virtualenv the package is installed in (pip install -e .), e.g. "
          ".venv/bin/python examples/device_manager.py 8", file=sys.stderr)
    sys.exit(2)


def main(ipus: int = 8) -> None:
    """Acquire ``ipus`` IPUs and print an allreduce sweep from 1 MiB to 16 MiB on them."""
    with DeviceManager().acquireAvailableDevice(numIpus=ipus) as device:
        print(f"device {device.id}: IPUs {device.ipus}")
        result = device.bench(CollectiveName.ALLREDUCE, min_bytes=1 << 20, max_bytes=16 << 20,
                              factor=4)
        for row in result.rows:
            print(f"  {row.bytes:>10} B  {row.algorithm:<24} {row.sim_seconds * 1e6:9.2f} us "
                  f"simulated  busbw {row.busbw_GBps:6.2f} GB/s")


if __name__ == "__main__":
    with errors_as_lines():  # a mistake (no service, say) is one line, not a traceback
        args = sys.argv[1:]
        if len(args) > 1 or (args and not args[0].isdigit()):
            raise UserError("usage: device_manager.py [IPUS] (IPUS: a power of two, "
                            "default 8)")
        main(*(int(a) for a in args))
