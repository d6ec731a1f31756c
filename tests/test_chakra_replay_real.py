"""``ipupod replay TRACE --mode real``: the trace's collectives run on a launched POD's
devices with real data, checked exact against NumPy; compute stays simulated time; a
topology larger than a POD16, or a collective too large for real mode, is one error line
before anything starts."""

from __future__ import annotations

import json

from ipupod_proto import chakra_et_pb2 as et
from tests.test_chakra_reader import coll, comp
from tests.test_chakra_replay import allreduce_trace, write

KiB = 1024


def test_a_replayed_allreduce_moves_real_bytes_and_is_exact(tmp_path, ipupod_here) -> None:
    trace = write(tmp_path / "t", [[comp(1, 250), coll(2, et.ALL_REDUCE, 64 * KiB, deps=(1,)),
                                    coll(3, et.REDUCE_SCATTER, 16 * KiB, deps=(2,)),
                                    coll(4, et.BARRIER, 0, deps=(3,))]
                                   for _ in range(4)])
    phantom = ipupod_here("replay", trace, "--topology", "pod16", "--json")
    run = ipupod_here("replay", trace, "--topology", "pod16", "--mode", "real", "--json")
    assert run.returncode == 0, run.stderr
    replayed, simulated = json.loads(run.stdout), json.loads(phantom.stdout)
    assert replayed["mode"] == "real"
    assert replayed["end_seconds"] == simulated["end_seconds"]  # compute: simulated time
    real = replayed["real"]
    assert [(c["kind"], c["bytes"], c["ranks"]) for c in real["collectives"]] == [
        ("all-reduce", 64 * KiB, [0, 1, 2, 3]), ("reduce-scatter", 16 * KiB, [0, 1, 2, 3])]
    assert real["wrong"] == 0 and real["not_run"] == 1  # the barrier moves nothing
    assert real["collectives"][0]["elements"] == 16 * KiB  # 64 KiB of float32 each
    assert all(c["device_link_bytes"] > 0 and c["wall_seconds"] > 0
               for c in real["collectives"])
    text = ipupod_here("replay", trace, "--topology", "pod16", "--mode", "real")
    assert text.returncode == 0, text.stderr
    assert "mode real" in text.stdout
    assert "real mode: 2 collectives ran on the devices with real data" in text.stdout
    assert "0 elements wrong against NumPy" in text.stdout


def test_real_mode_beyond_a_pod16_is_one_error_line(tmp_path, ipupod_main) -> None:
    trace = allreduce_trace(tmp_path, 2, 1024)
    run = ipupod_main("replay", trace, "--topology", "pod64", "--mode", "real")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == ("error: --mode real replays on up to 16 IPUs (a POD16): pod64 has "
                          "64; replay it on a smaller --topology, or in --mode phantom\n")


def test_a_collective_too_large_for_real_mode_is_refused_before_devices_start(
        tmp_path, ipupod_main) -> None:
    trace = allreduce_trace(tmp_path, 2, 256 * 2**20)
    run = ipupod_main("replay", trace, "--topology", "pod16", "--mode", "real")
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith("error: --mode real moves every collective's bytes through "
                                 "the devices, up to 128M a rank: collective 0 of process "
                                 "group 'default' (all-reduce) has 256M")
    assert len(run.stderr.splitlines()) == 1


def test_a_ray_address_in_phantom_mode_is_noted_and_unused(tmp_path, ipupod_main) -> None:
    trace = allreduce_trace(tmp_path, 2, 1024)
    run = ipupod_main("replay", trace, "--topology", "pod16", "--ray-address", "nowhere:1")
    assert run.returncode == 0, run.stderr
    assert ("note: --ray-address applies only in real mode (--mode real), not in phantom "
            "mode (--ray-address: no devices are launched)") in run.stderr.splitlines()
