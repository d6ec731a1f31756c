"""Launch an emulated POD, allreduce real arrays on it, and read where the time went.

    .venv/bin/python examples/real_allreduce.py          # two DSS 8440 servers, local Ray
    .venv/bin/python examples/real_allreduce.py pod16    # any preset or YAML topology

Each of the 32 IPUs holds one replica's gradient; the allreduce (``auto``: the algorithm the
cost model finds fastest for this size, printed; on two servers halving_doubling) reduces
them over IPU-Links inside each server and over InfiniBand between servers, moving the
bytes between the card actors over their links. The timing record gives simulated seconds per phase
(what the hardware would take), wall seconds (what the emulation took) and the bytes that
crossed each type of link. It imports the installed package: run it with the Python of
the virtualenv the package is installed in (``pip install -e .``).
"""

from __future__ import annotations

import sys

try:
    import numpy as np

    from cluster.cli.output import errors_as_lines
    from cluster.errors import UserError
    from gcl.collectives import CollectiveName, ReduceOp
    from ipu_node.pod import EmulatedPod
except ModuleNotFoundError as missing:  # not the Python the package is installed in
    print(f"error: cannot import {missing.name!r}: run the examples with the Python of the "
          "virtualenv the package is installed in (pip install -e .), e.g. "
          ".venv/bin/python examples/real_allreduce.py", file=sys.stderr)
    sys.exit(2)


def main(spec: str = "dss8440x2") -> None:
    """Allreduce (mean) one random gradient per IPU of ``spec``; print the error against
    NumPy, the simulated and wall time, each phase and the bytes per link type."""
    with EmulatedPod.launch(spec) as pod:
        ipus = pod.topology.ipu_count
        rng = np.random.default_rng(0)
        gradients = [rng.standard_normal(1 << 18).astype(np.float32) for _ in range(ipus)]
        result = pod.collective(CollectiveName.ALLREDUCE, gradients, algorithm="auto",
                                op=ReduceOp.MEAN)

        expected = np.mean(np.stack(gradients), axis=0)
        error = max(float(np.max(np.abs(r - expected))) for r in result.results)
        print(f"{pod.topology.name}: {ipus} IPUs on {len(pod.specs)} devices, "
              f"algorithm {result.algorithm}, largest difference from NumPy {error:.2e}")
        print(f"simulated {result.sim_seconds * 1e6:.1f} us on the hardware, "
              f"{result.wall_seconds:.3f} s of wall time here")
        for phase in result.timing.phases:
            print(f"  {phase.label:<28} {phase.steps:>4} steps  {phase.seconds * 1e6:10.1f} us")
        for link_type, nbytes in sorted(result.link_type_bytes.items()):
            print(f"  {link_type:<28} {nbytes / 2**20:10.1f} MiB carried")


if __name__ == "__main__":
    with errors_as_lines():  # a mistake (an unknown topology, say) is one line
        if len(sys.argv) > 2:
            raise UserError("usage: real_allreduce.py [TOPOLOGY] (a preset or a YAML file, "
                            "default dss8440x2)")
        main(*sys.argv[1:])
