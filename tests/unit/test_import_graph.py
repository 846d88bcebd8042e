"""The package's import graph, read statically (ast): no cycle through module-level imports.

Two kinds of edge are kept apart: a *module-level* import runs when its module is imported (class bodies and
``try``/``if`` blocks at the top included, ``if TYPE_CHECKING:`` blocks left out: they never run); a
*function-level* import runs only when its function is called. Importing ``a.b.c`` runs ``a/__init__.py``
and ``a/b/__init__.py`` first, so an edge to a module is an edge to each package above it too, and
``from a.b import c`` names the submodule ``a.b.c`` when there is one. A cycle through module-level imports
is the failure (its modules' import order then decides what works); cycles that need a function-level import
are listed, not failed, since such an import runs after every module has loaded.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = "airflow_smdist"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(ROOT.rglob("*.py"))}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(tree: ast.Module, module: str, is_package: bool) -> tuple[set[str], set[str]]:
    """(module-level, function-level) names of the modules ``module`` imports (absolute, maybe not ours)."""
    top: set[str] = set()
    inner: set[str] = set()

    def targets(node: ast.Import | ast.ImportFrom) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        base = node.module or ""
        if node.level:
            anchor = module.split(".") if is_package else module.split(".")[:-1]
            anchor = anchor[: len(anchor) - (node.level - 1)]
            base = ".".join(anchor + ([base] if base else []))
        return [base] + [f"{base}.{a.name}" for a in node.names if a.name != "*"]

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _is_type_checking(child.test):
                for stmt in child.orelse:
                    visit(ast.Module(body=[stmt], type_ignores=[]), in_function)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                (inner if in_function else top).update(targets(child))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)))

    visit(tree, False)
    return top, inner


def _resolve(name: str, modules: dict[str, Path]) -> set[str]:
    """Our modules that importing ``name`` runs: it (or the nearest module above it) and its packages."""
    if not (name == PACKAGE or name.startswith(PACKAGE + ".")):
        return set()
    parts = name.split(".")
    while parts and ".".join(parts) not in modules:
        parts.pop()  # "from pkg.mod import function": the module
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1)}


def import_graph() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(module-level edges, function-level edges) between the package's modules."""
    modules = _modules()
    top: dict[str, set[str]] = {}
    inner: dict[str, set[str]] = {}
    for name, path in modules.items():
        t, i = _imports(ast.parse(path.read_text(), str(path)), name, path.name == "__init__.py")
        # a module's own packages run before it: not an edge out of it
        own = _resolve(name, modules)
        top[name] = {m for n in t for m in _resolve(n, modules)} - own
        inner[name] = ({m for n in i for m in _resolve(n, modules)} - own) - top[name]
    return top, inner


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected component of more than one module (or a module importing itself), each as
    one cycle through it, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def strong(v: str) -> None:  # Tarjan, iteratively deep enough for this package
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(_one_cycle(graph, set(component)))

    for v in sorted(graph):
        if v not in index:
            strong(v)
    return sorted(found)


def _one_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest cycle through the component's first module (breadth first), closed: [a, b, ..., a]."""
    start = min(component)
    paths = {start: [start]}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph.get(v, ())):
            if w == start:
                return paths[v] + [start]
            if w in component and w not in paths:
                paths[w] = paths[v] + [w]
                queue.append(w)
    return sorted(component)


def _show(found: list[list[str]]) -> str:
    return "\n".join("  " + " -> ".join(c) for c in found)


#: cycles that need a function-level import, known and owned elsewhere, each with what removes it (none now:
#: the in-job batch runner that specs/ imported from the local backend lives in runtime/). A new one fails below.
KNOWN_FUNCTION_LEVEL_CYCLES: list[list[str]] = []


def test_the_graph_sees_the_package():
    top, inner = import_graph()
    assert "airflow_smdist.backends.base" in top["airflow_smdist.lifecycle"]
    # a function-level import is kept apart (the sagemaker backend makes its async source on demand)
    assert "airflow_smdist.backends.sagemaker_async" in inner["airflow_smdist.backends.sagemaker"]
    assert "airflow_smdist.backends.sagemaker_async" not in top["airflow_smdist.backends.sagemaker"]
    # importing a submodule runs its packages: an edge to each (none from a module to its own packages)
    assert _resolve("airflow_smdist.backends.local.store", _modules()) == {
        "airflow_smdist", "airflow_smdist.backends", "airflow_smdist.backends.local",
        "airflow_smdist.backends.local.store"}
    assert "airflow_smdist.backends.local" not in top["airflow_smdist.backends.local.status_source"]
    assert ("airflow_smdist.backends.local"
            in top["airflow_smdist.backends.factory"] | inner["airflow_smdist.backends.factory"])


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycle_through_module_level_imports():
    top, _inner = import_graph()
    found = cycles(top)
    assert not found, "import cycles through module-level imports:\n" + _show(found)


def test_no_new_import_cycle_even_through_function_level_imports():
    """With function-level imports counted too, the only cycles are the known ones (each listed above with
    what removes it): the port and its adapters, the triggers and the lifecycle form none."""
    top, inner = import_graph()
    found = cycles({name: top[name] | inner[name] for name in top})
    new = [c for c in found if c not in KNOWN_FUNCTION_LEVEL_CYCLES]
    assert not new, "import cycles (function-level imports counted):\n" + _show(new)


@pytest.mark.parametrize("module", ["airflow_smdist.backends.base", "airflow_smdist.kinds"])
def test_the_contract_modules_import_no_adapter_or_caller(module):
    """The port (backends/base.py) and the kind registry sit below everything: they import neither an adapter
    nor a caller of the port, not even in a function."""
    top, inner = import_graph()
    callers = ("airflow_smdist.operators", "airflow_smdist.triggers", "airflow_smdist.sensors",
               "airflow_smdist.lifecycle", "airflow_smdist.hooks", "airflow_smdist.backends.local",
               "airflow_smdist.backends.sagemaker")
    wrong = sorted(m for m in top[module] | inner[module] if m.startswith(callers))
    assert not wrong, f"{module} imports {wrong}"


@pytest.mark.parametrize("package", ["airflow_smdist.specs", "airflow_smdist.operators", "airflow_smdist.wire",
                                     "airflow_smdist.runtime"])
def test_the_builders_and_operators_import_no_backend_room(package):
    """Requests are built (specs/, wire) and operators run (operators/) without the local backend's rooms, not
    even in a function: what both sides share (the wire format, the in-job batch runner) is neutral."""
    top, inner = import_graph()
    mine = [m for m in top if m == package or m.startswith(package + ".")]
    assert mine
    wrong = sorted({f"{m} -> {t}" for m in mine for t in top[m] | inner[m]
                    if t.startswith("airflow_smdist.backends.local")})
    assert not wrong, wrong


INHOST = "airflow_smdist.backends.local.inhost"


def test_what_runs_inside_a_host_imports_nothing_of_the_package_outside_it():
    """backends/local/inhost/ runs by path inside a host, where the package is not importable: an import of the
    rest of it (even in a function) would fail there, not in the supervisor's tests."""
    top, inner = import_graph()
    mine = [m for m in top if m.startswith(INHOST + ".")]
    assert {f"{INHOST}.hostinit", f"{INHOST}.mpiagent", f"{INHOST}.mpishim", f"{INHOST}.builtin_xgboost"} <= set(mine)
    wrong = sorted({f"{m} -> {t}" for m in mine for t in top[m] | inner[m] if not t.startswith(INHOST)})
    assert not wrong, wrong


@pytest.mark.parametrize("module", ["hostinit", "mpiagent"])
def test_the_hosts_init_and_the_mpi_agent_import_the_standard_library_only(module):
    """They run with ``python -I -S`` (no site-packages, no user path): anything beyond the standard library
    would fail inside the host."""
    import sys

    path = ROOT / "backends" / "local" / "inhost" / f"{module}.py"
    tree = ast.parse(path.read_text())
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    names |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module and not n.level}
    outside = sorted(n for n in names if n.split(".")[0] not in sys.stdlib_module_names and n != "__future__")
    assert not outside, f"{module}.py imports {outside}"


LOCAL = "airflow_smdist.backends.local"
JOB = f"{LOCAL}.job"
#: what the task side and the job supervisor share: the job directory's files, and the disk's reserve
SHARED = {f"{LOCAL}.store", f"{LOCAL}.diskspace"}
#: the task package's own names a supervisor may use (the Describe* shapes its kind module answers)
SHARED_HELPERS = {"ACCOUNT", "dt", "last_modified", "transitions_of"}
#: where a supervisor really uses the backend, inside a call: the tuning supervisor submits its trials as training
#: jobs; the litter pass asks whether another job's supervisor still lives (LocalBackend._supervisor_pid)
USES_OF_THE_BACKEND = {(f"{JOB}.tuning", "LocalBackend", "in a function"),
                       (f"{JOB}.litter", "LocalBackend", "in a function")}


def _task_side(modules) -> list[str]:
    """The local backend's task-side modules: its package root, less the supervisor's and the host's rooms."""
    return [m for m in modules if (m == LOCAL or m.startswith(LOCAL + "."))
            and not m.startswith((JOB, INHOST)) and m not in SHARED]


def test_the_local_backend_has_three_rooms():
    top, _inner = import_graph()
    job = [m for m in top if m.startswith(JOB + ".")]
    assert {f"{JOB}.supervisor", f"{JOB}.training", f"{JOB}.tuning", f"{JOB}.launcher", f"{JOB}.runtimes"} <= set(job)
    assert {f"{LOCAL}.status_source", f"{LOCAL}.notify", f"{LOCAL}.retention", LOCAL} <= set(_task_side(top))
    from airflow_smdist.kinds import KINDS

    # each kind's supervisor (``python -m <local_module>``) is in the supervisor's room
    assert all(info.local_module.startswith(JOB + ".") for info in KINDS.values())
    assert (ROOT / "backends" / "local" / "job" / "images" / "xgboost.json").is_file()


def test_the_task_side_imports_the_supervisor_room_only_inside_a_call():
    """At module level, the task side (and what it shares with the supervisor) imports nothing of job/ or
    inhost/: the Airflow worker, triggerer and web server load neither to import the backend."""
    top, _inner = import_graph()
    wrong = sorted({f"{m} -> {t}" for m in _task_side(top) + sorted(SHARED) for t in top[m]
                    if t.startswith((JOB, INHOST))})
    assert not wrong, wrong


def test_importing_the_task_side_loads_no_supervisor_module():
    """The same, as a fresh interpreter sees it: the provider's modules that a DAG file, the triggerer and the
    CLI import load no module of the supervisor's or the host's room."""
    import subprocess
    import sys

    code = ("import sys\n"
            "import airflow_smdist.backends.local, airflow_smdist.backends.local.status_source\n"
            "import airflow_smdist.backends.local.retention, airflow_smdist.backends.factory\n"
            "import airflow_smdist.operators.training, airflow_smdist.operators.tuning\n"
            "import airflow_smdist.triggers.base, airflow_smdist.insight\n"
            f"print('LOADED', sorted(m for m in sys.modules if m.startswith(({JOB!r}, {INHOST!r}))))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT.parent).stdout
    assert out.splitlines()[-1] == "LOADED []", out


def test_the_supervisor_imports_of_the_task_side_only_shared_helpers():
    """job/ imports the task side's package for the shared Describe* helpers and the shared modules; LocalBackend
    itself only where a supervisor really uses it (:data:`USES_OF_THE_BACKEND`), inside a call."""
    modules = _modules()
    wrong = []
    for name, path in modules.items():
        if not name.startswith(JOB + "."):
            continue
        top, inner = _imports(ast.parse(path.read_text(), str(path)), name, path.name == "__init__.py")
        for level, targets in (("module level", top), ("in a function", inner)):
            for t in sorted(targets):
                if not t.startswith(LOCAL + ".") or t.startswith((JOB + ".", INHOST)) or t == JOB:
                    continue
                below = t[len(LOCAL) + 1:].split(".")[0]
                if f"{LOCAL}.{below}" in SHARED:
                    continue
                if below in SHARED_HELPERS and f"{LOCAL}.{below}" not in modules:
                    continue
                if (name, t[len(LOCAL) + 1:], level) in USES_OF_THE_BACKEND:
                    continue
                wrong.append(f"{name} -> {t} ({level})")
    assert not wrong, wrong
