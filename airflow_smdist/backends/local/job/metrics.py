"""MetricDefinitions regexes applied to job output, as SageMaker does to a job's stdout and stderr."""

from __future__ import annotations

from typing import Any

import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class MetricPoint:
    name: str
    value: float
    timestamp: float
    host: str


class MetricParser:
    """The value of a metric is the first capture group of its regex, parsed as a float."""

    def __init__(self, definitions: list[dict[str, Any]] | None) -> None:
        self.definitions = [(d["Name"], re.compile(d["Regex"])) for d in (definitions or [])]

    def parse(self, line: str, timestamp: float, host: str) -> list[MetricPoint]:
        points = []
        for name, rx in self.definitions:
            for m in rx.finditer(line):
                raw = m.group(1) if rx.groups else m.group(0)
                try:
                    value = float(raw)
                except (TypeError, ValueError):
                    continue
                if math.isfinite(value):
                    points.append(MetricPoint(name, value, timestamp, host))
        return points
