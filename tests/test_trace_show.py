"""``ipupod trace show``: a legend that names what covers the drawn time, the format
``--out``'s suffix asks for, and a trace it cannot draw refused in one line with nothing
written; ``--trace ""`` refused before a run starts."""

import json

import pytest

from cluster.cli.trace import rows_of
from cluster.cli.trace_legend import MAX_LEGEND, OTHER, OTHER_COLOUR, legend
from cluster.model.spec import load_topology
from cluster.model.trace import Trace
from cluster.training.reports.document import pyplot
from gcl import plan, simulate
from gcl.sweep_trace import SweepTrace

MIB_OF_FLOAT32 = 1 << 18  # elements


def pod256_sweep():
    """What ``ipupod bench allreduce --topology pod256 -b 1M -e 64M --trace`` writes."""
    topology = load_topology("pod256", "seed")
    traced = SweepTrace(topology)
    for doubling in range(7):
        schedule = plan("allreduce", topology, MIB_OF_FLOAT32 << doubling)
        traced.add(schedule, simulate(schedule, topology))
    return traced.trace.document()


def test_the_legend_names_the_span_names_that_cover_the_drawn_time():
    rows, _ = rows_of(pod256_sweep())
    spans = [span for row in rows for span in row.spans]
    key = legend(pyplot(), spans)
    named = [label for label, _ in key.entries if not label.startswith(OTHER)]
    drawn = sum(duration for _, duration, _ in spans)
    covered = sum(duration for _, duration, name in spans if name in named)
    assert len({name for _, _, name in spans}) > MAX_LEGEND  # not all can be named
    assert len(key.entries) == MAX_LEGEND and key.entries[-1][0].startswith(f"{OTHER} (")
    assert covered >= 0.95 * drawn
    assert {"reduce-scatter (local)", "all-gather (local)"} <= set(named)
    assert all(key.colour(name) == OTHER_COLOUR for _, _, name in spans if name not in named)
    assert len({key.colour(name) for name in named} | {OTHER_COLOUR}) == len(named) + 1


def test_a_legend_with_room_names_every_span_longest_first():
    spans = [(0.0, 1.0, "a"), (1.0, 3.0, "b"), (4.0, 2.0, "c"), (6.0, 1.5, "a")]
    key = legend(pyplot(), spans)
    assert [label for label, _ in key.entries] == ["b", "a", "c"]  # 3, 2.5, 2


def small_trace(tmp_path):
    trace = Trace()
    trace.span("sweep", "phases", "reduce-scatter", 0.0, 1e-6)
    trace.span("sweep", "phases", "all-gather", 1e-6, 2e-6)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace.document()))
    return path


@pytest.mark.parametrize("suffix, magic", [("png", b"\x89PNG"), ("svg", b"<?xml"),
                                           ("pdf", b"%PDF"), ("SVG", b"<?xml")])
def test_the_suffix_of_out_chooses_the_format(tmp_path, ipupod_main, suffix, magic):
    out = tmp_path / f"chart.{suffix}"
    run = ipupod_main("trace", "show", str(small_trace(tmp_path)), "--out", str(out))
    assert run.returncode == 0, run.stderr
    assert out.read_bytes().startswith(magic)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chart." + suffix, "t.json"]


def spans_file(tmp_path, content):
    path = tmp_path / "t.json"
    path.write_text(content)
    return path


@pytest.mark.parametrize("content, out, words", [
    ('{"traceEvents": []}', "c.png", "holds no spans"),
    ('{"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "p"}}]}',
     "c.png", "holds no spans"),
    ('{"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": NaN, "pid": 1, "tid": 1}]}',
     "c.png", "a finite number of 0 or more"),
    ('{"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": Infinity, "pid": 1}]}',
     "c.png", "a finite number of 0 or more"),
    ('{"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": -1, "pid": 1, "tid": 1}]}',
     "c.png", "a finite number of 0 or more"),
    ('{"traceEvents": [{"ph": "X", "name": "a", "ts": -Infinity, "dur": 1, "pid": 1}]}',
     "c.png", "ts must be a finite number"),
    ('{"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": 1, "pid": "x"}]}',
     "c.png", "pid or tid that is not a number"),
    ('{"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": 1, "pid": 1}]}',
     "c.jpg", "end it in .png, .svg or .pdf"),
    ('{"traceEvents": [{"ph": "X", "name": "a", "ts": 0, "dur": 1, "pid": 1}]}',
     "c", "end it in .png, .svg or .pdf"),
])
def test_what_cannot_be_drawn_is_refused_in_one_line_with_nothing_written(
        tmp_path, ipupod_main, content, out, words):
    run = ipupod_main("trace", "show", str(spans_file(tmp_path, content)),
                      "--out", str(tmp_path / out))
    status, err = run.returncode, run.stderr
    assert status == 2 and words in err, err
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert [p.name for p in tmp_path.iterdir()] == ["t.json"]


def test_an_empty_trace_path_is_refused_before_the_sweep_runs(tmp_path, ipupod_main,
                                                              monkeypatch):
    monkeypatch.chdir(tmp_path)
    run = ipupod_main("bench", "allreduce", "--topology", "pod16", "-b", "1M", "-e", "1M",
                      "--trace", "")
    status, out, err = run.returncode, run.stdout, run.stderr
    assert status == 2 and out == "", out
    assert err == "error: --trace '': an empty path names no file: give a path\n"
    assert list(tmp_path.iterdir()) == []
