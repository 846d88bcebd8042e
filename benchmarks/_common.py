"""Shared helpers for the benchmarks: medians, and the markdown results table each benchmark appends to."""

from __future__ import annotations

import os
import statistics
import time

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results.md")


def median_time(fn, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def load_note() -> str:
    """The machine's load when a benchmark ran (other work shares it: ratios, not absolute times, matter)."""
    one, five, _ = os.getloadavg()
    return f"Load average {one:.1f} (1 min) / {five:.1f} (5 min) on {os.cpu_count()} cores."


def report(title: str, rows: list[tuple[str, str, str]], note: str = "") -> None:
    """Print a table (measure, value, ratio to the baseline of the same run) and append it to results.md."""
    lines = [f"## {title}", "", f"_{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, {os.cpu_count()} cores_", "",
             "| measure | value | ratio to baseline |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in rows]
    if note:
        lines += ["", note]
    text = "\n".join(lines) + "\n\n"
    print(text)
    with open(RESULTS, "a") as f:
        f.write(text)
