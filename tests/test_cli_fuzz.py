"""No input makes a phantom command crash: whatever the arguments, `ipupod` exits with 0
or 2 (a one-line error saying what to change), never with a traceback."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from cluster.cli.main import main

JUNK = st.one_of(
    st.text(max_size=12),
    st.text(alphabet="0123456789²٣.-+eEkKmMgGtT:", min_size=1, max_size=40),
    st.integers(min_value=-(10**30), max_value=10**30).map(str),
    st.just("9" * 5000),
    st.just("x" * 300 + ".yaml"),
    st.just("a\x00b"),
)


def mostly(*valid):
    """One of ``valid`` nine times in ten, else junk: most runs get past the parsing and
    reach the command's own checks and work."""
    return st.integers(0, 9).flatmap(lambda n: st.sampled_from(valid) if n else JUNK)


SIZES = mostly("1", "1K", "64K", "1M", "4M", "0", "3")
TOPOLOGIES = mostly("dss8440", "pod16", "examples/topologies/ring8.yaml",
                    "examples/topologies/switch16.yaml", "examples/topologies/two-level.yaml")
GROUPS = st.one_of(mostly("all", "consecutive:4", "orthogonal:2", "consecutive:3",
                          "orthogonal:16", "consecutive:64"),
                   st.builds("{}:{}".format, st.sampled_from(["consecutive", "orthogonal"]),
                             JUNK))


def option(name, values):
    return st.one_of(st.just([]), values.map(lambda v: [name, v]))


@st.composite
def bench_args(draw):
    collective = draw(mostly("allreduce", "reduce-scatter", "all-gather", "broadcast",
                             "all-to-all"))
    args = ["bench", collective]
    for name, values in (("--topology", TOPOLOGIES), ("-b", SIZES), ("-e", SIZES),
                         ("-f", mostly("2", "4", "1.5", "1", "0.5")),
                         ("--algorithm", mostly("auto", "ring", "hierarchical",
                                                "halving_doubling", "bidirectional")),
                         ("--dtype", mostly("float16", "int32")),
                         ("--op", mostly("sum", "max", "mean")),
                         ("--group", GROUPS), ("--root", mostly("0", "1", "5", "-1", "31")),
                         ("--figures", mostly("seed", "public"))):
        args += draw(option(name, values))
    if not any(a in args for a in ("-b", "-e")):
        args += ["-b", "1M", "-e", "1M"]  # keep the default sweep short
    return args + draw(st.sampled_from([[], ["--json"]]))


@st.composite
def model_train_args(draw):
    """Phantom training of workloads, pipelined or sharded, with options good and bad."""
    args = ["train", "--mode", "phantom", "--steps", "1"]
    for name, values in (("--model", mostly("resnet50", "bert-base", "gpt2-xl", "mlp",
                                            "examples/workloads/tiny.yaml", "nope.yaml")),
                         ("--topology", mostly("pod16", "dss8440", "pod64")),
                         ("--ipus-per-replica", mostly("2", "4", "16", "3")),
                         ("--split", mostly("pipeline", "shard")),
                         ("--pipeline-schedule", mostly("fill-drain", "1f1b")),
                         ("--sequence-length", mostly("128", "0", "513", "99999999999")),
                         ("--gradient-dtype", mostly("float16", "float32")),
                         ("--optimizer-state", mostly("streaming", "in-processor")),
                         ("--micro-batch", mostly("1", "20", "0", "100000")),
                         ("--gradient-accumulation", mostly("1", "16", "0"))):
        args += draw(option(name, values))
    return args + draw(st.sampled_from([[], ["--json"], ["--recompute"], ["--no-recompute"]]))


@st.composite
def other_args(draw):
    return draw(st.one_of(
        st.builds(lambda spec, fmt: ["topology", "show", spec, *fmt], TOPOLOGIES,
                  option("--format", mostly("text", "json", "dot"))),
        st.just(["topology", "list"]),
        st.builds(lambda spec, steps, mb: ["train", "--mode", "phantom", "--topology", spec,
                                           "--steps", steps, "--batch-size", mb],
                  TOPOLOGIES, mostly("1", "2", "0"), mostly("8", "1", "0")),
        model_train_args(),
        st.lists(JUNK, max_size=3),
    ))


def exit_status(argv, capsys):
    """Run ``ipupod argv`` in this process: its exit status and standard error."""
    try:
        main(argv)
        status = 0
    except SystemExit as end:
        status = end.code if isinstance(end.code, int) else 1
    return status, capsys.readouterr().err


FUZZ = settings(max_examples=60, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture,
                                       HealthCheck.too_slow])


@FUZZ
@given(bench_args())
def test_any_bench_arguments_end_in_a_result_or_a_one_line_error(capsys, argv):
    status, err = exit_status(argv, capsys)
    assert status in (0, 2), (argv, err)
    assert "Traceback" not in err


@FUZZ
@given(other_args())
def test_any_topology_or_train_arguments_end_in_a_result_or_a_one_line_error(capsys, argv):
    status, err = exit_status(argv, capsys)
    assert status in (0, 2), (argv, err)
    assert "Traceback" not in err


@pytest.mark.parametrize("argv, message", [
    (["topology", "show", "x" * 300], "unknown topology 'xxx"),
    (["bench", "allreduce", "-b", "9" * 5000], "cannot read the size"),
    (["bench", "allreduce", "--group", "orthogonal:²"], "needs a positive size"),
    (["bench", "allreduce", "--group", "consecutive:" + "9" * 5000], "(5,012 characters)"),
    (["train", "--mode", "phantom", "--topology", "examples/topologies/two-level.yaml",
      "--steps", "1"], "has no host to stream its training input from"),
    (["train-report", "--out", "/proc/nope", "--servers", "1"], "cannot write the report"),
    (["serve", "--link-tls", "/nope", "--port", "0", "--metrics-port", "-1"],
     "link TLS: cert_file '/nope/cert.pem' is not a file"),
])
def test_inputs_that_used_to_end_in_a_traceback_get_one_line(capsys, argv, message):
    status, err = exit_status(argv, capsys)
    assert status == 2
    assert message in err and len(err) < 1024
