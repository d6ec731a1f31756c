"""`ipupod bench` refuses before harm and says what it did not do: a real-mode sweep too big
for the IPUs or this machine is refused before Ray is even imported (so no device can
start); phantom mode names the real-mode options it ignores, and a size that is not a
whole number of elements says what ran instead. Notes go to stderr, so --json stays JSON."""

import json
import subprocess
import sys

import pytest

from cluster.model.spec import load_topology
from cluster.model.units import parse_size
from gcl.bench_spec import BenchSpec, Runs, SizeRange
from gcl.collectives import collective
from gcl.modes import Mode
from ipu_node.bench_fit import (
    HOST_BYTES_PER_BYTE,
    DoesNotFit,
    check_devices,
    check_host,
    device_bytes,
    device_capacity,
    host_bytes,
)
from ipu_node.ipu_memory import available_ram_bytes

MiB = 1 << 20


def real_sweep(name, smallest, largest=None, topology=None, runs=Runs()):
    """A real-mode sweep of collective ``name`` from ``smallest`` to ``largest`` bytes (one
    size apart), placed on ``topology`` (default pod16)."""
    largest = largest or smallest
    spec = BenchSpec(collective(name), SizeRange(smallest, largest, largest / smallest),
                     Mode.REAL, runs=runs)
    return spec.place(topology or load_topology("pod16"))

# Runs the CLI in a process where importing Ray fails: a command that got as far as
# launching devices (ipu_node.pod imports Ray) ends with this message instead.
WITHOUT_RAY = """
import runpy, sys
class NoRay:
    def find_spec(self, name, path=None, target=None):
        if name == "ray" or name.startswith("ray."):
            raise ImportError("RAY-BLOCKED: the command tried to start devices")
sys.meta_path.insert(0, NoRay())
sys.argv = ["ipupod", *sys.argv[1:]]
runpy.run_module("cluster.cli.main", run_name="__main__")
"""


def without_ray(*args):
    return subprocess.run([sys.executable, "-c", WITHOUT_RAY, *args], capture_output=True,
                          text=True, timeout=120)


def ipupod(*args):
    return subprocess.run([sys.executable, "-m", "cluster.cli.main", *args],
                          capture_output=True, text=True, timeout=120)


def refused(result):
    """The one error line of a refusal (exit 2, no traceback, Ray never imported)."""
    assert result.returncode == 2, result.stderr
    assert "RAY-BLOCKED" not in result.stderr and "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]


def test_the_harness_sees_a_bench_that_starts_devices():
    started = without_ray("bench", "allreduce", "--topology", "pod16", "--mode", "real",
                          "-b", "4K", "-e", "4K")
    assert started.returncode != 0 and "RAY-BLOCKED" in started.stderr


def test_a_real_bench_larger_than_in_processor_memory_is_refused_as_phantom_mode_refuses():
    args = ["bench", "allreduce", "--topology", "pod16", "-b", "1G", "-e", "1G"]
    line = refused(without_ray(*args, "--mode", "real"))
    assert "In-Processor-Memory" in line and "1,073,741,824" in line
    assert line == refused(without_ray(*args))  # phantom mode's line, word for word


def test_a_real_bench_that_fits_no_ipu_with_its_output_and_buffers_is_refused():
    # 200 MiB fits a GC2's 304 MiB, as phantom mode plans it; input and output do not
    line = refused(without_ray("bench", "allreduce", "--topology", "dss8440", "--mode",
                               "real", "-b", "200M", "-e", "200M"))
    assert "input 209,715,200, output 209,715,200" in line and "s0.card0.ipu0" in line
    assert "choose -e 128M or less" in line


def too_big_for_this_machine(name="allreduce"):
    """A topology and a size whose real sweep fits the IPUs but needs more than twice
    this machine's free memory (margin for other work starting or ending meanwhile)."""
    free = available_ram_bytes()
    for spec in ("pod16", "pod64"):
        topology = load_topology(spec)
        capacity = min(device_capacity(topology).values())
        for size in (MiB << k for k in range(12)):
            sweep = real_sweep(name, size, topology=topology)
            if device_bytes(sweep)[0] > capacity or size > 800 * MiB:
                break
            if host_bytes(sweep, topology.ipu_count, topology.ipu_count) > 2 * free:
                return spec, size
    pytest.skip(f"this machine has {free:,} bytes free: more than pod64 can use")


def test_a_real_bench_larger_than_this_machines_free_memory_is_refused_before_ray():
    spec, size = too_big_for_this_machine()
    line = refused(without_ray("bench", "allreduce", "--topology", spec, "--mode", "real",
                               "-b", str(size), "-e", str(size)))
    assert "of this machine's memory" in line and "is free" in line
    assert "phantom mode" in line and "--ray-address" in line and "choose -e " in line


def test_the_machine_check_refuses_just_above_free_memory_and_passes_at_it():
    sweep = real_sweep("all-gather", MiB, 64 * MiB)
    needed = host_bytes(sweep, 16, 16)
    assert needed == int(64 * MiB * 16 * sum(HOST_BYTES_PER_BYTE["all-gather"]))
    check_host(sweep, 16, 16, needed, "")
    with pytest.raises(DoesNotFit, match="all-gather of 64M on 16 IPUs"):
        check_host(sweep, 16, 16, needed - 1, "")


def test_devices_elsewhere_and_no_check_take_nothing_of_this_machine():
    unchecked = real_sweep("allreduce", 64 * MiB, runs=Runs(check=False))
    assert host_bytes(unchecked, 16, 0) == 0
    checked = real_sweep("allreduce", 64 * MiB)
    assert 0 < host_bytes(checked, 16, 0) < host_bytes(checked, 16, 16)


def test_a_later_run_holds_the_previous_output_beside_the_working_buffers():
    topology = load_topology("dss8440")
    once = device_bytes(real_sweep("allreduce", 64 * MiB, topology=topology))
    twice = device_bytes(real_sweep("allreduce", 64 * MiB, topology=topology,
                                    runs=Runs(iterations=2)))
    assert once[0] == 128 * MiB and twice[0] == 192 * MiB
    free = {ipu: 150 * MiB for ipu in range(topology.ipu_count)}
    check_devices(real_sweep("allreduce", 64 * MiB, topology=topology), free)
    with pytest.raises(DoesNotFit, match="working buffers"):
        check_devices(real_sweep("allreduce", 64 * MiB, topology=topology,
                                 runs=Runs(iterations=2)), free)


def notes(result):
    return [line for line in result.stderr.splitlines() if line.startswith("note:")]


def test_phantom_mode_names_the_real_mode_options_it_does_not_use_and_json_stays_json():
    result = ipupod("bench", "allreduce", "--topology", "pod16", "-b", "1M", "-e", "1M",
                    "-n", "5", "-c", "0", "--json")
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)) == 1
    [note] = notes(result)
    assert note.startswith("note: -n and -c apply only in real mode")
    assert "nothing to repeat" in note and "nothing to check" in note
    plain = ipupod("bench", "allreduce", "--topology", "pod16", "-b", "1M", "-e", "1M")
    assert notes(plain) == []


def test_a_size_that_is_not_whole_elements_says_what_ran():
    result = ipupod("bench", "allreduce", "--topology", "pod16", "-b", "3", "-e", "3")
    [note] = notes(result)
    assert note.startswith("note: -b 3 ran as 4 bytes (1 float32 element)")
    assert "nccl-tests" in note
    rows = [line.split() for line in result.stdout.splitlines() if not line.startswith("#")]
    assert [row[0] for row in rows] == ["4"]
    assert notes(ipupod("bench", "allreduce", "--topology", "pod16", "-b", "4", "-e", "4")) \
        == []


def test_sizes_that_round_alike_say_they_ran_once():
    result = ipupod("bench", "all-gather", "--topology", "pod16", "-b", "64", "-e", "128",
                    "-f", "1.5")
    [note] = notes(result)
    assert note.startswith("note: 96 ran as 64 bytes (16 blocks of 1 float32 element)")
    assert "1 row for 2 sizes" in note


def test_a_real_bench_without_e_runs_the_largest_sweep_that_fits_and_says_so():
    """The default must run: -e not given lowers 128M to what this machine holds. pod64's
    64 IPUs at 128M need about 100 GiB here; the lowered sweep passes every check (the
    command gets as far as starting devices) and a note names the size chosen."""
    free = available_ram_bytes()
    topology = load_topology("pod64")
    full = real_sweep("allreduce", 128 * MiB, topology=topology)
    if host_bytes(full, 64, 64) <= free:
        pytest.skip("this machine holds pod64's 128M sweep: nothing to lower")
    started = without_ray("bench", "allreduce", "--topology", "pod64", "--mode", "real")
    assert "RAY-BLOCKED" in started.stderr, started.stderr  # every check passed
    notes = [line for line in started.stderr.splitlines() if "-e not given" in line]
    assert len(notes) == 1, started.stderr
    chosen = parse_size(notes[0].split("-e not given: ")[1].split()[0])
    assert host_bytes(real_sweep("allreduce", chosen, topology=topology), 64, 64) <= free
    assert host_bytes(real_sweep("allreduce", 2 * chosen, topology=topology), 64, 64) > free
    assert check_devices(real_sweep("allreduce", chosen, topology=topology),
                         device_capacity(topology)) is None


def test_a_given_e_is_never_lowered():
    if host_bytes(real_sweep("allreduce", 128 * MiB), 64, 64) <= available_ram_bytes():
        pytest.skip("this machine holds pod64's 128M sweep: nothing to refuse")
    line = refused(without_ray("bench", "allreduce", "--topology", "pod64", "--mode", "real",
                               "-e", "128M"))
    assert "needs about" in line and "choose -e" in line
