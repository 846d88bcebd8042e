"""Managed spot training, rehearsed: a 2-host PyTorch DDP job interrupted on purpose, resumed from checkpoints.

    airflow dags test smdist_spot_rehearsal

SageMaker interrupts a spot job when capacity goes, not when you want. On the local backend the Param
``spot_interruptions`` ("checkpoint,checkpoint": twice, each try right after it wrote a checkpoint, so on any
machine the resume from a checkpoint shows; "4,4" would be 4 s into each try) interrupts the job as SageMaker does: its
hosts are lost (processes, /tmp, /opt/ml/model), the secondary status goes ``Interrupted`` and back through
``Starting``/``Downloading``/``Training``, and the checkpoints rank 0 wrote to /opt/ml/checkpoints are synced
to ``checkpoint_s3_uri`` and copied back into every host before the script starts again. The job's insight
says how much work each interruption cost (the epoch reached vs the epoch resumed at). The request is the
same with or without the Param: on SageMaker (the smdist connection's backend) it is a plain spot job.
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

from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator
from airflow_smdist.params import (
    deferrable_param,
    rehearse_spot_interruptions,
    role_param,
    spot_interruptions_param,
    storage_param,
)

HERE = os.path.dirname(os.path.abspath(__file__))
LOCAL_DATA = "file://" + os.path.join(os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "smdist-data")

with DAG(
    dag_id="smdist_spot_rehearsal",
    description="A managed spot DDP job interrupted twice on purpose, resumed from rank 0's checkpoints",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["smdist", "spot", "pytorch"],
    params={
        "data_uri": storage_param(f"{LOCAL_DATA}/spot", "Prefix the generated training data is written to."),
        "output_uri": storage_param(f"{LOCAL_DATA}/spot-output", "S3OutputPath of the job (model, checkpoints)."),
        "role": role_param(),
        # each try is interrupted right after its first checkpoint (rank 0 checkpoints every epoch): on any machine,
        # however long torch's start-up takes, the next try resumes from it; the third try ends the 12 epochs
        "spot_interruptions": spot_interruptions_param("checkpoint,checkpoint"),
        "epochs": Param(12, type="integer", minimum=1, description="Passes over the training data."),
        "epoch_seconds": Param(1.0, type="number", minimum=0,
                               description="Each epoch lasts at least this long (the demo data trains in "
                                           "milliseconds; an interruption needs epochs that take time)."),
        "max_wait": Param(1800, type="integer", minimum=60,
                          description="MaxWaitTimeInSeconds: waits for spot capacity plus the run."),
        "deferrable": deferrable_param(),
    },
    render_template_as_native_obj=True,
) as dag:

    @task
    def generate_data(data_uri: str) -> str:
        """y = 3 x0 - 2 x1 + 0.5 x2 + noise, four small CSV objects."""
        import random

        from airflow_smdist.storage import Storage, join_uri

        rng = random.Random(7)
        for part in range(4):
            rows = []
            for _ in range(200):
                x = [rng.uniform(-1, 1) for _ in range(3)]
                rows.append(",".join(f"{v:.6f}" for v in [*x, 3 * x[0] - 2 * x[1] + 0.5 * x[2] + rng.gauss(0, 0.05)]))
            Storage().write_bytes(("\n".join(rows) + "\n").encode(), join_uri(data_uri, f"part-{part}.csv"))
        return data_uri

    data = generate_data("{{ params.data_uri }}")

    train = SageMakerDistributedTrainingOperator(
        task_id="train_on_spot",
        entry_point="train.py",
        source_dir=os.path.join(HERE, "scripts", "torch_ddp"),  # checkpoints from rank 0, resumes at start
        framework="pytorch",
        framework_version="2.5",
        py_version="py311",
        instance_type="ml.m5.xlarge",
        instance_count=2,
        distribution={"torch_distributed": {"enabled": True}},
        inputs={"train": {"s3_uri": "{{ ti.xcom_pull(task_ids='generate_data') }}", "distribution": "ShardedByS3Key"}},
        output_path="{{ params.output_uri }}",
        checkpoint_s3_uri="{{ params.output_uri }}/checkpoints/{{ run_id | replace(':', '-') | replace('+', '-') }}",
        role="{{ params.role }}",
        hyperparameters={"epochs": "{{ params.epochs }}", "batch_size": 32,
                         "epoch_seconds": "{{ params.epoch_seconds }}"},
        metric_definitions=[{"Name": "epoch", "Regex": r"epoch=([0-9]+)"},
                            {"Name": "train:loss", "Regex": r"train_loss=([0-9.eE+-]+)"}],
        use_spot_instances=True,
        max_run=1200,
        max_wait="{{ params.max_wait }}",
        poll_interval=2,
        deferrable="{{ params.deferrable }}",
        on_execute_callback=rehearse_spot_interruptions("spot_interruptions"),  # local backend only
    )
    data >> train

    @task
    def report(result: dict, **context) -> dict:
        """What the interruptions cost; a rehearsal that asked for interruptions and saw none fails."""
        insight = result.get("insight") or {}
        for item in insight.get("interruptions", []):
            print(f"{item['why']}: {item['metric']} {item['last_before']:g} reached, resumed at "
                  f"{item['resumed_from']:g}, {item['lost']:g} lost")
        print(f"job {result['job_name']}: {result['interruptions']} interruption(s), final {result['final_metrics']}, "
              f"training {result['training_time_seconds']} s, billable {result['billable_time_seconds']} s")
        wanted = [s for s in str(context["params"]["spot_interruptions"] or "").split(",") if s.strip()]
        if result["backend"] == "local" and wanted and not str(wanted[0]).startswith("random"):
            if result["interruptions"] != len(wanted):
                raise RuntimeError(f"asked for {len(wanted)} interruption(s), the job saw {result['interruptions']}: "
                                   "a try that completes before its time is not interrupted; the job trains "
                                   "about epochs x epoch_seconds, so ask for times that add up to less")
            resumed = [item["resumed_from"] for item in insight.get("interruptions", [])]
            if len(resumed) != len(wanted) or not resumed[-1]:
                raise RuntimeError(f"the last try resumed from {resumed[-1] if resumed else 'nothing'}: a rehearsal "
                                   "whose tries never resume from a checkpoint shows nothing; interrupt after "
                                   "checkpoints ('checkpoint,checkpoint')")
        return {"interruptions": result["interruptions"], "final_metrics": result["final_metrics"]}

    report(train.output)
