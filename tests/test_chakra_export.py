"""``ipupod train --chakra-out DIR``: the priced step written as a Chakra trace, read back
by the reader and replayed on the same topology in the step's simulated time (to 1e-9
relative); runs the export does not cover, a folder that holds a trace already and
``--torch`` are one error line, with nothing written."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from cluster.training.chakra.et_nodes import Collective, CommType, Compute, NodeKind
from cluster.training.chakra.et_reader import read_chakra_trace


def train_and_export(ipupod_main, folder: Path, *options: str) -> tuple[float, list[str]]:
    """The step's simulated seconds, and the replay command the note gives."""
    run = ipupod_main("train", "--mode", "phantom", "--steps", "1", "--json",
                      "--chakra-out", str(folder), *options)
    assert run.returncode == 0, run.stderr
    [note] = [line for line in run.stderr.splitlines() if "Chakra trace written" in line]
    command = shlex.split(note.split("replay it: ", 1)[1])
    assert command[:2] == ["ipupod", "replay"]
    return json.loads(run.stdout)["steps"][0]["sim_seconds"], command[1:]


@pytest.mark.parametrize("options", [
    ("--model", "resnet50", "--topology", "pod16"),
    ("--model", "resnet50", "--topology", "pod128"),
    ("--model", "mlp", "--servers", "2"),
])
def test_an_exported_step_replays_in_the_steps_time(tmp_path, ipupod_main, options) -> None:
    folder = tmp_path / "trace"
    step_seconds, replay = train_and_export(ipupod_main, folder, *options)
    run = ipupod_main(*replay, "--json")
    assert run.returncode == 0, run.stderr
    replayed = json.loads(run.stdout)
    assert replayed["end_seconds"] == pytest.approx(step_seconds, rel=1e-9, abs=0)
    trace = read_chakra_trace(str(folder / "step"))
    assert len(trace.ranks) == replayed["ranks"] > 1
    kinds = [node.kind for node in trace.ranks[0].nodes]
    assert kinds == [NodeKind.COMP, NodeKind.COMP, NodeKind.COMM_COLL, NodeKind.COMP]
    allreduce = trace.ranks[0].nodes[2].detail
    assert isinstance(allreduce, Collective) and allreduce.comm_type is CommType.ALL_REDUCE
    forward = trace.ranks[0].nodes[1]
    assert isinstance(forward.detail, Compute) and forward.detail.duration_seconds
    assert forward.duration_micros == round(forward.detail.duration_seconds * 1e6)


@pytest.mark.parametrize("options", [
    ("--model", "bert-large", "--topology", "pod16", "--ipus-per-replica", "4",
     "--replicas-per-server", "1", "--optimizer-state", "streaming"),
    ("--model", "bert-large", "--topology", "pod16", "--ipus-per-replica", "16",
     "--final-stage-on-first-ipu", "--pipeline-schedule", "1f1b"),
])
def test_an_exported_pipelined_step_replays_in_the_steps_time(tmp_path, ipupod_main,
                                                              options) -> None:
    folder = tmp_path / "trace"
    step_seconds, replay = train_and_export(ipupod_main, folder, *options)
    run = ipupod_main(*replay, "--json")
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout)["end_seconds"] == pytest.approx(step_seconds, rel=1e-9, abs=0)
    trace = read_chakra_trace(str(folder / "step"))
    first, second = trace.ranks[0].nodes, trace.ranks[1].nodes
    assert first[0].name == "host input" and second[0].kind is NodeKind.COMM_RECV
    sends = [n.detail for n in first if n.kind is NodeKind.COMM_SEND]
    receives = [n.detail for n in second if n.kind is NodeKind.COMM_RECV]
    assert sends and [(s.src, s.dst, s.tag, s.size_bytes) for s in sends if s.dst == 1] == [
        (r.src, r.dst, r.tag, r.size_bytes) for r in receives if r.src == 0]
    assert all(s.size_bytes > 0 for s in sends)
    assert [n.name for n in first[-2:]] == ["allreduce(gradients)", "weight update"]


@pytest.mark.parametrize("options", [
    ("--model", "resnet50", "--topology", "pod128", "--optimizer-state", "sharded"),
    ("--model", "mlp", "--servers", "2", "--optimizer-state", "sharded"),
])
def test_an_exported_sharded_reduction_replays_in_the_steps_time(tmp_path, ipupod_main,
                                                                 options) -> None:
    folder = tmp_path / "trace"
    step_seconds, replay = train_and_export(ipupod_main, folder, *options)
    run = ipupod_main(*replay, "--json")
    assert run.returncode == 0, run.stderr
    replayed = json.loads(run.stdout)
    assert replayed["end_seconds"] == pytest.approx(step_seconds, rel=1e-9, abs=0)
    trace = read_chakra_trace(str(folder / "step"))
    collectives = [n.detail for n in trace.ranks[-1].nodes if isinstance(n.detail, Collective)]
    per_rack = len(trace.ranks) // 2  # two racks (servers), the last rank in the second
    assert [(c.comm_type, c.pg_name) for c in collectives] == [
        (CommType.REDUCE_SCATTER, "rack 1"), (CommType.ALL_REDUCE, f"place {per_rack - 1}"),
        (CommType.ALL_GATHER, "rack 1")]
    scatter, shard, gather = (c.size_bytes for c in collectives)
    assert scatter == gather == shard * per_rack
    assert len(replayed["groups"]["rack 1"]) == per_rack
    assert len(replayed["groups"][f"place {per_rack - 1}"]) == 2


@pytest.mark.parametrize(("options", "last"), [
    (("--servers", "2"), ["allreduce(gradients)", "weight update"]),
    (("--topology", "pod16", "--gradient-accumulation", "3", "--hidden", "256,512,128"),
     ["allreduce(gradients)", "weight update"]),
    (("--servers", "2", "--optimizer-state", "sharded"),
     ["reduce_scatter(gradients)", "allreduce(gradient shard)", "weight update",
      "all_gather(weights)"]),
])
def test_an_exported_column_split_replays_in_the_steps_time(tmp_path, ipupod_main, options,
                                                            last) -> None:
    folder = tmp_path / "trace"
    step_seconds, replay = train_and_export(ipupod_main, folder, "--model", "mlp",
                                            "--ipus-per-replica", "2", "--split", "shard",
                                            "--algorithm", "auto", *options)
    run = ipupod_main(*replay, "--json")
    assert run.returncode == 0, run.stderr
    replayed = json.loads(run.stdout)
    assert replayed["end_seconds"] == pytest.approx(step_seconds, rel=1e-9, abs=0)
    nodes = read_chakra_trace(str(folder / "step")).ranks[1].nodes
    exchanges = [n.detail for n in nodes
                 if isinstance(n.detail, Collective) and n.detail.pg_name == "replica 0"]
    per_micro = [CommType.BROADCAST, CommType.ALL_GATHER, CommType.REDUCE_SCATTER]
    kinds = [c.comm_type for c in exchanges]
    assert kinds[:3] == per_micro and len(kinds) % len(set(kinds)) == 0
    assert [n.name for n in nodes[-len(last):]] == last
    assert replayed["groups"]["replica 0"] == [0, 1]


GPT_TENSOR = ("--model", "gpt3-350m", "--micro-batch", "1", "--optimizer-state", "streaming")
MOE = ("--model", str(Path(__file__).resolve().parent.parent / "examples" / "workloads"
                      / "moe-small.yaml"), "--micro-batch", "4")


@pytest.mark.parametrize(("options", "groups"), [
    (("--topology", "pod16", "--tensor-parallel", "4"), {"tensor 1": [4, 5, 6, 7]}),
    (("--topology", "pod16", "--tensor-parallel", "2x2", "--gradient-accumulation", "2"),
     {"tensor 1 axis t1 1": [6, 7], "tensor 1 axis t2 0": [4, 7]}),  # IPU-Link order 4, 5, 7, 6
])
def test_an_exported_tensor_parallel_step_replays_in_the_steps_time(tmp_path, ipupod_main,
                                                                    options, groups) -> None:
    folder = tmp_path / "trace"
    step_seconds, replay = train_and_export(ipupod_main, folder, *GPT_TENSOR, *options)
    run = ipupod_main(*replay, "--json")
    assert run.returncode == 0, run.stderr
    replayed = json.loads(run.stdout)
    assert replayed["end_seconds"] == pytest.approx(step_seconds, rel=1e-9, abs=0)
    assert {name: replayed["groups"][name] for name in groups} == groups
    nodes = read_chakra_trace(str(folder / "step")).ranks[5].nodes
    tensor = [n.detail for n in nodes if isinstance(n.detail, Collective)
              and n.detail.pg_name.startswith("tensor")]
    assert tensor and all(c.comm_type is CommType.ALL_REDUCE for c in tensor)
    assert nodes[1].name == "forward (its share), micro-batch 0"
    assert nodes[2].kind is NodeKind.COMM_COLL
    assert [n.name for n in nodes[-2:]] == ["allreduce(gradients)", "weight update"]
    assert nodes[-2].detail.pg_name == "replica-ipu1"


@pytest.mark.parametrize(("options", "group"), [
    (("--topology", "pod16", "--expert-parallel", "8"), [8, 9, 10, 11, 12, 13, 14, 15]),
    (("--topology", "pod64", "--expert-parallel", "4", "--optimizer-state", "sharded",
      "--gradient-accumulation", "2"), [4, 5, 6, 7]),
])
def test_an_exported_expert_parallel_step_replays_in_the_steps_time(tmp_path, ipupod_main,
                                                                    options, group) -> None:
    folder = tmp_path / "trace"
    step_seconds, replay = train_and_export(ipupod_main, folder, *MOE, *options)
    run = ipupod_main(*replay, "--json")
    assert run.returncode == 0, run.stderr
    replayed = json.loads(run.stdout)
    assert replayed["end_seconds"] == pytest.approx(step_seconds, rel=1e-9, abs=0)
    assert replayed["groups"]["experts 1"] == group
    nodes = read_chakra_trace(str(folder / "step")).ranks[group[0]].nodes
    all_to_all = [n.detail for n in nodes if isinstance(n.detail, Collective)
                  and n.detail.comm_type is CommType.ALL_TO_ALL]
    assert all_to_all and {c.pg_name for c in all_to_all} == {"experts 1"}
    assert nodes[2].name == "all_to_all(forward dispatch)"


@pytest.mark.parametrize(("options", "refusal"), [
    (("--model", "bert-large", "--topology", "pod16", "--ipus-per-replica", "4",
      "--optimizer-state", "streaming"),
     "error: --chakra-out exports a pipelined step of one replica only, for now: this run "
     "has 4 replicas"),
    (("--model", "bert-large", "--topology", "pod16", "--ipus-per-replica", "16",
      "--pipeline-schedule", "popart"),
     "error: --chakra-out does not export a lock-step pipeline schedule (popart) yet"),
    (("--model", "mlp", "--servers", "2", "--ipus-per-replica", "2", "--split", "shard"),
     "error: --chakra-out exports a column split with --algorithm auto only: its exchanges "
     "run auto and its gradient all-reduce hierarchical"),
    (("--model", "mlp", "--servers", "1", "--ipus-per-replica", "4", "--split", "shard",
      "--algorithm", "auto"),
     "error: --chakra-out does not export a column split whose replica's IPUs, in IPU-Link "
     "order (0, 1, 3, 2), are not in rank order"),
    ((*GPT_TENSOR, "--topology", "pod16", "--tensor-parallel", "2", "--ipus-per-replica",
      "4"), "error: --chakra-out does not export pipeline stages of tensor groups "
     "(--ipus-per-replica 4 with --tensor-parallel 2) yet: the pricing takes the busiest "
     "stage's all-reduces"),
    ((*MOE, "--topology", "pod16", "--expert-parallel", "4", "--ipus-per-replica", "2"),
     "error: --chakra-out does not export expert parallelism in a pipeline "
     "(--ipus-per-replica 2) yet: the pricing takes the busiest stage IPU's all-to-alls"),
])
def test_a_step_the_export_would_not_reproduce_is_refused_before_it_trains(
        tmp_path, ipupod_main, options, refusal) -> None:
    folder = tmp_path / "trace"
    run = ipupod_main("train", "--mode", "phantom", *options, "--chakra-out", str(folder))
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.startswith(refusal) and len(run.stderr.splitlines()) == 1
    assert not folder.exists()


def test_a_folder_holding_a_trace_is_refused(tmp_path, ipupod_main) -> None:
    (tmp_path / "old.0.et").write_bytes(b"")
    run = ipupod_main("train", "--mode", "phantom", "--model", "resnet50", "--topology",
                      "pod16", "--chakra-out", str(tmp_path))
    assert run.returncode == 2
    assert "already holds Chakra trace files" in run.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.0.et"]


def test_a_torch_model_cannot_be_exported(tmp_path, ipupod_main) -> None:
    run = ipupod_main("train", "--torch", "x.py:f", "--sample-shape", "3",
                      "--chakra-out", str(tmp_path / "t"))
    assert run.returncode == 2
    assert run.stderr.strip() == ("error: --chakra-out exports a priced workload's step, not "
                                  "a --torch model's: drop one of them")
