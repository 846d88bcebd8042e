"""The one error type of the request builders: it names the field, the problem and the fix."""

from __future__ import annotations


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


class SpecErrors(SpecError):
    """Several problems found at once (validation reports all of them, not just the first)."""

    def __init__(self, errors: list[SpecError]) -> None:
        self.errors = list(errors)
        first = self.errors[0]
        super().__init__(first.field, first.problem, first.fix)
        self.args = ("\n".join(str(e) for e in self.errors),)

    def __str__(self) -> str:
        return self.args[0]
