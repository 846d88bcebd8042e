"""``sagemaker_algorithm_toolkit.exceptions`` of the SageMaker XGBoost image, written from its behaviour
(aws/sagemaker-xgboost-container ``src/sagemaker_algorithm_toolkit/exceptions.py`` at ``f7a93a21``, Apache-2.0):
three kinds of error, each with ``message`` and ``caused_by``; the message is the one given, else the cause's,
with `` (caused by <cause's class>)`` when there is a cause."""

from __future__ import annotations


class BaseToolkitError(Exception):
    """An error that ends an algorithm: AlgorithmError, UserError or PlatformError."""

    def __init__(self, message: str | None = None, caused_by: BaseException | None = None) -> None:
        text = self._format_exception_message(message, caused_by)
        super().__init__(text)
        self.message = text
        self.caused_by = caused_by

    @staticmethod
    def _format_exception_message(message: str | None, caused_by: BaseException | None) -> str:
        if message:
            text = message
        elif caused_by:
            text = getattr(caused_by, "message", str(caused_by))
        else:
            text = "unknown error occurred"
        if caused_by:
            text += f" (caused by {caused_by.__class__.__name__})"
        return text


class AlgorithmError(BaseToolkitError):
    """A problem of the algorithm itself."""


class UserError(BaseToolkitError):
    """A problem of the user's configuration or input."""


class PlatformError(BaseToolkitError):
    """A problem of the platform (a missing directory, a network time-out)."""
