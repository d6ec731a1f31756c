"""The ``ipupod`` command as a user runs it: a real process, real exit codes."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

JSON_KEYS = {"bytes", "algorithm", "sim_seconds", "algbw_GBps", "busbw_GBps", "wall_seconds",
             "in_place_wall_seconds", "wrong", "in_place_wrong"}


def ipupod(*args, check=True):
    result = subprocess.run([sys.executable, "-m", "cluster.cli.main", *args], capture_output=True,
                            text=True, timeout=300)
    if check:
        assert result.returncode == 0, result.stderr
    return result


def test_bench_prints_an_nccl_tests_style_table_on_the_default_topology():
    out = ipupod("bench", "allreduce", "-b", "1M", "-e", "4M").stdout
    lines = [line for line in out.splitlines() if not line.startswith("#")]
    assert len(lines) == 3
    assert "dss8440x2 (32 IPUs)" in out and "simulated" in out
    groups, names, units = [line for line in out.splitlines() if line.startswith("#")][-5:-2]
    assert groups.split() == ["#", "out-of-place", "in-place"]
    assert names.split()[1:6] == ["size", "count", "type", "redop", "algorithm"]
    assert names.split()[6:] == ["time", "algbw", "busbw", "wall", "#wrong"] * 2
    assert units.split()[1:] == ["(B)", "(elements)"] + ["(us)", "(GB/s)", "(GB/s)", "(s)"] * 2
    fields = lines[0].split()
    size, count, dtype, op, algorithm = fields[:5]
    assert (size, count, dtype, op) == ("1048576", "262144", "float32", "sum")
    out_of_place, in_place = fields[5:10], fields[10:15]
    assert out_of_place[:3] == in_place[:3]  # simulated: the same, by construction
    assert out_of_place[4] == in_place[4] == "N/A"  # phantom mode checks nothing
    from cluster.model.presets import build_preset
    from gcl import plan

    assert algorithm == plan("allreduce", build_preset("dss8440x2"), 262144).algorithm  # auto


@pytest.mark.parametrize("collective", ["allreduce", "reduce-scatter", "all-gather",
                                        "broadcast", "all-to-all"])
def test_bench_json_has_the_documented_keys_for_every_collective(collective):
    rows = json.loads(ipupod("bench", collective, "--topology", "dss8440", "-b", "64K",
                             "-e", "256K", "-f", "4", "--json").stdout)
    assert [row["bytes"] for row in rows] == [65536, 262144]
    for row in rows:
        assert row.keys() >= JSON_KEYS
        assert row["sim_seconds"] > 0 and row["algbw_GBps"] > 0


def test_bench_bus_bandwidth_uses_the_nccl_tests_factor():
    row = json.loads(ipupod("bench", "allreduce", "--topology", "pod16", "-b", "16M", "-e",
                            "16M", "--algorithm", "ring", "--json").stdout)[0]
    assert row["algbw_GBps"] == pytest.approx(row["bytes"] / row["sim_seconds"] / 1e9)
    assert row["busbw_GBps"] == pytest.approx(row["algbw_GBps"] * 2 * 15 / 16)


def test_bench_options_reach_the_schedule():
    row = json.loads(ipupod("bench", "all-gather", "--topology", "pod64", "-b", "1M", "-e",
                            "1M", "--algorithm", "halving_doubling", "--dtype", "float16",
                            "--group", "consecutive:16", "--json").stdout)[0]
    assert (row["algorithm"], row["type"], row["group"], row["group_size"]) == (
        "halving_doubling", "float16", "consecutive:16", 16)


def test_bench_runs_from_a_yaml_file():
    row = json.loads(ipupod("bench", "allreduce", "--topology", "examples/topologies/ring8.yaml",
                            "-b", "8M", "-e", "8M", "--algorithm", "ring", "--json").stdout)[0]
    assert row["sim_seconds"] == pytest.approx(2 * 7 * (1e-6 + (8 << 20) / (8 * 50e9)), rel=1e-9)


@pytest.mark.parametrize("args, words", [
    (["bench", "allreduce", "--topology", "pod17"], "power-of-two"),
    (["bench", "allreduce", "--topology", "nowhere.yaml"], "no topology file"),
    (["bench", "allreduce", "-b", "1Q"], "cannot read the size '1Q'"),
    (["bench", "allreduce", "-b", "4M", "-e", "1M"], "below the smallest"),
    (["bench", "allreduce", "-f", "1"], "more than 1"),
    (["bench", "allreduce", "--algorithm", "fastest"], "unknown algorithm 'fastest'"),
    (["bench", "broadcast", "--algorithm", "hierarchical"], "does not run broadcast"),
    (["bench", "allreduce", "--group", "consecutive:5"], "does not divide 32"),
    (["bench", "allreduce", "--topology", "dss8440", "--algorithm", "halving_doubling",
      "--group", "consecutive:0"], "positive size"),
    (["bench", "gather"], "Invalid value"),
    (["topology", "show", "pod65536", "--format", "dot"], "json"),
    (["bench", "all-to-all", "--topology", "pod65536", "-b", "1M", "-e", "1M"],
     "smaller replica groups"),
    (["bench", "all-to-all", "--topology", "pod65536", "-b", "1M", "-e", "1M",
      "--group", "consecutive:4096"], "smaller replica groups"),
    (["bench", "allreduce", "--topology", "dss8440", "-b", "1G", "-e", "1G"],
     "In-Processor-Memory of s0.card0.ipu0"),
    (["bench", "allreduce", "--algorithm", "x" * 100_000], "(100,000 characters)"),
    (["topology", "show", "pod" + "9" * 5000], "(5,003 characters)"),
])
def test_user_mistakes_get_one_clear_line_and_status_2(args, words):
    result = ipupod(*args, check=False)
    assert result.returncode == 2
    assert words in result.stderr
    assert len(result.stderr) < 2000  # what the user typed is quoted, not repeated whole
    assert "Traceback" not in result.stderr
    assert result.stdout.count("\n") <= 4  # nothing half-printed beyond a preamble


def test_a_report_never_overwrites_a_readme_it_did_not_write(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# my project\n")
    for args in (["pipeline-report", "--model", "resnet50", "--ipus-per-replica", "2",
                  "--micro-batches", "1", "--schedules", "fill-drain"],
                 ["scaling-report", "--model", "resnet50", "--topologies", "pod16"]):
        result = ipupod(*args, "--out", str(tmp_path), check=False)
        assert result.returncode == 2 and "is not an ipupod report" in result.stderr
    assert readme.read_text() == "# my project\n" and sorted(tmp_path.iterdir()) == [readme]


@pytest.mark.parametrize("args, words", [
    (["scaling-report", "--model", "gpt2-xl", "--topologies", "pod16", "--micro-batch", "64"],
     "fits none of these topologies"),
    (["pipeline-report", "--schedules", "popart", "--micro-batches", "1,2",
      "--ipus-per-replica", "4"], "needs (at least 7; --micro-batches went up to 2): add 7"),
])
def test_a_report_with_nothing_to_show_is_an_error_that_leaves_no_folder(tmp_path, args,
                                                                         words):
    out = tmp_path / "reports" / "this" / "one"  # parents made for it go too
    result = ipupod(*args, "--out", str(out), check=False)
    assert result.returncode == 2 and words in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_an_out_folder_that_cannot_be_made_leaves_no_parent_behind(tmp_path):
    out = tmp_path / "made" / ("y" * 300)  # a name longer than the file system takes
    result = ipupod("scaling-report", "--model", "resnet50", "--topologies", "pod16",
                    "--out", str(out), check=False)
    assert result.returncode == 2 and "cannot write the report" in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_runs_a_repeated_value_once(tmp_path):
    result = ipupod("pipeline-report", "--model", "resnet50", "--ipus-per-replica", "2,2,2",
                    "--micro-batches", "1,1", "--schedules", "fill-drain,fill-drain",
                    "--out", str(tmp_path))
    assert result.stdout.count("| 2 | fill-drain | 1 |") == 1


def test_topology_show_describes_a_preset_in_text_json_and_dot():
    text = ipupod("topology", "show", "dss8440x2").stdout
    assert "infiniband-100g" in text and "32" in text
    summary = json.loads(ipupod("topology", "show", "pod64", "--format", "json").stdout)
    assert summary["ipus"] == 64
    dot = ipupod("topology", "show", "dss8440", "--format", "dot").stdout
    links = [line for line in dot.splitlines() if " -- " in line and "style=invis" not in line]
    assert dot.startswith("graph") and len(links) == 47


def test_topology_list_names_the_presets():
    out = ipupod("topology", "list").stdout
    assert "dss8440" in out and "pod65536" in out


def test_a_preset_name_wins_over_a_file_of_that_name(tmp_path):
    (tmp_path / "pod16").write_text("not a topology")
    result = subprocess.run([sys.executable, "-m", "cluster.cli.main", "topology", "show", "pod16",
                             "--format", "json"], capture_output=True, text=True, cwd=tmp_path,
                            timeout=120, env={**__import__("os").environ,
                                              "PYTHONPATH": str(Path(__file__).parent.parent)})
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["ipus"] == 16


def test_sizes_that_round_to_the_same_buffer_print_one_row():
    rows = json.loads(ipupod("bench", "all-gather", "--topology", "dss8440", "-b", "1", "-e",
                             "64", "-f", "4", "--json").stdout)
    assert [row["bytes"] for row in rows] == [64]


def test_root_is_checked_and_shown_only_for_broadcast():
    ipupod("bench", "allreduce", "--root", "99", "-b", "1M", "-e", "1M")
    out = ipupod("bench", "broadcast", "--root", "3", "--topology", "dss8440", "-b", "1M",
                 "-e", "1M").stdout
    assert "root 3" in out
    assert "not a rank" in ipupod("bench", "broadcast", "--root", "99", check=False).stderr


def test_real_mode_bench_moves_data_and_counts_no_wrong_elements():
    out = ipupod("bench", "allreduce", "--mode", "real", "--topology", "pod16", "-b", "4K",
                 "-e", "64K", "-f", "16").stdout
    assert "mode real" in out and "#wrong" in out
    rows = [line.split() for line in out.splitlines() if not line.startswith("#")]
    assert [row[0] for row in rows] == ["4096", "65536"]
    assert all(row[9] == row[14] == "0" for row in rows)  # out of place and in place
    assert "# Out of bounds values : 0 OK" in out


def test_real_mode_json_has_a_wrong_key_and_the_same_simulated_time_as_phantom():
    args = ["bench", "all-gather", "--topology", "pod16", "-b", "64K", "-e", "64K",
            "--algorithm", "ring", "--json"]
    real = json.loads(ipupod(*args, "--mode", "real").stdout)[0]
    phantom = json.loads(ipupod(*args).stdout)[0]
    assert real["wrong"] == real["in_place_wrong"] == 0
    assert real["in_place_wall_seconds"] > 0
    assert real["sim_seconds"] == phantom["sim_seconds"]
    assert phantom["wrong"] is None and phantom["in_place_wrong"] is None


@pytest.mark.parametrize("args, words", [
    (["serve", "--port", "99999"], "not in the range"),
    (["status", "--port", "0"], "not in the range"),
    (["bench", "allreduce", "--mode", "real", "--topology", "pod65536", "-b", "1K", "-e", "1K"],
     "use phantom mode"),
])
def test_impossible_ports_and_pods_too_big_for_this_machine_are_refused(args, words):
    result = ipupod(*args, check=False)
    assert result.returncode == 2 and words in result.stderr
    assert "Traceback" not in result.stderr
