"""What ``@task.smdist`` ships into a job: the function's source and JSON arguments (or, opt-in, a pickle),
the standard-library runner, the cluster helpers and ``requirements.txt``. Checked here, before any job.

Code, not pickles, by default (as ``@task.kubernetes`` and ``@task.virtualenv`` do): the function's own
source, its decorators stripped (found with :mod:`ast`, so comments and multi-line decorators do not
matter), at its own line numbers so a traceback in the job points at the DAG file's lines. The function
must be a plain ``def`` that imports what it uses inside itself: names it takes from the DAG file's module
are refused here, with their names, rather than failing as a NameError on the cluster.
"""

from __future__ import annotations

import ast
import builtins
import inspect
import json
import os
import shutil
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_smdist.runtime.function import (
    FORMAT,
    PAYLOAD_JSON,
    PAYLOAD_PICKLE,
    PAYLOAD_SOURCE,
)
from airflow_smdist.specs.errors import SpecError

ENTRY_POINT = "smdist_entry.py"
SERIALIZERS = ("json", "cloudpickle")
DEFAULT_MAX_RESULT_BYTES = 1024 * 1024
#: the processing job output each host of ``@task.smdist_processing`` writes its result into (read back by
#: :mod:`airflow_smdist.decorators.results`)
RESULTS_OUTPUT = "smdist-results"
#: files of the provider that travel with every payload (all standard library only)
RUNTIME_FILES = ("airflow_smdist/__init__.py", "airflow_smdist/runtime/__init__.py",
                 "airflow_smdist/runtime/function.py")
HEADER = "from __future__ import annotations  # {name}() from {file}, at its own line numbers\n"
ENTRY_SOURCE = '''"""Entry point of an @task.smdist job, written by airflow-smdist: runs the function of the payload.

The payload (smdist_function.*, the runner airflow_smdist/runtime/function.py) is this file's directory,
or the directory given by --smdist-payload (a processing job's smdist-function input)."""
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
payload = here
if "--smdist-payload" in sys.argv[:-1]:
    payload = sys.argv[sys.argv.index("--smdist-payload") + 1]
    base = os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml")
    if base != "/opt/ml" and payload.startswith("/opt/ml/") and not os.path.isdir(payload):
        payload = base + payload[len("/opt/ml"):]
sys.path.insert(0, payload)

from airflow_smdist.runtime.function import main  # noqa: E402

raise SystemExit(main(payload_dir=payload))
'''


def client_versions() -> dict[str, Any]:
    from airflow_smdist import __version__

    out = {"python": f"{sys.version_info[0]}.{sys.version_info[1]}", "provider": __version__, "cloudpickle": None}
    try:
        import cloudpickle

        out["cloudpickle"] = cloudpickle.__version__
    except ImportError:
        pass
    return out


def python_of_py_version(py_version: Any) -> str | None:
    """"py311" -> "3.11"; None for "py3", "py2" or nothing (the image's exact Python is unknown)."""
    text = str(py_version or "").strip().lower()
    if text.startswith("py") and text[2:].isdigit() and len(text) >= 5:
        return f"{text[2]}.{text[3:]}"
    return None


def check_serializer(serializer: str, py_version: Any) -> None:
    """serializer="cloudpickle" only with the image's Python equal to this one, refused before any job."""
    if serializer not in SERIALIZERS:
        raise SpecError("serializer", f"{serializer!r} is not a serializer.", f"use one of {SERIALIZERS}.")
    if serializer != "cloudpickle":
        return
    client = client_versions()
    if not client["cloudpickle"]:
        raise SpecError("serializer", "'cloudpickle' is not installed where the task runs.",
                        "pip install cloudpickle, or use serializer='json' (the default).")
    image_python = python_of_py_version(py_version)
    if image_python is None:
        raise SpecError("py_version", f"{py_version!r} does not say the image's exact Python, which "
                        "serializer='cloudpickle' needs (pickles do not cross Python versions).",
                        f"give py_version='py{client['python'].replace('.', '')}' for an image with Python "
                        f"{client['python']}, or use serializer='json' (the default).")
    if image_python != client["python"]:
        raise SpecError("py_version", f"{py_version!r} (Python {image_python}) differs from the Python "
                        f"{client['python']} that pickles the function; a pickle does not load across versions.",
                        f"use an image with Python {client['python']} (py_version="
                        f"'py{client['python'].replace('.', '')}'), or serializer='json' (the default), which "
                        "ships the function's source instead.")


# -- the function's source ----------------------------------------------------------------------------------
def function_source(function: Callable[..., Any]) -> str:
    """The module the job imports: the function's ``def`` (decorators dropped), dedented, at its line numbers."""
    name = getattr(function, "__name__", "?")
    if name == "<lambda>":
        raise SpecError("python_callable", "a lambda has no source of its own to ship.", "use a plain def.")
    if inspect.iscoroutinefunction(function) or inspect.isgeneratorfunction(function) \
            or inspect.isasyncgenfunction(function):
        raise SpecError("python_callable", f"{name}() is a coroutine or generator function.",
                        "use a plain def that returns its result.")
    code = getattr(function, "__code__", None)
    if code is not None and code.co_freevars:
        raise SpecError("python_callable", f"{name}() uses variables of an enclosing function "
                        f"({', '.join(code.co_freevars)}); only its source and arguments travel to the job.",
                        "define it at the DAG file's top level (or in the DAG context) and pass those values as "
                        "arguments.")
    try:
        lines, first = inspect.getsourcelines(function)
    except (OSError, TypeError) as exc:
        raise SpecError("python_callable", f"the source of {name}() cannot be read ({exc}).",
                        "define the function in a .py file (not in a notebook cell or exec'd string), or use "
                        "serializer='cloudpickle'.") from None
    text = textwrap.dedent("".join(lines))
    tree = ast.parse(text)
    node = next((n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))), None)
    if node is None or node.name != name:
        raise SpecError("python_callable", f"no 'def {name}' found in its source.", "use a plain def.")
    body = text.splitlines(keepends=True)[node.lineno - 1:node.end_lineno]
    kept = [f"@{ast.get_source_segment(text, d)}\n" for d in node.decorator_list if not _is_task_decorator(d)]
    def_line = first + node.lineno - 1  # the line of 'def' in the DAG file
    filename = os.path.basename(inspect.getsourcefile(function) or "?")
    header = HEADER.format(name=name, file=filename)
    padding = "\n" * max(0, def_line - 2 - len(kept))
    source = header + padding + "".join(kept) + "".join(body)
    check_names(source, name, filename)
    return source


def _is_task_decorator(node: ast.expr) -> bool:
    """``@task.smdist(...)``, ``@task``, ``@smdist_task``, ``@setup`` / ``@teardown``: Airflow's, not the job's."""
    target = node.func if isinstance(node, ast.Call) else node
    while isinstance(target, ast.Attribute):
        target = target.value
    return isinstance(target, ast.Name) and (target.id in ("task", "setup", "teardown") or "smdist" in target.id)


#: module-level names the job's module has too
MODULE_NAMES = frozenset({"__name__", "__file__", "__doc__", "__spec__", "__loader__", "__package__",
                          "__builtins__", "annotations"})


def check_names(source: str, name: str, filename: str) -> None:
    """Refuse names the function takes from its module: only builtins exist around it in the job."""
    import symtable  # here, not at DAG-parse time

    top = symtable.symtable(source, filename, "exec")
    table = next((t for t in top.get_children() if t.get_name() == name), None)
    if table is None:
        return
    missing: set[str] = {sym.get_name() for sym in top.get_symbols()  # e.g. in default values
                         if sym.is_referenced() and not sym.is_assigned() and not sym.is_imported()}
    stack = [table]
    while stack:
        t = stack.pop()
        stack.extend(t.get_children())
        for sym in t.get_symbols():
            if sym.is_global() and not sym.is_assigned() and sym.is_referenced():
                missing.add(sym.get_name())
    missing -= set(dir(builtins)) | MODULE_NAMES | {name}
    if missing:
        names = ", ".join(sorted(missing))
        raise SpecError("python_callable", f"{name}() uses names of the DAG file that do not exist in the job: "
                        f"{names}. Only the function's source and its arguments travel.",
                        "import modules inside the function, and pass values as arguments (decorators other "
                        "than Airflow's travel with the function and run in the job too).")


def json_arguments(function_name: str, args: list[Any], kwargs: dict[str, Any]
                   ) -> tuple[list[Any], dict[str, Any]]:
    """The call's (rendered) arguments, refused with the argument named when one is not JSON."""
    named = [(f"positional argument {i}", v) for i, v in enumerate(args)] + \
        [(f"argument {k!r}", v) for k, v in kwargs.items()]
    for label, value in named:
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise SpecError(f"{function_name}() {label}", f"{type(value).__name__} value is not JSON ({exc}).",
                            "pass numbers, strings, lists or dicts (an XCom of them is fine), e.g. an S3 URI for "
                            "data; or serializer='cloudpickle' with an image of this Python.") from None
    return json.loads(json.dumps(list(args))), json.loads(json.dumps(dict(kwargs)))


def requirements_lines(requirements: Any, serializer: str) -> list[str]:
    if requirements is None:
        lines: list[str] = []
    elif isinstance(requirements, str):
        lines = [line.strip() for line in requirements.splitlines()]
    elif isinstance(requirements, (list, tuple)):
        lines = [str(r).strip() for r in requirements]
    else:
        raise SpecError("requirements", f"{requirements!r} is not a list of requirement strings.",
                        "give e.g. ['scikit-learn==1.5.2'].")
    lines = [line for line in lines if line and not line.startswith("#")]
    if serializer == "cloudpickle" and not any(line.lower().startswith("cloudpickle") for line in lines):
        lines.append(f"cloudpickle=={client_versions()['cloudpickle']}")  # the client's exact version: no skew
    return lines


def write_payload(dest: str | os.PathLike[str], *, function: Callable[..., Any], args: list[Any],
                  kwargs: dict[str, Any], serializer: str, requirements: Any, max_result_bytes: int,
                  kind: str) -> list[str]:
    """Write the payload directory (``dest``); returns the file names, relative to it."""
    dest = Path(dest)
    name = function.__name__
    package_root = Path(__file__).resolve().parent.parent.parent
    for rel in RUNTIME_FILES:
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(package_root / rel, dest / rel)
    (dest / ENTRY_POINT).write_text(ENTRY_SOURCE)
    payload: dict[str, Any] = {"format": FORMAT, "function": name, "serializer": serializer, "kind": kind,
                               "max_result_bytes": int(max_result_bytes), "client": client_versions()}
    if serializer == "cloudpickle":
        import cloudpickle

        (dest / PAYLOAD_PICKLE).write_bytes(cloudpickle.dumps((function, list(args), dict(kwargs))))
    else:
        (dest / PAYLOAD_SOURCE).write_text(function_source(function))
        payload["args"], payload["kwargs"] = json_arguments(name, args, kwargs)
    (dest / PAYLOAD_JSON).write_text(json.dumps(payload, indent=1))
    lines = requirements_lines(requirements, serializer)
    if lines:
        (dest / "requirements.txt").write_text("\n".join(lines) + "\n")
    return sorted(p.relative_to(dest).as_posix() for p in dest.rglob("*") if p.is_file())
