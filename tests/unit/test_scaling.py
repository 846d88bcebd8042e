"""The scaling study's arithmetic: speed-up, efficiency, time to target, cost and the recommendation."""

from __future__ import annotations

from airflow_smdist.operators.scaling import _row, compare, table, time_to_target


def result(count, seconds, *, itype="ml.m5.xlarge", status="Completed", throughput=None):
    return {"status": status, "job_name": f"j{count}", "instance_type": itype, "instance_count": count,
            "start_time": "2026-12-03T10:00:00+00:00", "end_time": f"2026-12-03T10:00:{seconds:06.3f}+00:00",
            "billable_time_seconds": int(seconds),  # one instance's, as DescribeTrainingJob gives it
            "final_metrics": {"sps": throughput} if throughput else {}}


STUDY = {"throughput_metric": None, "target_metric": None, "target_value": None, "prices": {"ml.m5.xlarge": 3.6}}


def test_speedup_and_efficiency_from_wall_times():
    rows = [_row(f"x{n}", result(n, s), None, STUDY) for n, s in ((1, 40.0), (2, 25.0), (4, 20.0))]
    study = compare(rows, min_efficiency=0.7)
    by = {r["task_id"]: r for r in study["configurations"]}
    assert by["x2"]["speedup"] == 1.6 and by["x2"]["efficiency"] == 0.8
    assert by["x4"]["speedup"] == 2.0 and by["x4"]["efficiency"] == 0.5
    assert by["x2"]["cost"] == round(3.6 * 50 / 3600, 4)
    assert study["recommended"]["task_id"] == "x2"  # x4 is faster but below the efficiency floor
    assert study["verdict"].startswith("Recommended: x2")
    assert "x4" in table(study) and "0.50" in table(study)


def test_throughput_metric_wins_over_wall_time_and_failures_are_kept():
    study_args = dict(STUDY, throughput_metric="sps")
    rows = [_row("x1", result(1, 10.0, throughput=100.0), None, study_args),
            _row("x2", result(2, 10.0, throughput=150.0), None, study_args),
            _row("x3", result(3, 10.0, status="Failed"), None, study_args), _row("x4", None, None, study_args)]
    study = compare(rows)
    by = {r["task_id"]: r for r in study["configurations"]}
    assert by["x2"]["speedup"] == 1.5 and by["x2"]["efficiency"] == 0.75
    assert by["x3"] == {"task_id": "x3", "status": "Failed"} and by["x4"]["status"] == "Failed"


def test_scaling_that_does_not_pay_keeps_the_baseline():
    rows = [_row(f"x{n}", result(n, s), None, STUDY) for n, s in ((1, 10.0), (2, 12.0))]
    study = compare(rows)
    assert study["recommended"]["task_id"] == "x1"
    assert "did not pay" in study["verdict"] and "scale up" in study["verdict"]


def test_time_to_target_reads_the_insight_series():
    summary = {"metrics": {"loss": {"lower_is_better": True, "series": {"algo-1": [[1, 0.9], [2, 0.4], [3, 0.2]]}}}}
    assert time_to_target(summary, "loss", 0.5) == 2.0
    assert time_to_target(summary, "loss", 0.1) is None
    acc = {"metrics": {"acc": {"lower_is_better": False, "series": {"all": [[5, 0.5], [9, 0.95]]}}}}
    assert time_to_target(acc, "acc", 0.9) == 9.0


def test_reaching_the_target_first_wins_and_misses_are_named():
    study_args = dict(STUDY, throughput_metric="sps", target_metric="loss", target_value=0.1)

    def summary(points):
        return {"metrics": {"loss": {"lower_is_better": True, "series": {"algo-1": points}}}}

    rows = [_row("x1", result(1, 30.0, throughput=100.0), summary([[10, 0.5], [25, 0.09]]), study_args),
            _row("x2", result(2, 20.0, throughput=190.0), summary([[5, 0.5], [15, 0.2]]), study_args),
            _row("x4", result(4, 15.0, throughput=300.0), summary([[4, 0.3], [8, 0.08]]), study_args)]
    study = compare(rows, min_efficiency=0.7)
    assert study["recommended"]["task_id"] == "x4"  # efficiency 0.75, first to the target
    assert "reached the target in 8 s" in study["verdict"] and "x2 never reached the target" in study["verdict"]
    rows[2]["efficiency"] = None
    slow = [_row("x1", result(1, 30.0, throughput=100.0), None, STUDY | {"throughput_metric": "sps"}),
            _row("x2", result(2, 20.0, throughput=190.0), None, STUDY | {"throughput_metric": "sps"})]
    assert compare(slow)["recommended"]["task_id"] == "x2"  # no target: the highest speed-up at the floor


def test_the_plot_ticks_whole_hosts_and_carries_the_recommendation_as_its_title(tmp_path):
    from airflow_smdist.operators.scaling import draw_study, plot_study

    rows = [_row(f"x{n}", result(n, s), None, STUDY) for n, s in ((1, 40.0), (2, 25.0), (4, 20.0))]
    study = compare(rows, min_efficiency=0.7)
    fig = draw_study(study)
    for ax in fig.axes:
        assert list(ax.get_xticks()) == [1, 2, 4], ax.get_xticks()  # not 1.5, 2.5, ...
    assert fig._suptitle.get_text().replace("\n", " ") == study["verdict"]
    assert fig._suptitle.get_text().startswith("Recommended: x2")
    path = plot_study(study, str(tmp_path / "scaling.png"))
    with open(path, "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"
