"""The shard planner, output names, ManifestFiles, the completeness check and the manifest (pure functions)."""

from __future__ import annotations

import gzip
import random

import pytest

from airflow_smdist.runtime.batch_runner import split_records
from airflow_smdist.specs import sharding
from airflow_smdist.specs.errors import SpecError
from airflow_smdist.storage import StoredObject


def objects(sizes, prefix="data/"):
    return [StoredObject(f"s3://b/{prefix}k{i:03d}.csv", f"{prefix}k{i:03d}.csv", s) for i, s in enumerate(sizes)]


def test_planner_covers_every_object_once_and_balances_by_size():
    rng = random.Random(3)
    sizes = [int(rng.paretovariate(1.2) * 1000) for _ in range(200)]  # heavy-tailed, as real prefixes are
    objs = objects(sizes)
    shards = sharding.plan_shards(objs, 7)
    assert len(shards) == 7 and all(s.objects for s in shards)
    keys = [o.key for s in shards for o in s.objects]
    assert sorted(keys) == sorted(o.key for o in objs) and len(keys) == len(set(keys))
    for s in shards:
        assert [o.key for o in s.objects] == sorted(o.key for o in s.objects)
    loads = [s.bytes for s in shards]
    mean = sum(sizes) / 7
    assert max(loads) <= mean + max(sizes)  # the greedy bound
    # far better than splitting the sorted keys into runs, or dealing them out round-robin
    runs = [sum(sizes[i::7]) for i in range(7)]
    assert sharding.balance(shards) <= max(runs) / mean
    assert sharding.plan_shards(list(reversed(objs)), 7) == shards  # deterministic


def test_planner_edge_cases():
    objs = objects([5, 1, 9])
    assert [len(s.objects) for s in sharding.plan_shards(objs, 10)] == [1, 1, 1]
    assert sharding.plan_shards([], 3) == []
    equal = sharding.plan_shards(objects([10] * 6), 3)
    assert [len(s.objects) for s in equal] == [2, 2, 2]
    for bad in (0, -1, "2", True):
        with pytest.raises(SpecError):
            sharding.plan_shards(objs, bad)
    with pytest.raises(SpecError):
        sharding.plan_shards(objs + objs[:1], 2)


def test_output_names_follow_batch_transform():
    listing = [StoredObject("s3://b/in/a.csv", "in/a.csv", 3), StoredObject("s3://b/in/x/y/b.csv", "in/x/y/b.csv", 4),
               StoredObject("s3://b/in/_smdist/manifest.json", "in/_smdist/manifest.json", 9)]
    for prefix in ("s3://b/in", "s3://b/in/"):
        objs = sharding.input_objects(prefix, listing, "s3://b/out/")
        assert [(o.rel, o.output) for o in objs] == [("a.csv", "s3://b/out/a.csv.out"),
                                                     ("x/y/b.csv", "s3://b/out/x/y/b.csv.out")]
    single = sharding.input_objects("s3://b/in/a.csv", listing[:1], "s3://b/out")
    assert single[0].output == "s3://b/out/a.csv.out"
    sharding.check_prefixes("s3://b/in/", "s3://b/out/")
    sharding.check_prefixes("s3://b/in", "s3://b/input-scored")
    with pytest.raises(SpecError):
        sharding.check_prefixes("s3://b/in/", "s3://b/in/scored/")


def test_manifest_file_round_trip():
    listing = [StoredObject("s3://b/in/a.csv", "in/a.csv", 3), StoredObject("s3://b/in/x/b.csv", "in/x/b.csv", 4)]
    objs = sharding.input_objects("s3://b/in", listing, "s3://b/out")
    entries = sharding.input_manifest(objs)
    assert entries == [{"prefix": "s3://b/in/"}, "a.csv", "x/b.csv"]
    back = sharding.objects_of_manifest(entries, "s3://b/out", {o.uri: o for o in listing})
    assert back == objs
    other = sharding.input_objects("s3://b/other", [StoredObject("s3://b/other/c.csv", "other/c.csv", 1)], "s3://b/o")
    with pytest.raises(SpecError):
        sharding.input_manifest(objs + other)
    with pytest.raises(SpecError):
        sharding.parse_input_manifest({"prefix": "s3://b/"})
    assert sharding.digest(objs) == sharding.digest(list(reversed(objs))) != sharding.digest(objs[:1])


@pytest.mark.parametrize("split, assemble, strategy, accept, dp, countable", [
    ("Line", "Line", "SingleRecord", "application/json", False, True),
    ("Line", "Line", "MultiRecord", "text/csv", False, True),
    ("Line", "Line", "MultiRecord", "text/csv; charset=utf-8", False, True),
    ("Line", "Line", "MultiRecord", "application/json", False, False),  # one JSON array per request
    ("Line", "Line", "MultiRecord", "application/json", True, True),  # JoinSource: a line per record
    ("Line", "None", "SingleRecord", "text/csv", False, False),
    ("None", "Line", None, "text/csv", False, False),
])
def test_when_records_are_countable(split, assemble, strategy, accept, dp, countable):
    assert sharding.records_countable(split, assemble, strategy, accept, dp) is countable


def store(files: dict[str, bytes]):
    listing = [StoredObject(uri, uri.split("://", 1)[1].split("/", 1)[1], len(data)) for uri, data in files.items()]
    return listing, files.__getitem__


def test_completeness_finds_missing_outputs_and_count_mismatches():
    inputs = {"s3://b/in/a.csv": b"1\n2\n3\n", "s3://b/in/b.csv": b"1\n\n2\r\n", "s3://b/in/c.csv": b"1\n2\n",
              "s3://b/in/d.csv": b"9\n"}
    outputs = {"s3://b/out/a.csv.out": b"x\ny\nz\n", "s3://b/out/b.csv.out": b"p\nq\n",
               "s3://b/out/c.csv.out": b"only one line\n"}
    in_listing, _ = store(inputs)
    out_listing, _ = store(outputs)
    objs = sharding.input_objects("s3://b/in/", in_listing, "s3://b/out/")
    read = {**inputs, **outputs}.__getitem__
    report = sharding.check_completeness(objs, out_listing, count=True, read=read)
    status = {e.rel: e.status for e in report.entries}
    assert status == {"a.csv": "ok", "b.csv": "ok", "c.csv": "count_mismatch", "d.csv": "missing"}
    assert not report.complete
    assert [e.rel for e in report.pending] == ["c.csv", "d.csv"]
    assert report.missing == ["s3://b/in/c.csv", "s3://b/in/d.csv"]
    text = report.describe()
    assert "2 of 4" in text and "s3://b/in/d.csv: no output s3://b/out/d.csv.out" in text
    assert "s3://b/in/c.csv: 2 record(s) in, 1 line(s)" in text
    assert report.records == 3 + 2 + 2 + 1
    # without counting only existence matters (and nothing is read)
    lazy = sharding.check_completeness(objs, out_listing, count=False, read=None)
    assert [e.rel for e in lazy.pending] == ["d.csv"] and lazy.records is None


def test_record_counts_match_how_the_engine_splits():
    data = b"a,1\n\n  \nb,2\r\nc,3"
    assert sharding.check_completeness(
        sharding.input_objects("s3://b/in", [StoredObject("s3://b/in/z.gz", "in/z.gz", 1)], "s3://b/out"),
        [StoredObject("s3://b/out/z.gz.out", "out/z.gz.out", 1)], count=True, compression="Gzip",
        read={"s3://b/in/z.gz": gzip.compress(data), "s3://b/out/z.gz.out": b"1\n2\n3\n"}.__getitem__).complete
    assert len(split_records(data, "Line")) == 3


def test_manifest_and_its_xcom_summary():
    inputs = {f"s3://b/in/{i}.csv": b"1\n" for i in range(5)}
    outputs = {f"s3://b/out/{i}.csv.out": b"y\n" for i in range(5)}
    objs = sharding.input_objects("s3://b/in", store(inputs)[0], "s3://b/out")
    report = sharding.check_completeness(objs, store(outputs)[0], count=True, read={**inputs, **outputs}.__getitem__)
    jobs = [{"job_name": "j-1", "kind": "transform", "status": "Completed"}]
    m = sharding.batch_manifest(report, input_uri="s3://b/in", output_path="s3://b/out", fan_out="transform",
                                jobs=jobs, settings={"split_type": "Line"}, processed=["s3://b/in/1.csv"])
    assert m["format"] == sharding.MANIFEST_FORMAT and m["complete"] and m["objects"] == 5 and m["records"] == 5
    assert m["entries"][0] == {"input": "s3://b/in/0.csv", "rel": "0.csv", "output": "s3://b/out/0.csv.out",
                               "input_bytes": 2, "status": "ok", "input_records": 1, "output_records": 1,
                               "output_bytes": 2}
    assert m["processed_this_run"] == ["s3://b/in/1.csv"] and m["jobs"] == jobs
    uri = sharding.manifest_uri("s3://b/out/")
    assert uri == "s3://b/out/_smdist/manifest.json"
    s = sharding.manifest_summary(m, uri, limit=3)
    assert s["manifest_uri"] == uri and s["processed"] == 1 and s["complete"] and s["outputs_truncated"]
    assert s["outputs"] == {f"s3://b/in/{i}.csv": f"s3://b/out/{i}.csv.out" for i in range(3)}
    import json

    assert json.loads(sharding.dumps(m)) == json.loads(json.dumps(m, default=str))
