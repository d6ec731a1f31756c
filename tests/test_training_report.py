"""The training scaling report: table arithmetic worked out by hand, files written, plots."""

import pytest

from cluster.training.reports.servers import (
    format_table,
    plot_loss,
    scaling_rows,
    write_report,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run(servers, parts, *, mode="real", batch_per_server=512, losses=(2.3, 1.9, 1.6)):
    """A synthetic run record: every step takes ``parts`` (compute, host I/O, local AR,
    global AR) simulated seconds; phantom runs have no loss."""
    compute, host_io, local, global_ = parts
    steps = [{"step": i, "loss": None if mode == "phantom" else loss,
              "sim_seconds": compute + host_io + local + global_,
              "compute_seconds": compute, "host_io_seconds": host_io,
              "local_allreduce_seconds": local, "global_allreduce_seconds": global_}
             for i, loss in enumerate(losses)]
    return {"servers": servers, "replicas": 16 * servers, "gcd": 1, "mode": mode,
            "global_batch": batch_per_server * servers, "steps": steps,
            "throughput_samples_per_sim_second": 0.0}


def test_rows_are_sorted_by_server_count():
    rows = scaling_rows([run(4, (1e-3, 0, 0, 0)), run(1, (1e-3, 0, 0, 0)),
                          run(2, (1e-3, 0, 0, 0))])
    assert [row["servers"] for row in rows] == [1, 2, 4]


def test_efficiency_is_exactly_one_when_throughput_grows_linearly():
    # Same step time, batch proportional to servers: throughput doubles with servers.
    rows = scaling_rows([run(s, (1e-3, 2e-4, 1e-4, 5e-5)) for s in (1, 2, 4, 8)])
    assert [row["efficiency"] for row in rows] == [1.0, 1.0, 1.0, 1.0]


def test_efficiency_and_throughput_match_hand_computed_values():
    # 2 servers: batch 1024 in 1 ms -> 1,024,000 samples/s.
    # 4 servers: batch 2048 in 1.25 ms -> 1,638,400 samples/s; ideal 2,048,000 -> 0.8.
    rows = scaling_rows([run(4, (1e-3, 0, 0, 2.5e-4)), run(2, (1e-3, 0, 0, 0))])
    assert rows[0]["throughput_samples_per_sim_second"] == pytest.approx(1_024_000)
    assert rows[1]["throughput_samples_per_sim_second"] == pytest.approx(1_638_400)
    assert rows[1]["step_seconds"] == pytest.approx(1.25e-3)
    assert rows[1]["efficiency"] == pytest.approx(0.8, rel=1e-12)


def test_a_pipelined_runs_bubble_copies_and_update_get_columns_that_add_up_to_the_step():
    plain, piped = run(1, (1e-3, 1e-4, 2e-4, 0)), run(2, (1e-3, 1e-4, 2e-4, 3e-4))
    for step in piped["steps"]:  # 0.5 ms of bubble, 0.25 of copies, 0.125 of update more
        step.update(pipeline_bubble_seconds=5e-4, inter_stage_seconds=2.5e-4,
                    update_seconds=1.25e-4, sim_seconds=step["sim_seconds"] + 8.75e-4)
    header, *lines = format_table(scaling_rows([plain, piped])).splitlines()
    assert header.split()[-3:] == ["bubble(ms)", "stages-io(ms)", "update(ms)"]
    assert "shard-io(ms)" not in header and "gather(ms)" not in header  # none spent there
    cells = [float(cell) for cell in lines[1].split()[7:]]  # compute .. update, ms
    assert cells == [1.0, 0.1, 0.2, 0.3, 0.5, 0.25, 0.125]
    assert sum(cells) == pytest.approx(float(lines[1].split()[4]))  # the step, 2.475 ms
    assert format_table(scaling_rows([plain])).splitlines()[0].split()[-1] == "global-AR(ms)"


def test_step_time_and_parts_are_means_over_steps():
    record = run(2, (1e-3, 0, 0, 0))
    record["steps"][1].update(sim_seconds=4e-3, compute_seconds=2e-3, host_io_seconds=2e-3)
    (row,) = scaling_rows([record])
    assert row["step_seconds"] == pytest.approx(2e-3)
    assert row["compute_seconds"] == pytest.approx(4e-3 / 3)
    assert row["host_io_seconds"] == pytest.approx(2e-3 / 3)
    assert row["global_allreduce_seconds"] == 0


def test_text_table_has_units_in_header_and_one_aligned_line_per_run():
    rows = scaling_rows([run(s, (1e-3, 1e-4, 1e-4, 1e-4)) for s in (1, 2)])
    lines = format_table(rows).splitlines()
    assert lines[0].split() == ["servers", "replicas", "mode", "batch", "step(ms,sim)",
                                "samples/s(sim)", "efficiency", "compute(ms)", "host-io(ms)",
                                "local-AR(ms)", "global-AR(ms)"]
    assert len(lines) == 3
    assert len({len(line) for line in lines}) == 1
    assert lines[1].split()[4] == "1.300"  # mean step time in ms


def test_write_report_creates_three_pngs_and_a_readme_with_command_and_rows(tmp_path):
    runs = [run(s, (1e-3, 1e-4, 2e-4, 1e-4 * s)) for s in (1, 2, 4)]
    out_dir = tmp_path / "report"
    command = "ipupod train --servers 1,2,4 --steps 3"
    paths = write_report(runs, out_dir, command)

    assert set(paths) == {"loss", "throughput", "breakdown", "readme"}
    assert sorted(p.name for p in out_dir.iterdir()) == [
        "README.md", "breakdown.png", "loss.png", "throughput.png"]
    for name in ("loss", "throughput", "breakdown"):
        data = paths[name].read_bytes()
        assert data.startswith(PNG_SIGNATURE)
        assert len(data) > 5_000
    readme = paths["readme"].read_text()
    assert command in readme
    assert "simulated" in readme
    table_rows = [line for line in readme.splitlines()
                  if line.startswith("| ") and line.split("|")[1].strip().isdigit()]
    assert [int(line.split("|")[1]) for line in table_rows] == [1, 2, 4]
    for image in ("loss.png", "throughput.png", "breakdown.png"):
        assert f"]({image})" in readme


def test_phantom_runs_are_left_out_of_the_loss_plot_without_error(tmp_path):
    runs = [run(1, (1e-3, 0, 0, 0), mode="phantom"), run(2, (1e-3, 0, 0, 0))]
    path = plot_loss(runs, tmp_path / "loss.png")
    assert path.read_bytes().startswith(PNG_SIGNATURE)

    only_phantom = [run(s, (1e-3, 0, 0, 1e-4), mode="phantom") for s in (1, 2)]
    paths = write_report(only_phantom, tmp_path / "phantom", "ipupod train --mode phantom")
    assert paths["loss"].read_bytes().startswith(PNG_SIGNATURE)


def test_run_without_steps_is_an_error():
    record = run(1, (1e-3, 0, 0, 0))
    record["steps"] = []
    with pytest.raises(ValueError, match="no steps"):
        scaling_rows([record])


def test_real_and_phantom_runs_share_one_efficiency_base():
    from cluster.training.reports.servers import scaling_rows

    def run(servers, mode, seconds):
        step = {"step": 0, "loss": None, "sim_seconds": seconds, "compute_seconds": seconds,
                "host_io_seconds": 0.0, "local_allreduce_seconds": 0.0,
                "global_allreduce_seconds": 0.0}
        return {"servers": servers, "replicas": 16 * servers, "gcd": 1, "mode": mode,
                "global_batch": 100 * servers, "steps": [step]}

    rows = scaling_rows([run(1, "real", 1.0), run(8, "phantom", 2.0)])
    assert [round(r["efficiency"], 12) for r in rows] == [1.0, 0.5]


def _axes_drawn(monkeypatch):
    """Each figure's first axes, keyed by file name, instead of a PNG written."""
    from cluster.training.reports import servers as report

    drawn = {}

    def keep(fig, path):
        drawn[path.name] = fig.axes[0]
        return path

    monkeypatch.setattr(report, "save_png", keep)
    return drawn


def test_the_loss_plot_ticks_whole_steps_only(monkeypatch, tmp_path):
    drawn = _axes_drawn(monkeypatch)
    plot_loss([run(1, (1e-3, 0, 0, 0))], tmp_path / "loss.png")  # steps 0, 1, 2
    ax = drawn["loss.png"]
    low, high = ax.get_xlim()
    ticks = [tick for tick in ax.get_xticks() if low <= tick <= high]
    assert ticks and all(tick == int(tick) for tick in ticks), ticks


def test_throughput_points_are_named_simulated_by_mode_never_measured(monkeypatch, tmp_path):
    from cluster.training.reports.servers import plot_throughput

    drawn = _axes_drawn(monkeypatch)
    rows = scaling_rows([run(1, (1e-3, 0, 0, 0)), run(2, (1e-3, 0, 0, 0), mode="phantom")])
    plot_throughput(rows, tmp_path / "throughput.png")
    labels = [line.get_label() for line in drawn["throughput.png"].lines]
    assert "simulated (phantom mode)" in labels
    assert any(label.startswith("simulated (real mode") for label in labels)
    assert not any("measured" in label for label in labels)
