"""The error types of the request builders: each names the field, the problem and the fix."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any


class SpecError(ValueError):
    """A request (or the arguments that build it) is wrong. Raised before any file is written or call made.

    ``field`` is the dotted path of the offending argument or request member (``ResourceConfig.InstanceCount``,
    ``distribution.mpi.processes_per_host``), ``problem`` says what is wrong, ``fix`` how to put it right.
    """

    def __init__(self, field: str, problem: str, fix: str = "") -> None:
        self.field = field
        self.problem = problem
        self.fix = fix
        message = f"{field}: {problem}"
        if fix:
            message += f" Fix: {fix}"
        super().__init__(message)


class MissingUploadLocation(SpecError):
    """Local files are to be uploaded and no argument says where: a caller that knows a default location
    (the SageMaker SDK's session bucket) catches this type and builds again with it."""


class SpecErrors(SpecError):
    """Several problems found at once (validation reports all of them, not just the first)."""

    def __init__(self, errors: list[SpecError]) -> None:
        self.errors = list(errors)
        first = self.errors[0]
        super().__init__(first.field, first.problem, first.fix)
        self.args = ("\n".join(str(e) for e in self.errors),)

    def __str__(self) -> str:
        return str(self.args[0])


def close_matches(word: str, possibilities: Iterable[str], n: int = 1) -> list[str]:
    """``difflib.get_close_matches``, for "did you mean" hints; difflib is imported only when an error needs
    it (the builders' modules are imported at DAG-parse time)."""
    import difflib

    return difflib.get_close_matches(word, list(possibilities), n=n)


_UNNATIVE = ("a Jinja template renders to a string unless the DAG sets render_template_as_native_obj=True")


def as_mapping(value: object, field: str, example: str) -> dict[str, Any]:
    """``value`` as a dict (None: empty), or a SpecError naming ``field``. A string that looks like a dict
    or list is what Jinja leaves when the DAG does not render native objects: the error says so."""
    from collections.abc import Mapping

    if value is None:
        return {}
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, str) and value.strip()[:1] in ("{", "["):
        raise SpecError(field, f"is the string {value[:80]!r}, not a dict: {_UNNATIVE}.",
                        f"pass a dict, e.g. {field}={example}, or set render_template_as_native_obj=True on the DAG.")
    raise SpecError(field, f"{value!r} is a {type(value).__name__}, not a dict.", f"give {field}={example}.")


def as_tags(tags: object, field: str = "tags") -> list[dict[str, str]] | None:
    """Tags as the API takes them, from the SDK's forms: a dict, or a list of {"Key", "Value"} entries."""
    if not tags:
        return None
    if isinstance(tags, list) and all(isinstance(t, dict) and set(t) == {"Key", "Value"} for t in tags):
        return [{"Key": str(t["Key"]), "Value": str(t["Value"])} for t in tags]
    if isinstance(tags, list):
        raise SpecError(field, f"{tags!r} is a list whose entries are not all {{'Key': ..., 'Value': ...}}.",
                        f"give {field}={{'team': 'ml'}} or [{{'Key': 'team', 'Value': 'ml'}}].")
    return [{"Key": str(k), "Value": str(v)} for k, v in as_mapping(tags, field, "{'team': 'ml'}").items()]
