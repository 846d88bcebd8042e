"""Dependency footprint of ``pip install airflow-smdist``: before and after a change of pyproject's
dependencies, measured in the same run.

For each side (the ``[project].dependencies`` of pyproject.toml at a git revision, or of the working tree):

* a throwaway venv (uv), the requirements installed into it (uv, for speed; the same resolution pip makes),
  then the number of distributions in it and the size of its site-packages;
* the time ``pip install --dry-run`` takes to resolve them in a venv that already holds Airflow and the
  Amazon provider (as MWAA's pip resolves requirements against the installed Airflow within its time
  limit), and how many distributions it would add there. (A resolution of the whole set from nothing with
  pip backtracks through Airflow's own tree for more than 10 minutes on either side, so it measures Airflow,
  not this change.)

Nothing is installed into the project's own venv. Prints a table and the after/before ratios.

    python benchmarks/bench_dependencies.py --before <git rev> [--after <git rev>|WORKTREE] [--repeat 1]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def uv() -> str:
    found = shutil.which("uv") or os.path.join(os.path.dirname(sys.executable), "uv")
    if not os.path.exists(found):
        sys.exit("uv is required (pip install uv)")
    return found


def dependencies(rev: str) -> list[str]:
    if rev == "WORKTREE":
        with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
            return tomllib.load(f)["project"]["dependencies"]
    text = subprocess.run(["git", "-C", REPO, "show", f"{rev}:pyproject.toml"], check=True, capture_output=True,
                          text=True).stdout
    return tomllib.loads(text)["project"]["dependencies"]


def venv(path: str, seed: bool = False) -> str:
    cmd = [uv(), "venv", "-q", "-p", sys.executable, path] + (["--seed"] if seed else [])
    subprocess.run(cmd, check=True)
    return os.path.join(path, "bin", "python")


def site_packages(python: str) -> str:
    return subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], check=True,
                          capture_output=True, text=True).stdout.strip()


def du(path: str) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(path):
        for f in files:
            full = os.path.join(dirpath, f)
            if not os.path.islink(full):
                total += os.path.getsize(full)
    return total


def footprint(reqs: list[str], work: str) -> tuple[int, int]:
    python = venv(os.path.join(work, "installed"))
    env = dict(os.environ, VIRTUAL_ENV=os.path.dirname(os.path.dirname(python)))
    subprocess.run([uv(), "pip", "install", "-q", *reqs], check=True, env=env)
    listed = subprocess.run([uv(), "pip", "list", "--format", "freeze"], check=True, env=env, capture_output=True,
                            text=True).stdout.split()
    size = du(site_packages(python))
    shutil.rmtree(os.path.join(work, "installed"))
    return len(listed), size


def resolution(reqs: list[str], work: str, repeat: int, limit: float) -> tuple[float | None, int | None]:
    """``pip install --dry-run`` of the requirements into a venv that already has Airflow and the Amazon
    provider (the requirements that are not the SageMaker SDK, installed first), as on MWAA, where the
    environment's Airflow is installed and pip resolves the requirements against it: the best time of
    ``repeat`` runs (None when one does not finish within ``limit`` seconds) and how many distributions pip
    would add."""
    python = venv(os.path.join(work, "resolve"), seed=True)
    env = dict(os.environ, VIRTUAL_ENV=os.path.dirname(os.path.dirname(python)))
    base = [r for r in reqs if not r.startswith("sagemaker")]
    subprocess.run([uv(), "pip", "install", "-q", *base], check=True, env=env)
    best, added = float("inf"), None
    try:
        for _ in range(repeat):
            start = time.perf_counter()
            try:
                out = subprocess.run([python, "-m", "pip", "install", "--dry-run", *reqs], check=True, text=True,
                                     capture_output=True, timeout=limit).stdout
            except subprocess.TimeoutExpired:
                return None, None
            best = min(best, time.perf_counter() - start)
            would = [line for line in out.splitlines() if line.startswith("Would install")]
            added = len(would[0].split()) - 2 if would else 0
    finally:
        shutil.rmtree(os.path.join(work, "resolve"))
    return best, added


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", default="WORKTREE")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--limit", type=float, default=600, help="seconds one pip resolution may take")
    args = parser.parse_args()
    rows: dict[str, tuple[int, int, float | None]] = {}
    sides = ("before", "after")
    reqs = {side: dependencies(getattr(args, side)) for side in sides}
    footprints = {}
    for side in sides:  # the installs first (uv: fast), then pip's resolutions (slow)
        with tempfile.TemporaryDirectory(prefix=f"bench-deps-{side}-") as work:
            footprints[side] = footprint(reqs[side], work)
        print(f"{side:6s} ({getattr(args, side)}): {' '.join(reqs[side])}: {footprints[side][0]} distributions, "
              f"{footprints[side][1] / 2**20:.0f} MiB", flush=True)
    added: dict[str, int | None] = {}
    for side in sides:
        with tempfile.TemporaryDirectory(prefix=f"bench-deps-{side}-") as work:
            seconds, added[side] = resolution(reqs[side], work, args.repeat, args.limit)
        rows[side] = (*footprints[side], seconds)
        print(f"{side:6s}: resolution {seconds} s, {added[side]} distributions added to Airflow", flush=True)

    def secs(value: float | None) -> str:
        return f"> {args.limit:.0f} (not finished)" if value is None else f"{value:.1f}"

    print(f"\n| | distributions (fresh venv) | installed size (MiB) | added to an Airflow venv | "
          f"pip --dry-run there (s, best of {args.repeat}) |")
    print("|---|---:|---:|---:|---:|")
    for side, (count, size, seconds) in rows.items():
        print(f"| {side} | {count} | {size / 2**20:.0f} | {added[side]} | {secs(seconds)} |")
    (bc, bs, bt), (ac, as_, at) = rows["before"], rows["after"]
    ab, aa = added["before"], added["after"]
    ratio = "n/a" if bt is None or at is None else f"{at / bt:.2f}"
    if bt is None and at is not None:
        ratio = f"< {at / args.limit:.2f}"
    added_ratio = f"{aa / ab:.2f}" if ab and aa is not None else "n/a"
    print(f"| after/before | {ac / bc:.2f} | {as_ / bs:.2f} | {added_ratio} | {ratio} |")


if __name__ == "__main__":
    main()
