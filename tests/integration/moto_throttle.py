"""Throttling storms for the in-process moto server (moto never throttles; the real service does).

``throttle("DescribeTrainingJob", 5)`` makes the next 5 calls of that action answer HTTP 400
``ThrottlingException: Rate exceeded`` as SageMaker does; ``fail(action, times, code, message)`` answers
another error the same way (e.g. ``AccessDeniedException`` for a role without the action); ``calls`` counts
every call per action that reached the server, failed or not, so tests can bound how many calls a storm cost.
"""

from __future__ import annotations

import json
from collections import Counter

calls: Counter = Counter()
#: action -> the errors (code, message) its next calls answer, first first
_pending: dict[str, list[tuple[str, str]]] = {}
_installed = False


def install() -> None:
    global _installed
    if _installed:
        return
    from moto.sagemaker.responses import SageMakerResponse

    original = SageMakerResponse.call_action

    def call_action(self):
        action = self._get_action()
        calls[action] += 1
        if _pending.get(action):
            code, message = _pending[action].pop(0)
            body = json.dumps({"__type": code, "message": message})
            return 400, {"x-amzn-ErrorType": code, "Content-Type": "application/x-amz-json-1.1"}, body
        return original(self)

    SageMakerResponse.call_action = call_action
    _installed = True


def throttle(action: str, times: int) -> None:
    fail(action, times, "ThrottlingException", "Rate exceeded")


def fail(action: str, times: int, code: str, message: str) -> None:
    install()
    _pending.setdefault(action, []).extend([(code, message)] * times)


def reset() -> None:
    calls.clear()
    _pending.clear()
