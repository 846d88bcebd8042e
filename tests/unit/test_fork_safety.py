"""No process the provider starts runs Python in the child between fork and exec: ``preexec_fn`` does (Python
warns it may deadlock when the parent has threads, and the supervisors have reader and sampler threads). Child
setup belongs in the exec'd program (hostinit) or in Popen's own fork-safe arguments (``start_new_session``,
``pass_fds``, ``process_group``)."""

from __future__ import annotations

import ast
import pathlib

ROOT = pathlib.Path(__file__).parents[2]


def preexec_uses(source: str) -> list[int]:
    """Lines that pass ``preexec_fn``: as a keyword argument, or as a key of a dict of keyword arguments."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.keyword) and node.arg == "preexec_fn":
            lines.append(node.value.lineno)
        elif isinstance(node, ast.Constant) and node.value == "preexec_fn":
            lines.append(node.lineno)
    return lines


def test_the_finder_sees_every_spelling():
    assert preexec_uses("subprocess.Popen(cmd, preexec_fn=os.setsid)") == [1]
    assert preexec_uses("kw = {'preexec_fn': f}\nsubprocess.run(cmd, **kw)") == [1]
    assert preexec_uses("kw = dict(preexec_fn=f)") == [1]
    assert preexec_uses("subprocess.Popen(cmd, start_new_session=True)") == []


def test_no_subprocess_in_the_provider_passes_preexec_fn():
    found = {str(path.relative_to(ROOT)): lines for path in sorted((ROOT / "airflow_smdist").rglob("*.py"))
             if (lines := preexec_uses(path.read_text()))}
    assert found == {}, f"preexec_fn (not fork-safe with threads) at {found}"
