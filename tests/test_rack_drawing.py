"""`topology show --format dot` draws the hardware as it is racked: servers side by side
(a POD's racks, a DSS 8440), machines stacked in order and cards in their slots, links
coloured by type with one legend. Checked on the DOT text and on where Graphviz puts each
node (``dot -Tjson``), never on pixels."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from cluster.errors import UserError
from cluster.model import hardware as hw
from cluster.model.builder import TopologyBuilder
from cluster.model.presets import build_preset
from cluster.model.rack_drawing import render_dot

needs_dot = pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed "
                               "(.ci/run installs Debian's graphviz when it runs as root)")


def _strip_quoted(text: str) -> str:
    """DOT text with its double-quoted strings (escapes included) removed."""
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)


def _laid_out(spec: str) -> tuple[dict[str, tuple[float, float]], float, float]:
    """Where ``dot`` puts each node (points, y up) and the picture's width and height."""
    run = subprocess.run(["dot", "-Tjson"], input=render_dot(build_preset(spec)),
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    drawing = json.loads(run.stdout)
    x0, y0, x1, y1 = map(float, drawing["bb"].split(","))
    at = {node["name"]: tuple(map(float, node["pos"].split(",")))
          for node in drawing["objects"] if "pos" in node}
    return at, x1 - x0, y1 - y0


def _edge_lines(dot: str) -> list[str]:
    return [line.strip() for line in dot.splitlines()
            if " -- " in line and "style=invis" not in line]


@needs_dot
@pytest.mark.parametrize("spec", ["pod16", "pod64", "pod128", "pod256", "dss8440",
                                  "dss8440x2", "dss8440x4"])
def test_the_picture_renders_near_square_not_as_a_strip(spec):
    _, width, height = _laid_out(spec)
    assert max(width, height) / min(width, height) < 4, (width, height)  # was 37:1 for pod64


@needs_dot
def test_a_pod64s_machines_stand_in_order_down_its_rack_each_a_ladder():
    at, _, _ = _laid_out("pod64")
    tops = [at[f"r0.m{m}.ipu0"][1] for m in range(16)]
    assert tops == sorted(tops, reverse=True)  # m0 at the top, m15 at the bottom
    for m in range(16):  # ipu0 ipu1 over ipu2 ipu3: the ladder's two rungs
        ipu = [at[f"r0.m{m}.ipu{k}"] for k in range(4)]
        assert ipu[0][0] < ipu[1][0] and ipu[2][0] < ipu[3][0]
        assert ipu[0][1] == ipu[1][1] > ipu[2][1] == ipu[3][1]
    assert at["r0.host"][1] > tops[0]


@needs_dot
def test_racks_stand_side_by_side_in_order():
    at, _, _ = _laid_out("pod128")
    for m in range(16):
        assert at[f"r0.m{m}.ipu0"][0] < at[f"r1.m{m}.ipu0"][0]
        assert at[f"r0.m{m}.ipu0"][1] == at[f"r1.m{m}.ipu0"][1]


@needs_dot
def test_a_dss8440s_cards_stand_in_their_slots_and_servers_stack():
    at, _, _ = _laid_out("dss8440x2")
    for s in range(2):
        xs = [at[f"s{s}.card{c}.ipu0"][0] for c in range(8)]
        assert xs == sorted(xs) and len(set(xs)) == 8
        assert at[f"s{s}.card0.ipu0"][1] > at[f"s{s}.card0.ipu1"][1]
    assert at["s0.card0.ipu1"][1] > at["s1.host"][1]


def test_boxes_are_servers_holding_their_cards_or_machines_in_order():
    dot = render_dot(build_preset("pod128"))
    assert dot.count('subgraph "cluster_') == 2 + 32
    rack0 = dot.split('subgraph "cluster_r0" {', 1)[1].split('subgraph "cluster_r1"', 1)[0]
    machines = re.findall(r'subgraph "cluster_(r\d+\.m\d+)"', rack0)
    assert machines == [f"r0.m{m}" for m in range(16)]
    assert '"r0.m3.gw" [label="gw", shape=ellipse];' in rack0
    assert '"r0.host" [label="host", shape=ellipse];' in rack0
    card = render_dot(build_preset("dss8440")).split('subgraph "cluster_s0.card3" {', 1)[1]
    card = card.split("}", 1)[0]
    assert '"s0.card3.ipu0" [label="ipu0", shape=box];' in card
    assert '"s0.card3" [label="card", shape=ellipse];' in card


def test_every_link_is_one_unlabelled_edge_and_the_legend_names_each_type():
    topology = build_preset("dss8440x2")
    dot = render_dot(topology)
    edges = _edge_lines(dot)
    assert len(edges) == topology.link_count_physical
    assert not any("label=" in line for line in edges)
    legend = dot.split('"legend: link types" [', 1)[1].split("\n", 1)[0]
    assert "<td align=\"left\">ipu-link-rung</td><td align=\"right\">96 GB/s each way</td>" \
           "<td align=\"left\">16 links</td>" in legend
    assert "pcie-gen3-x16</td><td align=\"right\">15.7538 GB/s each way</td>" \
           "<td align=\"left\">48 links, 2 bundles of 4 (thick)</td>" in legend
    assert "infiniband-100g" in legend and "np." not in dot and "int64" not in dot
    bundles = [line for line in edges if "penwidth=2.5" in line]
    assert len(bundles) == 4  # two PCIe uplinks of 4, two InfiniBand bundles of 2


def test_host_links_are_dashed_and_named_so_in_the_legend():
    dot = render_dot(build_preset("pod16"))
    dashed = [line for line in _edge_lines(dot) if "style=dashed" in line]
    assert len(dashed) == 4 and all('"r0.host" --' in line or '-- "r0.host"' in line
                                    for line in dashed)
    assert "host-roce-100g (dashed: host only)" in dot


def test_dot_is_an_undirected_graph_with_balanced_braces():
    dot = render_dot(build_preset("dss8440"))
    assert dot.startswith('graph "dss8440" {\n') and dot.rstrip().endswith("}")
    assert "->" not in _strip_quoted(dot)
    depth = 0
    for char in _strip_quoted(re.sub(r"<<table.*</table>>", "", dot)):
        depth += {"{": 1, "}": -1}.get(char, 0)
        assert depth >= 0
    assert depth == 0


@needs_dot
def test_a_topology_without_servers_is_laid_out_freely_and_renders():
    b = TopologyBuilder('odd "name" & <co>')
    ipus = b.add_ipus(['ipu "0"', "ipu1"], hw.gc200())
    b.add_links(ipus[:1], ipus[1:], hw.ipu_link_mk2())
    dot = render_dot(b.build())
    assert dot.startswith('graph "odd \\"name\\" & <co>" {')
    assert '"ipu \\"0\\"" [label="ipu \\"0\\"", shape=box];' in dot
    assert "constraint=false" not in dot
    run = subprocess.run(["dot", "-Tsvg"], input=dot, capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 0, run.stderr


def test_dot_refuses_huge_topologies():
    with pytest.raises(UserError, match="unreadable.*--format json"):
        render_dot(build_preset("pod65536"))
