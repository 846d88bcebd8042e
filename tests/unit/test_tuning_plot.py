"""The tuning plot: every trial's objective, and the objective against each tuned hyperparameter."""

from __future__ import annotations

from airflow_smdist.operators.tuning import draw_objective, plot_objective


def rows():
    trials = [(0.001, "adam", 4, 0.9), (0.01, "sgd", 4, 0.7), (0.1, "adam", 4, 0.4), (0.3, "sgd", 4, None)]
    return [{"number": i, "training_job": f"t-{i}", "status": "Completed" if obj is not None else "Failed",
             "objective": obj, "hyperparameters": {"learning_rate": str(lr), "optimizer": opt, "epochs": str(ep)}}
            for i, (lr, opt, ep, obj) in enumerate(trials, start=1)]


def test_each_tuned_hyperparameter_gets_a_panel_of_the_objective_against_its_values(tmp_path):
    fig = draw_objective(rows(), metric="validation:loss", maximize=False, title="t")
    trials, *panels = fig.axes
    assert trials.get_xlabel() == "trial (launch order)"
    assert [ax.get_xlabel() for ax in panels] == ["learning_rate", "optimizer"]  # epochs never changed
    lr, opt = panels
    assert lr.get_xscale() == "log"  # 0.001 .. 0.1: two decades
    offsets = lr.collections[0].get_offsets()
    assert sorted(zip(offsets[:, 0].tolist(), offsets[:, 1].tolist())) == [(0.001, 0.9), (0.01, 0.7), (0.1, 0.4)]
    assert [t.get_text() for t in opt.get_xticklabels()] == ["adam", "sgd"]
    assert all(ax.get_ylabel() == "validation:loss" for ax in panels)
    plot_objective(rows(), metric="validation:loss", maximize=False, title="t", path=str(tmp_path / "o.png"))
    assert (tmp_path / "o.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_trials_without_tuned_values_keep_the_single_panel():
    one = [dict(r, hyperparameters={}) for r in rows()]
    assert len(draw_objective(one, metric="m", maximize=True, title="t").axes) == 1
