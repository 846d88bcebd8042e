"""Throttling storms for the in-process moto server (moto never throttles; the real service does).

``throttle("DescribeTrainingJob", 5)`` makes the next 5 calls of that action answer HTTP 400
``ThrottlingException: Rate exceeded`` as SageMaker does; ``calls`` counts every call per action that
reached the server, throttled or not, so tests can bound how many calls a storm cost.
"""

from __future__ import annotations

import json
from collections import Counter

calls: Counter = Counter()
_pending: Counter = Counter()
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
        if _pending[action] > 0:
            _pending[action] -= 1
            body = json.dumps({"__type": "ThrottlingException", "message": "Rate exceeded"})
            return 400, {"x-amzn-ErrorType": "ThrottlingException", "Content-Type": "application/x-amz-json-1.1"}, body
        return original(self)

    SageMakerResponse.call_action = call_action
    _installed = True


def throttle(action: str, times: int) -> None:
    install()
    _pending[action] += times


def reset() -> None:
    calls.clear()
    _pending.clear()
