"""insight.summarize on series whose meaning is known: what it finds and what it must not claim."""

from __future__ import annotations

from airflow_smdist.insight import cloudwatch_queries, summarize, utilization_panels


def samples(host, reads, cpu, step=1.0):
    return [{"t": 100.0 + i * step, "host": host, "cpu_percent": c, "read_bytes": r, "cpu_seconds": i}
            for i, (r, c) in enumerate(zip(reads, cpu))]


def test_balanced_hosts_and_a_falling_loss_give_no_findings():
    points = [{"name": "train:loss", "value": v, "t": 100.0 + i, "host": "algo-1"} for i, v in enumerate([1, .5, .3])]
    s = summarize("j", points, samples("algo-1", [0, 50, 100], [90] * 3) + samples("algo-2", [0, 48, 97], [88] * 3))
    assert s["findings"] == []
    assert s["metrics"]["train:loss"]["diverged"] is False
    assert s["reading"].startswith("Job j (2 host(s), 2 s): No uneven shards")


def test_non_finite_metric_is_divergence_and_accuracy_rising_is_not():
    nan = [{"name": "loss", "value": v, "t": float(i), "host": "algo-1"} for i, v in enumerate([1.0, float("nan")])]
    assert summarize("j", nan, [])["metrics"]["loss"]["divergence"]["why"] == "loss became nan"
    acc = [{"name": "val:acc", "value": v, "t": float(i), "host": "algo-1"} for i, v in enumerate([.1, .5, .9, .95])]
    assert summarize("j", acc, [])["metrics"]["val:acc"]["diverged"] is False


def test_an_idle_host_is_reported_once_with_its_share():
    s = summarize("j", [], samples("algo-1", [0, 100, 200, 300], [95] * 4, step=30)
                  + samples("algo-2", [0, 100, 200, 300], [95, 2, 3, 1], step=30))
    assert len(s["findings"]) == 1 and s["findings"][0].startswith("algo-2 was idle 75% of the time")
    assert "waits on input or on the other hosts" in s["findings"][0]


def test_a_single_host_is_not_told_it_waits_on_other_hosts_and_a_short_test_is_not_told_it_idles():
    one = summarize("j", [], samples("algo-1", [0, 100, 200, 300], [95, 2, 3, 1], step=30))
    assert one["findings"] == ["algo-1 was idle 75% of the time (CPU under 10 %): it waits on input. Check its "
                               "data loading."]
    short = summarize("j", [], samples("algo-1", [0, 100, 200, 300], [95, 2, 3, 1]))  # 3 s: its own start-up
    assert short["findings"] == [] and short["reading"].startswith("Job j (1 host(s), 3 s): No uneven shards")


def test_a_job_without_channels_has_no_shards_to_call_uneven():
    reads = samples("algo-1", [0, 20e6, 30e6], [90] * 3) + samples("algo-2", [0, 2e6, 3e6], [90] * 3)
    assert "the shards are uneven" in summarize("j", [], reads)["findings"][0]  # channels unknown: may be shards
    assert summarize("j", [], reads, channels=False)["findings"] == []  # an MPI or Ray job that reads no channel


def channel_samples(host, reads, channel):
    return [dict(s, channel_bytes=channel, channels={"train": channel}) for s in samples(host, reads, [90] * 3)]


def test_reads_are_read_against_each_hosts_channel_data():
    # a 100 kB shard each, and rank 0's framework imports read 10 MB more: nothing to say about the data
    imports = summarize("j", [], channel_samples("algo-1", [0, 20e6, 30e6], 100_000)
                        + channel_samples("algo-2", [0, 15e6, 20e6], 100_000))
    assert imports["findings"] == [] and imports["hosts"]["algo-1"]["channel_bytes"] == 100_000
    # the same 10 MB shard each, read twice on algo-2: its input pipeline, not the shards
    twice = summarize("j", [], channel_samples("algo-1", [0, 5e6, 11e6], 10_000_000)
                      + channel_samples("algo-2", [0, 11e6, 21e6], 10_000_000))
    assert twice["findings"] == ["algo-1 read 48% fewer bytes than algo-2 (11.0 MB vs 21.0 MB): algo-2 read 1.0 "
                                 "times its 10.0 MB of channel data more, with shards of even size: its input "
                                 "pipeline reads the data more often (an extra pass or epoch, a cache that "
                                 "misses). Give every host the same number of passes over its shard."]
    # shards of 1 MB and 4 MB: uneven shards, whatever the reads (imports here)
    shards = summarize("j", [], channel_samples("algo-1", [0, 20e6, 30e6], 4_000_000)
                       + channel_samples("algo-2", [0, 20e6, 30e6], 1_000_000))
    assert shards["findings"][0].startswith("algo-2 was given 75% fewer channel bytes than algo-1 (1.0 MB vs 4.0 MB")


def test_cloudwatch_queries_name_the_job_and_every_host():
    d = {"TrainingJobName": "j", "ResourceConfig": {"InstanceCount": 2},
         "AlgorithmSpecification": {"MetricDefinitions": [{"Name": "loss", "Regex": "l=(.*)"}]}}
    q = cloudwatch_queries(d)
    assert q[0]["MetricStat"]["Metric"] == {"Namespace": "/aws/sagemaker/TrainingJobs", "MetricName": "loss",
                                            "Dimensions": [{"Name": "TrainingJobName", "Value": "j"}]}
    hosts = {x["MetricStat"]["Metric"]["Dimensions"][0]["Value"] for x in q[1:]}
    assert hosts == {"j/algo-1", "j/algo-2"} and len(q) == 1 + 2 * 4


def test_utilization_panels_draw_memory_and_bytes_written_next_to_reads():
    local = [{"t": 10.0 + i, "host": "algo-1", "cpu_percent": 50, "read_bytes": 1e6 * i, "write_bytes": 2e6 * i,
              "rss_bytes": 3e6 * (i + 1)} for i in range(3)]
    (cpu, _), (io, io_lines), (memory, memory_lines) = utilization_panels(local, 10.0)
    assert cpu.startswith("CPU per host") and io.startswith("bytes read (solid) and written (dashed)")
    assert [(label, ys, style) for label, _xs, ys, style in io_lines] == [
        ("algo-1 read", [0.0, 1.0, 2.0], "-"), ("algo-1 written", [0.0, 2.0, 4.0], "--")]
    assert memory.startswith("memory per host (RSS") and memory_lines[0][1:3] == ([0.0, 1.0, 2.0], [3.0, 6.0, 9.0])
    cloud = [{"t": 60.0 * i, "host": "algo-1", "cpu_percent": 90, "memory_percent": 40, "disk_percent": 5,
              "gpu_percent": 70} for i in range(2)]
    (cpu, cpu_lines), (disk, _), (memory, memory_lines) = utilization_panels(cloud, 0.0)
    assert cpu.endswith("GPU dashed") and [label for label, *_ in cpu_lines] == ["algo-1", "algo-1 GPU"]
    assert disk == "disk use per host (%)" and memory == "memory per host (%)" and memory_lines[0][2] == [40, 40]


def test_each_metric_panel_spans_its_own_points_and_the_utilization_panels_the_job():
    """A 600 s job whose loss was reported from 590 s on: the loss panel shows those 10 s (not a vertical line
    at the right edge of the job's clock); CPU, I/O and memory keep the whole job's."""
    from airflow_smdist.insight import draw

    points = [{"name": "loss", "value": 1 / (i + 1), "t": 1590.0 + i, "host": "algo-1"} for i in range(10)]
    cpu = [{"t": 1000.0 + 60 * i, "host": "algo-1", "cpu_percent": 90, "read_bytes": i, "cpu_seconds": i}
           for i in range(11)]
    fig = draw(summarize("j", points, cpu, start=1000.0, end=1600.0), cpu)
    loss, *utilization = fig.axes
    assert loss.get_title() == "loss"
    low, high = loss.get_xlim()
    assert 585 < low <= 590 and 599 <= high < 605, (low, high)
    assert all(ax.get_xlim() == (0, 600) for ax in utilization), [ax.get_xlim() for ax in utilization]


def test_a_long_multi_host_run_without_checkpoints_is_told_after_it_ran_and_a_short_one_is_not():
    def run(seconds, hosts, checkpointed):
        rows = [s for h in hosts for s in samples(h, [0, 100, 200], [90] * 3, step=seconds / 2)]
        return summarize("j", [], rows, checkpointed=checkpointed)["findings"]

    long_run = run(1200, ["algo-1", "algo-2"], False)
    assert long_run == ["[no-checkpoint] this run took 20 min on 2 hosts without checkpoint_s3_uri: a lost host "
                        "would have lost all of it. Set checkpoint_s3_uri and checkpoint from one rank (rank 0) to "
                        "/opt/ml/checkpoints, so a retried job resumes instead of starting over."]
    assert run(2, ["algo-1", "algo-2"], False) == []  # a two-second test
    assert run(1200, ["algo-1", "algo-2"], True) == []  # it had checkpoints
    assert run(1200, ["algo-1"], False) == []  # one host: a retry restarts it as much as a lost host would
