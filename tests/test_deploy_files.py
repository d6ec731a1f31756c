"""The files in deploy/ (Prometheus, Grafana, compose, KubeRay) are checked by parsing, since no
Docker engine or Kubernetes cluster runs them here: they parse, every query names only the
metrics the exporter exposes, and the pieces point at each other consistently."""

import json
import re
import shlex
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
DASHBOARDS = DEPLOY / "grafana" / "dashboards"
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}  # the dashboard's input
PROVISIONED = {"type": "prometheus", "uid": "prometheus"}  # what deploy/ provisions

# The exporter's metric names (docs/deploy.md); histograms add _bucket, _sum and _count.
HISTOGRAMS = {
    "ipupod_collective_sim_duration_seconds",
    "ipupod_collective_wall_duration_seconds",
}
METRICS = {
    "ipupod_ipu_memory_used_bytes",
    "ipupod_ipu_memory_capacity_bytes",
    "ipupod_ipu_health",
    "ipupod_ipu_supersteps_total",
    "ipupod_ipu_sim_busy_seconds_total",
    "ipupod_link_bytes_total",
    "ipupod_link_sim_busy_seconds_total",
    "ipupod_link_bandwidth_bytes_per_second",
    "ipupod_collective_runs_total",
    "ipupod_collective_bytes_total",
    "ipupod_partitions",
    "ipupod_ipus",
    "ipupod_partition_ipus",
    "ipupod_actor_restarts_total",
    "ipupod_faults_total",
} | HISTOGRAMS
VARIABLES = {"partition", "link_type"}
METRIC_NAME = re.compile(r"ipupod_[a-z0-9_]+")

YAML_FILES = sorted([*DEPLOY.rglob("*.yml"), *DEPLOY.rglob("*.yaml")])
DASHBOARD_FILES = sorted(DASHBOARDS.glob("*.json"))


def load_yaml(path: Path):
    return yaml.safe_load(path.read_text())


def dashboard(path: Path) -> dict:
    return json.loads(path.read_text())


def panels(board: dict) -> list[dict]:
    """Every panel but rows, including those inside collapsed rows."""
    found = []
    for panel in board["panels"]:
        if panel["type"] == "row":
            found.extend(panel.get("panels", []))
        elif panel["type"] != "text":  # words, no query
            found.append(panel)
    return found


def test_the_collectives_dashboard_says_how_to_get_a_trace():
    board = dashboard(DASHBOARDS / "collectives.json")
    [text] = [p for p in board["panels"] if p["type"] == "text"]
    content = text["options"]["content"]
    assert text["options"]["mode"] == "markdown"
    assert "ipupod bench allreduce --partition NAME" in content and "--trace" in content
    assert "StreamBenchmark" in content and "trace_chunk" in content


def expressions(board: dict) -> list[str]:
    """Every PromQL expression: the panels' targets and the query variables."""
    exprs = [t["expr"] for p in panels(board) for t in p.get("targets", [])]
    for var in board.get("templating", {}).get("list", []):
        if var.get("type") == "query":
            query = var["query"]
            exprs.append(query["query"] if isinstance(query, dict) else query)
    return exprs


def all_expressions() -> list[tuple[str, str]]:
    return [(path.name, expr) for path in DASHBOARD_FILES for expr in expressions(dashboard(path))]


def known(name: str) -> bool:
    if name in METRICS:
        return True
    base = re.sub(r"_(bucket|sum|count)$", "", name)
    return base != name and base in HISTOGRAMS


def test_the_expected_files_are_there():
    assert {p.name for p in DASHBOARD_FILES} == {"pod-overview.json", "links.json",
                                                 "collectives.json"}
    for name in ["prometheus.yml", "docker-compose.yml", "Dockerfile", "README.md",
                 "kuberay/raycluster.yaml", "kuberay/raycluster-multinode.yaml",
                 "kuberay/README.md",
                 "grafana/provisioning/datasources/prometheus.yml",
                 "grafana/provisioning/dashboards/dashboards.yml"]:
        assert (DEPLOY / name).is_file(), name


@pytest.mark.parametrize("path", YAML_FILES, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_every_yaml_file_parses(path):
    documents = list(yaml.safe_load_all(path.read_text()))
    assert documents and all(isinstance(d, dict) for d in documents)


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.name)
def test_every_dashboard_parses_and_has_panels_with_queries(path):
    board = dashboard(path)
    assert board["schemaVersion"] == 39
    assert board["uid"] and board["title"]
    found = panels(board)
    assert found
    ids = [p["id"] for p in board["panels"]] + [p["id"] for p in found
                                                 if p not in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    for panel in found:
        assert panel["datasource"] == DATASOURCE, panel["title"]
        assert panel["targets"], panel["title"]
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), panel["title"]
        for target in panel["targets"]:
            assert target["datasource"] == DATASOURCE, panel["title"]
            assert target["expr"].strip(), panel["title"]


def test_queries_name_only_the_exporters_metrics():
    seen = set()
    for name, expr in all_expressions():
        names = METRIC_NAME.findall(expr)
        assert names, f"{name}: {expr!r} names no ipupod metric"
        unknown = [n for n in names if not known(n)]
        assert not unknown, f"{name}: {expr!r} names {unknown}"
        seen.update(re.sub(r"_(bucket|sum|count)$", "", n) if n not in METRICS else n
                    for n in names)
    # Every metric is shown somewhere.
    assert seen == METRICS


def test_queries_are_balanced_and_use_variables_as_regex_matchers():
    for name, expr in all_expressions():
        text = re.sub(r'"[^"]*"', '""', expr)  # label values may hold anything
        assert text.count('"') % 2 == 0, f"{name}: {expr!r}"
        depth = []
        for char in text:
            if char in "([{":
                depth.append(char)
            elif char in ")]}":
                assert depth and "([{"[")]}".index(char)] == depth.pop(), f"{name}: {expr!r}"
        assert not depth, f"{name}: {expr!r}"
        for variable in re.findall(r"\$\{?(\w+)", expr):
            assert variable in VARIABLES, f"{name}: {expr!r}"
        # A variable is only ever the whole value of a regex matcher: =~"$var".
        stripped = re.sub(r'=~"\$(partition|link_type)"', "", expr)
        assert "$" not in stripped, f"{name}: {expr!r}"


@pytest.mark.parametrize("path", DASHBOARD_FILES, ids=lambda p: p.name)
def test_template_variables(path):
    board = dashboard(path)
    chooser, *rest = board["templating"]["list"]
    assert (chooser["name"], chooser["type"], chooser["query"]) == (
        "datasource", "datasource", "prometheus")  # the datasource is an input
    assert chooser["current"]["value"] == PROVISIONED["uid"]
    variables = {v["name"]: v for v in rest}
    queries = {"partition": "label_values(ipupod_partition_ipus, partition)",
               "link_type": "label_values(ipupod_link_bytes_total, link_type)"}
    assert variables and set(variables) <= VARIABLES
    text = json.dumps([p["targets"] for p in panels(board)])
    for name, var in variables.items():
        assert var["query"] == queries[name]
        assert var["datasource"] == DATASOURCE
        assert var["includeAll"] and var["allValue"] == ".*"
        assert f'=~\\"${name}\\"' in text, f"{path.name}: ${name} is used by no query"
    # And every variable a query uses is defined on that dashboard.
    for used in set(re.findall(r"\$(\w+)", text)):
        assert used in variables, f"{path.name}: ${used} is not defined"


def test_variables_where_they_matter():
    def uses(name):
        return {v["name"] for v in dashboard(DASHBOARDS / name)["templating"]["list"]}

    assert "partition" in uses("collectives.json")
    assert "partition" in uses("pod-overview.json")
    assert "link_type" in uses("links.json")


def compose() -> dict:
    return load_yaml(DEPLOY / "docker-compose.yml")


def container_ports(service: dict) -> set[int]:
    """The container side of each published port ("HOST_IP:HOST:CONTAINER" or shorter)."""
    ports = set()
    for entry in service["ports"]:
        if isinstance(entry, dict):
            ports.add(int(entry["target"]))
        else:
            ports.add(int(str(entry).split("/")[0].rsplit(":", 1)[-1]))
    return ports


def option(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_prometheus_scrapes_the_port_the_compose_service_serves_metrics_on():
    prometheus = load_yaml(DEPLOY / "prometheus.yml")
    [job] = [j for j in prometheus["scrape_configs"] if j["job_name"] == "ipupod"]
    assert job["scrape_interval"] == "5s"
    assert job.get("metrics_path", "/metrics") == "/metrics"
    [target] = [t for config in job["static_configs"] for t in config["targets"]]
    host, port = target.rsplit(":", 1)

    services = compose()["services"]
    assert host in services, f"{target}: no compose service {host}"
    ipupod = services[host]
    command = ipupod["command"]
    command = shlex.split(command) if isinstance(command, str) else command
    assert command[:2] == ["ipupod", "serve"]
    assert option(command, "--host") == "0.0.0.0"
    metrics_port = int(option(command, "--metrics-port"))
    assert int(port) == metrics_port
    assert {8090, metrics_port} <= container_ports(ipupod)


def test_compose_wires_prometheus_and_grafana():
    services = compose()["services"]
    assert set(services) >= {"ipupod", "prometheus", "grafana"}
    assert services["ipupod"]["build"]["dockerfile"] == "deploy/Dockerfile"
    assert (DEPLOY / services["ipupod"]["build"]["context"] / "pyproject.toml").is_file()

    prometheus = services["prometheus"]
    assert prometheus["image"].startswith("prom/prometheus")
    mounts = {v.split(":")[0]: v.split(":")[1] for v in prometheus["volumes"]}
    assert mounts["./prometheus.yml"] == "/etc/prometheus/prometheus.yml"

    grafana = services["grafana"]
    assert grafana["image"].startswith("grafana/grafana")
    mounts = {v.split(":")[0]: v.split(":")[1] for v in grafana["volumes"]}
    assert mounts["./grafana/provisioning"] == "/etc/grafana/provisioning"
    assert mounts["./grafana/dashboards"] == "/var/lib/grafana/dashboards"
    for local in ["./grafana/provisioning", "./grafana/dashboards"]:
        assert (DEPLOY / local).is_dir()
    env = grafana["environment"]
    assert env["GF_AUTH_ANONYMOUS_ENABLED"] == "true"
    assert env["GF_AUTH_ANONYMOUS_ORG_ROLE"] == "Viewer"

    # The provisioned datasource and dashboard folder are the ones the dashboards and mounts use.
    [source] = load_yaml(DEPLOY / "grafana/provisioning/datasources/prometheus.yml")["datasources"]
    assert (source["type"], source["uid"]) == (PROVISIONED["type"], PROVISIONED["uid"])
    assert source["url"] == "http://prometheus:9090"
    [provider] = load_yaml(DEPLOY / "grafana/provisioning/dashboards/dashboards.yml")["providers"]
    assert provider["type"] == "file"
    assert provider["options"]["path"] == "/var/lib/grafana/dashboards"


def test_dockerfile():
    text = (DEPLOY / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.M)
    assert re.search(r"^EXPOSE 8090 9464$", text, re.M)
    [cmd] = re.findall(r"^CMD (.+)$", text, re.M)
    assert json.loads(cmd) == ["ipupod", "serve", "--host", "0.0.0.0", "--insecure"]
    assert "pip install" in text


def test_raycluster_nodes_offer_the_ipu_resource():
    cluster = load_yaml(DEPLOY / "kuberay" / "raycluster.yaml")
    assert cluster["apiVersion"] == "ray.io/v1" and cluster["kind"] == "RayCluster"
    spec = cluster["spec"]
    groups = [spec["headGroupSpec"], *spec["workerGroupSpecs"]]
    assert len(groups) >= 2
    for group in groups:
        # KubeRay writes `--resources=VALUE` into a bash command line: VALUE must come out of
        # the shell's quoting as the JSON Ray expects.
        [argument] = shlex.split("--resources=" + group["rayStartParams"]["resources"])
        assert json.loads(argument.removeprefix("--resources=")) == {"IPU": 64}
        [container] = group["template"]["spec"]["containers"]
        assert container["image"]
    head_ports = {p["containerPort"]: p["name"]
                  for p in spec["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"]}
    assert {8090, 9464} <= set(head_ports)
    assert all(len(name) <= 15 for name in head_ports.values())  # Kubernetes' limit
    assert head_ports[9464] != "metrics"  # KubeRay takes that name for Ray's own metrics port


def test_multinode_raycluster_offers_one_machine_of_ipus_per_worker_pod():
    cluster = load_yaml(DEPLOY / "kuberay" / "raycluster-multinode.yaml")
    assert cluster["apiVersion"] == "ray.io/v1" and cluster["kind"] == "RayCluster"
    spec = cluster["spec"]

    def ipus(group: dict) -> dict:
        [argument] = shlex.split("--resources=" + group["rayStartParams"]["resources"])
        return json.loads(argument.removeprefix("--resources="))

    assert ipus(spec["headGroupSpec"]) == {"IPU": 0}  # devices never on the head
    by_group = {g["groupName"]: ipus(g) for g in spec["workerGroupSpecs"]}
    assert by_group == {"dss8440-servers": {"IPU": 16}, "pod64-racks": {"IPU": 64}}
    head_ports = {p["containerPort"]
                  for p in spec["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"]}
    assert {6379, 8090, 9464} <= head_ports


def test_docs_list_every_metric():
    text = (ROOT / "docs" / "deploy.md").read_text()
    listed = set(re.findall(r"`(ipupod_[a-z0-9_]+)`", text))
    assert listed >= METRICS
