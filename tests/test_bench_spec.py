"""One benchmark request as a value: parsed once, placed once on a topology (its sizes and
replica groups worked out there and handed down), run by one function for the CLI and
the service."""

import pytest

from cluster.errors import UserError
from cluster.model.hardware import DeviceKind
from cluster.model.spec import load_topology
from gcl.bench_spec import BenchSpec, Runs, SizeRange
from gcl.collectives import DType, ReduceOp, collective
from gcl.groups import CommGroup
from gcl.modes import Mode
from ipu_node.bench import run_bench

MiB = 1 << 20


def test_a_request_placed_on_a_partition_groups_its_ipus_once_for_the_whole_sweep():
    spec = BenchSpec(collective("allreduce"), SizeRange(MiB, 4 * MiB),
                     group=CommGroup.consecutive(2))
    bench = spec.place(load_topology("pod16"), [4, 5, 6, 7])
    assert bench.byte_sizes == (MiB, 2 * MiB, 4 * MiB)
    assert [g.tolist() for g in bench.groups] == [[4, 5], [6, 7]]
    assert bench.group_size == 2 and bench.replicas == [4, 5, 6, 7]
    rows = list(run_bench(bench))
    assert [row.bytes for row in rows] == [MiB, 2 * MiB, 4 * MiB]
    assert {row.group_size for row in rows} == {2}
    with pytest.raises(ValueError, match="read-only"):
        bench.groups[0][0] = 9  # shared by every schedule of the sweep


def test_a_sweep_out_of_range_is_refused_when_placed_and_run_counts_when_asked():
    asked = BenchSpec(collective("allreduce"), SizeRange(2 * MiB, MiB))
    with pytest.raises(UserError, match=r"the largest size \(-e 1048576\) is below"):
        asked.place(load_topology("pod16"))
    with pytest.raises(UserError, match="-n, iterations"):
        Runs(iterations=0)


def test_the_request_speaks_in_enums():
    spec = BenchSpec(collective("broadcast"), SizeRange(MiB, MiB), Mode.REAL, DType.FLOAT16,
                     ReduceOp.MAX, root=3)
    assert spec.rooted == 3 and spec.dtype.itemsize == 2
    assert BenchSpec(collective("allreduce"), SizeRange(MiB, MiB), root=3).rooted == 0
    with pytest.raises(UserError, match="unknown dtype 'float64': use one of float32"):
        DType.parse("float64")


def test_a_real_bench_needs_the_pod_it_runs_on():
    bench = BenchSpec(collective("allreduce"), SizeRange(MiB, MiB), Mode.REAL).place(
        load_topology("dss8440"))
    with pytest.raises(ValueError, match="pass the pod"):
        run_bench(bench)


def test_a_presets_units_name_their_kind_by_the_enum():
    assert {unit.kind for unit in load_topology("dss8440").units} == {DeviceKind.C2}
    assert {unit.kind for unit in load_topology("pod16").units} == {DeviceKind.IPU_M2000}
