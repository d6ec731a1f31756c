"""`topology show --format dot --level unit` draws a card or machine as one node, so a POD64
and beyond stay readable: checked on the DOT text and on the picture Graphviz makes."""

import re
import shutil
import struct
import subprocess

import pytest

from cluster.model.rack_drawing import unit_of_nodes
from cluster.model.spec import load_topology
from cluster.model.unit_drawing import render_unit_dot


def test_a_pod64_is_sixteen_machines_around_its_host():
    dot = render_unit_dot(load_topology("pod64"))
    machines = re.findall(r'^  "(r0\.m\d+)" \[label="r0\.m\d+\\nIPU-M2000, 4 IPUs", '
                          r"shape=box3d\];$", dot, re.M)
    assert len(machines) == 16
    assert '"r0.m0.gw"' not in dot  # a machine's gateway is drawn as the machine
    edges = [line for line in dot.splitlines() if " -- " in line]
    rails = [line for line in edges if "ipu-link 32 GB/s" in line]
    assert len(rails) == 16 and all(line.endswith('x2"];') for line in rails)
    assert sum("style=dashed" in line for line in edges) == 16  # each machine to the host


def test_a_cards_pcie_endpoint_is_drawn_as_the_card():
    topology = load_topology("dss8440")
    drawn = dict(zip(topology.node_names, unit_of_nodes(topology)))
    assert drawn["s0.card3.ipu1"] == "s0.card3"
    assert drawn["s0.host"] == "s0.host" and drawn["s0.pcie"] == "s0.pcie"


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz is not installed "
                    "(.ci/run installs Debian's graphviz when it runs as root)")
@pytest.mark.parametrize("spec", ["pod64", "pod256"])
def test_the_picture_is_a_picture_not_a_strip(spec, tmp_path):
    picture = tmp_path / f"{spec}.png"
    subprocess.run(["dot", "-Tpng", "-o", str(picture)],
                   input=render_unit_dot(load_topology(spec)), text=True, check=True,
                   timeout=120)
    width, height = struct.unpack(">II", picture.read_bytes()[16:24])
    assert width <= 2500 and height <= 2500, (width, height)
    assert max(width, height) / min(width, height) < 2  # the per-IPU pod64: 18,263 x 489
