"""The layers hold (docs/architecture.md): no import cycle between modules, imports inside
functions only to defer a heavy dependency, and commands that need no Ray or gRPC import
neither."""

import ast
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("cluster", "gcl", "ipu_node", "ipupod_proto")
# Dependencies worth deferring: slow to import, or needed by only some commands.
HEAVY = ("ray", "grpc", "grpc_health", "grpc_reflection", "google", "matplotlib", "rich",
         "prometheus_client", "scipy", "torch")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph(*PACKAGES, include_external_packages=True, cache_dir=None,
                             exclude_type_checking_imports=True)


def strongly_connected(nodes: list[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components of more than one node: each is an import cycle."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in sorted(edges[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in nodes:
        if node not in index:
            visit(node)
    return cycles


def test_no_two_modules_import_each_other_even_indirectly(graph):
    ours = sorted(m for m in graph.modules if m.split(".")[0] in PACKAGES)
    edges = {m: {o for o in graph.find_modules_directly_imported_by(m) if o in ours}
             for m in ours}
    assert strongly_connected(ours, edges) == []


@pytest.fixture(scope="module")
def graph_with_type_imports() -> grimp.ImportGraph:
    """Our modules' imports, those under ``if TYPE_CHECKING`` too: a type-only import that
    closes a circle still makes two modules that cannot be read or changed apart."""
    return grimp.build_graph(*PACKAGES[:3], cache_dir=None, exclude_type_checking_imports=False)


@pytest.mark.parametrize("package", ["cluster.model", "cluster", "gcl", "ipu_node"])
def test_no_import_circle_even_through_type_only_imports(graph_with_type_imports, package):
    graph = graph_with_type_imports
    ours = sorted(m for m in graph.modules if m == package or m.startswith(package + "."))
    edges = {m: {o for o in graph.find_modules_directly_imported_by(m) if o in ours}
             for m in ours}
    assert strongly_connected(ours, edges) == []


def test_topology_imports_neither_its_routes_nor_its_faults_module(graph_with_type_imports):
    for derived in ("cluster.model.routing", "cluster.model.link_faults"):
        assert not graph_with_type_imports.chain_exists(
            importer="cluster.model.topology", imported=derived)
    assert graph_with_type_imports.chain_exists(
        importer="cluster.model.routing", imported="cluster.model.topology")


def test_the_executor_does_not_import_the_pod_that_calls_it(graph_with_type_imports):
    assert not graph_with_type_imports.chain_exists(
        importer="ipu_node.executor", imported="ipu_node.pod")
    assert graph_with_type_imports.chain_exists(
        importer="ipu_node.pod", imported="ipu_node.executor")


def test_the_cycle_finder_finds_a_cycle():
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert strongly_connected(["a", "b", "c", "d"], edges) == [["a", "b", "c"]]


def imports_inside_functions() -> list[tuple[str, int, str]]:
    """(file, line, module) of every import statement inside a function."""
    found = []
    for package in PACKAGES[:3]:
        for path in sorted((ROOT / package).rglob("*.py")):
            tree = ast.parse(path.read_text(), str(path))
            for function in ast.walk(tree):
                if not isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(function):
                    if isinstance(node, ast.Import):
                        found += [(str(path.relative_to(ROOT)), node.lineno, a.name)
                                  for a in node.names]
                    elif isinstance(node, ast.ImportFrom) and node.module:
                        found += [(str(path.relative_to(ROOT)), node.lineno,
                                   f"{node.module}.{a.name}") for a in node.names]
    return found


def pulls_in_something_heavy(graph: grimp.ImportGraph, name: str) -> bool:
    """Whether importing ``name`` (a module, or a module's attribute) loads a heavy
    dependency."""
    if name.split(".")[0] in HEAVY:
        return True
    module = name if name in graph.modules else name.rpartition(".")[0]
    if module not in graph.modules:
        return False
    reached = graph.find_upstream_modules(module)
    return any(m.split(".")[0] in HEAVY for m in reached)


def test_imports_inside_functions_only_defer_heavy_dependencies(graph):
    light = [f"{file}:{line} imports {module}"
             for file, line, module in imports_inside_functions()
             if not pulls_in_something_heavy(graph, module)]
    assert light == []


def test_a_phantom_bench_imports_no_ray_grpc_scipy_or_service():
    probe = (
        "import sys\n"
        "from cluster.cli.main import main\n"
        "try:\n"
        "    main(['bench', 'allreduce', '--topology', 'examples/topologies/ring8.yaml',"
        " '-b', '1M', '-e', '1M'])\n"
        "except SystemExit as end:\n"
        "    assert not end.code, end.code\n"
        f"heavy = {HEAVY!r} + ('cluster.service', 'ipupod_proto', 'ipu_node.pod')\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in heavy"
        " or m.startswith(heavy))\n"
        "print('LOADED', loaded)\n")
    run = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "LOADED []"
