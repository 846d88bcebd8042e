"""Seed option: SageMaker automatic model tuning (Random, Bayesian, Hyperband or Grid search) of a tabular model.

Tunes the learning rate and tree depth of scikit-learn gradient-boosted trees on generated data (Friedman #1
regression), minimising the validation RMSE the training script prints, then scores a fresh generated set
with the best trial's model. Trigger it from the UI with Params (``strategy`` picks the search), or run it
end to end here:

    airflow dags test smdist_tuning
    airflow dags test smdist_tuning --conf '{"strategy": "Hyperband"}'

The default backend is ``local``: every trial is a real training job on this machine, two at a time.
Set the ``smdist_default`` connection's extra to {"backend": "sagemaker"} (or SMDIST_BACKEND=sagemaker), and
the ``data_uri`` / ``output_uri`` / ``role`` params to your S3 prefixes and execution role, to run the same
DAG on SageMaker. The best trial's model (from the tuning job's XCom) then scores a held-out set with a
sharded batch transform job, and the last task checks the predictions against the labels.
"""

from __future__ import annotations

import os

import pendulum

try:  # Airflow 3
    from airflow.sdk import DAG, Param, task
except ImportError:  # Airflow 2.10 / 2.11
    from airflow import DAG
    from airflow.decorators import task
    from airflow.models.param import Param

from airflow_smdist.operators.transform import SageMakerShardedBatchInferenceOperator
from airflow_smdist.operators.tuning import SmdistTuningOperator
from airflow_smdist.params import instance_type_param, role_param, storage_param

HERE = os.path.dirname(os.path.abspath(__file__))
LOCAL_DATA = "file://" + os.path.join(os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "smdist-data")
SKLEARN_IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"

with DAG(
    dag_id="smdist_tuning",
    description="Hyperparameter tuning (Random, Bayesian, Hyperband, Grid) of gradient-boosted trees; "
                "scores with the best model",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["smdist", "tuning", "scikit-learn"],
    params={
        "strategy": Param("Bayesian", type="string", enum=["Bayesian", "Random", "Hyperband", "Grid"],
                          description="Search strategy. Grid runs every combination of a 3x3 grid; the others "
                                      "sample continuous/integer ranges."),
        "max_jobs": Param(10, type="integer", minimum=1, maximum=100,
                          description="Training jobs (trials) to run; Grid runs every combination instead."),
        "max_parallel_jobs": Param(2, type="integer", minimum=1, maximum=10, description="Trials at a time."),
        "random_seed": Param(42, type="integer", minimum=0, description="RandomSeed: the same seed, the same search."),
        "epochs": Param(8, type="integer", minimum=1, maximum=50,
                        description="Boosting rounds per trial (Hyperband's MaxResource)."),
        "rows": Param(2000, type="integer", minimum=200, description="Generated training rows."),
        "data_uri": storage_param(f"{LOCAL_DATA}/tabular", "Prefix the generated data is written to and read from."),
        "output_uri": storage_param(f"{LOCAL_DATA}/tuning", "S3OutputPath of the trials."),
        "role": role_param(),
        "image_uri": Param(SKLEARN_IMAGE, type="string", description="Training image (SageMaker scikit-learn)."),
        "instance_type": instance_type_param("ml.m5.large", what="Every trial's"),
    },
    render_template_as_native_obj=True,
) as dag:

    @task
    def generate_data(data_uri: str, rows: int) -> dict:
        """Friedman #1 regression: train / validation channels, and a scoring set with its labels."""
        import io

        import numpy as np
        from sklearn.datasets import make_friedman1

        from airflow_smdist.storage import Storage, join_uri

        storage = Storage()
        x, y = make_friedman1(n_samples=int(rows * 1.5), n_features=8, noise=0.5, random_state=7)
        data = np.column_stack([x, y])
        n_train, n_val = rows, rows // 4
        parts = {"train": data[:n_train], "validation": data[n_train:n_train + n_val], "score": data[n_train + n_val:]}
        uris = {}
        for channel, rows_of in parts.items():
            buf = io.StringIO()
            np.savetxt(buf, rows_of, delimiter=",", fmt="%.6f")
            uris[channel] = join_uri(data_uri, channel) + "/"
            storage.write_bytes(buf.getvalue().encode(), join_uri(data_uri, channel, "part-0000.csv"))
        # the scoring set's features alone, as several objects, for the batch inference job
        uris["score_features"] = join_uri(data_uri, "score-features") + "/"
        for i, chunk in enumerate(np.array_split(parts["score"][:, :-1], 4)):
            buf = io.StringIO()
            np.savetxt(buf, chunk, delimiter=",", fmt="%.6f")
            storage.write_bytes(buf.getvalue().encode(), join_uri(data_uri, "score-features", f"part-{i:04d}.csv"))
        print({k: len(v) for k, v in parts.items()}, uris)
        return uris

    @task
    def plan_search(strategy: str, max_jobs: int) -> dict:
        """The ranges for the chosen strategy: Grid takes categorical ranges (every combination runs)."""
        if strategy == "Grid":
            return {"ranges": {"learning_rate": [0.03, 0.1, 0.3], "max_depth": [2, 3, 5]}, "max_jobs": None}
        return {"ranges": {"learning_rate": {"type": "continuous", "min": 0.01, "max": 0.5, "scaling": "Logarithmic"},
                           "max_depth": {"type": "integer", "min": 1, "max": 6}},
                "max_jobs": max_jobs}

    data = generate_data("{{ params.data_uri }}", "{{ params.rows }}")
    search = plan_search("{{ params.strategy }}", "{{ params.max_jobs }}")

    tune = SmdistTuningOperator(
        task_id="tune",
        entry_point="train.py",
        source_dir=os.path.join(HERE, "scripts", "tuning"),
        image_uri="{{ params.image_uri }}",
        instance_type="{{ params.instance_type }}",
        role="{{ params.role }}",
        inputs={"train": "{{ ti.xcom_pull(task_ids='generate_data')['train'] }}",
                "validation": "{{ ti.xcom_pull(task_ids='generate_data')['validation'] }}"},
        output_path="{{ params.output_uri }}",
        hyperparameters={"epochs": "{{ params.epochs }}", "trees_per_epoch": 15},
        metric_definitions=[{"Name": "validation:rmse", "Regex": r"val_rmse=([0-9.]+)"},
                            {"Name": "train:rmse", "Regex": r"train_rmse=([0-9.]+)"}],
        objective_metric_name="validation:rmse",
        objective_type="Minimize",
        strategy="{{ params.strategy }}",
        hyperparameter_ranges="{{ ti.xcom_pull(task_ids='plan_search')['ranges'] }}",
        max_jobs="{{ ti.xcom_pull(task_ids='plan_search')['max_jobs'] }}",
        max_parallel_jobs="{{ params.max_parallel_jobs }}",
        random_seed="{{ params.random_seed }}",
        max_run=1800,
        poll_interval=2,
    )
    [data, search] >> tune

    # the best trial's model, straight from the tuning job's XCom, scored by a sharded batch transform job
    score = SageMakerShardedBatchInferenceOperator(
        task_id="batch_inference", fan_out="transform",
        model_data="{{ ti.xcom_pull(task_ids='tune')['model_artifacts'] }}", image_uri="{{ params.image_uri }}",
        role="{{ params.role }}", instance_type="{{ params.instance_type }}", instance_count=2,
        input_uri="{{ ti.xcom_pull(task_ids='generate_data')['score_features'] }}",
        output_uri="{{ params.output_uri }}/predictions/"
                   "{{ run_id | replace(':', '-') | replace('+', '-') | replace('.', '-') }}",
        content_type="text/csv", accept="text/csv", split_type="Line", batch_strategy="MultiRecord",
        assemble_with="Line", poll_interval=2)
    tune >> score

    @task
    def evaluate(result: dict, scored: dict, data: dict) -> dict:
        """The batch predictions of the best model against the held-out labels."""
        import io
        import math

        import numpy as np

        from airflow_smdist.storage import Storage

        storage = Storage()
        print(f"tuning job {result['job_name']} ({result['strategy']}): best {result['best_training_job']} "
              f"{result['objective_metric']}={result['best_objective_value']} with {result['best_hyperparameters']}; "
              f"trials {result['training_job_status_counters']}; plot {result.get('plot_uri')}")
        if not scored["complete"]:
            raise RuntimeError(f"batch inference incomplete: {scored}")
        outputs = sorted((o.uri for o in storage.list(scored["output_uri"]) if o.uri.endswith(".csv.out")))
        predictions = np.concatenate([np.loadtxt(io.StringIO(storage.read_bytes(u).decode()), ndmin=1)
                                      for u in outputs])
        labels = np.vstack([np.loadtxt(io.StringIO(storage.read_bytes(o.uri).decode()), delimiter=",", ndmin=2)
                            for o in storage.list(data["score"])])[:, -1]
        rmse = math.sqrt(float(np.mean((predictions - labels) ** 2)))
        baseline = math.sqrt(float(np.mean((labels.mean() - labels) ** 2)))
        print(f"batch inference of {len(labels)} rows in {len(outputs)} objects with {result['best_training_job']}: "
              f"RMSE {rmse:.4f} (predicting the mean: {baseline:.4f})")
        if not rmse < baseline:
            raise RuntimeError(f"the best model (RMSE {rmse:.4f}) does not beat the mean ({baseline:.4f})")
        return {"rmse": rmse, "baseline_rmse": baseline, "rows": int(len(labels)),
                "manifest": scored.get("manifest_uri"),
                "model": result["model_artifacts"], "best_training_job": result["best_training_job"]}

    evaluate(tune.output, score.output, data)
