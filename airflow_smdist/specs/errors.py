"""The error types of the request builders: each names the field, the problem and the fix."""

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
        return self.args[0]
