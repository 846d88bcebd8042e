"""The sharded-inference ledger (airflow_smdist.ledger) on file:// storage: what it lists, plans, records and
reports, read back from the files it wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from airflow_smdist import ledger
from airflow_smdist._compat import AirflowException
from airflow_smdist.specs import sharding
from airflow_smdist.storage import Storage

LINES = {"split_type": "Line", "assemble_with": "Line", "content_type": "text/csv", "accept": "text/csv"}


@pytest.fixture
def prefix(tmp_path: Path) -> tuple[str, str]:
    """Four CSV inputs of 1, 2, 3 and 4 records under in/, an empty out/: (input_uri, output_uri)."""
    for i in range(1, 5):
        (tmp_path / "in").mkdir(exist_ok=True)
        (tmp_path / "in" / f"part-{i}.csv").write_text("".join(f"{i},{r}\n" for r in range(i)))
    return f"file://{tmp_path}/in/", f"file://{tmp_path}/out/"


def write_output(output_uri: str, name: str, lines: int) -> None:
    path = Path(output_uri.removeprefix("file://")) / f"{name}.out"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"y{r}\n" for r in range(lines)))


def test_the_planner_shards_only_what_has_no_complete_output(prefix: tuple[str, str]) -> None:
    input_uri, output_uri = prefix
    storage = Storage()
    write_output(output_uri, "part-1.csv", 1)  # complete
    write_output(output_uri, "part-2.csv", 1)  # one record short: redone
    shards = ledger.plan_shards_step(storage, input_uri=input_uri, output_uri=output_uri, shards=2, settings=LINES)
    planned = sorted(uri for s in shards
                     for uri in sharding.parse_input_manifest(json.loads(storage.read_bytes(s["manifest_uri"])))[1])
    assert planned == ["part-2.csv", "part-3.csv", "part-4.csv"]
    assert len(shards) == 2 and all(s["manifest_uri"].startswith(output_uri + "_smdist/shards/") for s in shards)
    assert sum(s["objects"] for s in shards) == 3
    for name, lines in (("part-2.csv", 2), ("part-3.csv", 3), ("part-4.csv", 4)):
        write_output(output_uri, name, lines)
    assert ledger.plan_shards_step(storage, input_uri=input_uri, output_uri=output_uri, shards=2,
                                   settings=LINES) == []


def test_a_prefix_without_inputs_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AirflowException, match="no input objects under"):
        ledger.plan_shards_step(Storage(), input_uri=f"file://{tmp_path}/none/", output_uri=f"file://{tmp_path}/o/",
                                shards=2, settings=LINES)


def test_a_manifest_file_lists_what_it_names(prefix: tuple[str, str], tmp_path: Path) -> None:
    input_uri, output_uri = prefix
    storage = Storage()
    manifest = f"file://{tmp_path}/inputs.json"
    storage.write_bytes(json.dumps([{"prefix": input_uri}, "part-3.csv", "part-1.csv"]).encode(), manifest)
    objects = ledger.list_inputs(storage, manifest, output_uri, "ManifestFile")
    assert sorted(o.rel for o in objects) == ["part-1.csv", "part-3.csv"]
    assert {o.output for o in objects} == {output_uri + "part-1.csv.out", output_uri + "part-3.csv.out"}


def test_what_a_job_made_is_recorded_and_another_model_makes_it_stale(prefix: tuple[str, str]) -> None:
    input_uri, output_uri = prefix
    storage = Storage()
    objects = ledger.list_inputs(storage, input_uri, output_uri)
    ledger.record_job(storage, output_uri, "job-1", "model-a", objects)
    for o in objects:
        write_output(output_uri, o.rel, int(o.rel[5]))
    made = ledger.made_by_jobs(storage, output_uri, ["job-1", "job-never-recorded"])
    assert made == {o.uri: {"model": "model-a", "made_from": o.version} for o in objects}
    report = ledger.completeness(storage, objects, output_uri, LINES, provenance=made, model="model-a")
    assert report.complete and report.records == 10
    summary = ledger.write_manifest(storage, report, input_uri=input_uri, output_uri=output_uri, fan_out="jobs",
                                    jobs=[{"job_name": "job-1"}], settings=LINES)
    assert summary["manifest_uri"] == output_uri + "_smdist/manifest.json"
    assert ledger.read_provenance(storage, output_uri) == made  # the manifest on disk carries it
    stale = ledger.completeness(storage, objects, output_uri, LINES,
                                provenance=ledger.read_provenance(storage, output_uri), model="model-b")
    assert {e.status for e in stale.entries} == {"stale"}
    assert "made by another model (model-a, now model-b)" in stale.describe()
    assert ledger.outcome_error(report, summary) is None


def test_a_manifest_that_cannot_be_written_is_in_the_error_beside_the_jobs(prefix: tuple[str, str],
                                                                             tmp_path: Path) -> None:
    input_uri, output_uri = prefix
    storage = Storage()
    objects = ledger.list_inputs(storage, input_uri, output_uri)
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "_smdist").write_text("a file where the manifest's folder goes")
    report = ledger.completeness(storage, objects, output_uri, LINES)
    summary = ledger.write_manifest(storage, report, input_uri=input_uri, output_uri=output_uri, fan_out="jobs",
                                    jobs=[], settings=LINES)
    assert "could not be written" in summary["manifest_error"] and summary["manifest_uri"] is None
    error = ledger.outcome_error(report, summary, ["job-2 failed: boom"])
    assert error is not None
    text = str(error).splitlines()
    assert text[0] == "job-2 failed: boom"
    assert text[1] == "4 of 4 object(s) incomplete:"
    assert any(line.startswith("The manifest ") and "could not be written" in line for line in text)
    assert (tmp_path / "out" / "_smdist").read_text() == "a file where the manifest's folder goes"  # kept
