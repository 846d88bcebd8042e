"""Seed options 3 and 4: sharded batch inference, three ways, with nothing lost.

Trains a small scikit-learn model (its model.tar.gz carries ``code/inference.py``), generates a prefix of
many CSV files to score, and scores it with ``SageMakerShardedBatchInferenceOperator`` three ways, one
argument (``fan_out``) apart:

1. ``fan_out="transform"``: one Batch Transform job over ``instance_count`` instances;
2. ``fan_out="processing"``: one processing job whose input is ShardedByS3Key;
3. ``fan_out="jobs"`` as a TaskGroup (``sharded_batch_inference``): a shard planner balances the objects by
   size, one mapped task per shard's transform job (each retried and deferred on its own), then a merge step
   (completeness check + manifest).

``compare`` checks the three output prefixes hold the same objects, byte for byte, one ``<key>.out`` per
input object. Then one output is deleted and the first way is run again: the completeness check finds the
missing object and the re-run processes that object alone.

    airflow dags test smdist_sharded_batch_inference

The default backend is ``local`` (runs here, for real: worker processes per instance). Set the
``smdist_default`` connection's extra to {"backend": "sagemaker"} and the ``*_uri`` / ``role`` params to S3
prefixes and your execution role to run the same DAG on SageMaker.
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
from airflow_smdist.operators.transform import SageMakerShardedBatchInferenceOperator, sharded_batch_inference
from airflow_smdist.params import (
    PROCESSING_INSTANCE_TYPES,
    instance_type_param,
    role_param,
    storage_param,
)

HERE = os.path.dirname(os.path.abspath(__file__))
LOCAL_DATA = "file://" + os.path.join(os.environ.get("AIRFLOW_HOME", os.path.expanduser("~/airflow")), "smdist-data")
#: the SageMaker scikit-learn image (training and serving); written out so DAG parsing needs no SDK lookup
SKLEARN_IMAGE = "683313688378.dkr.ecr.us-east-1.amazonaws.com/sagemaker-scikit-learn:1.2-1-cpu-py3"
RUN = "{{ run_id | replace(':', '-') | replace('+', '-') | replace('.', '-') }}"

#: how records are read, batched and written: the same for every way and for the planner / merge steps
RECORDS = dict(content_type="text/csv", accept="text/csv", split_type="Line", batch_strategy="MultiRecord",
               max_payload_mb=1, assemble_with="Line")
SCORE_INPUT = "{{ params.data_uri }}/score/" + RUN
OUTPUT = "{{ params.output_uri }}/" + RUN

with DAG(
    dag_id="smdist_sharded_batch_inference",
    description="Batch inference three ways (transform, ShardedByS3Key processing, N mapped jobs), complete",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    tags=["smdist", "option-3", "option-4", "batch-inference"],
    params={
        "data_uri": storage_param(f"{LOCAL_DATA}/batch",
                                  "Prefix the training data and the objects to score are written under."),
        "output_uri": storage_param(f"{LOCAL_DATA}/batch-output",
                                    "Prefix the model and the three ways' predictions go under."),
        "role": role_param(),
        "instance_type": instance_type_param("ml.m5.xlarge", what="Every job's", choices=PROCESSING_INSTANCE_TYPES),
        "instance_count": Param(2, type="integer", minimum=1, maximum=16,
                                description="Instances of the transform and processing jobs (and of each shard job)."),
        "shards": Param(3, type="integer", minimum=1, maximum=50, description="Separate jobs of the third way."),
        "files": Param(24, type="integer", minimum=1, maximum=2000, description="Objects to score."),
        "rows": Param(6000, type="integer", minimum=10, description="Records to score, over all objects."),
    },
    render_template_as_native_obj=True,
) as dag:

    @task
    def generate_data(data_uri: str, run: str, files: int, rows: int) -> dict:
        """Training rows y = f(x0..x3) + noise, and ``files`` objects of uneven sizes to score (some nested)."""
        import random

        from airflow_smdist.storage import Storage, join_uri

        rng = random.Random(7)
        storage = Storage()

        def row(with_label: bool) -> str:
            x = [rng.uniform(-2, 2) for _ in range(4)]
            y = 1.5 * x[0] - 2 * x[1] * x[2] + 0.5 * x[3] ** 2 + rng.gauss(0, 0.05)
            return ",".join(f"{v:.5f}" for v in (x + [y] if with_label else x))

        train_uri = join_uri(data_uri, "train", run)
        storage.write_bytes(("\n".join(row(True) for _ in range(2000)) + "\n").encode(),
                            join_uri(train_uri, "train.csv"))
        score_uri = join_uri(data_uri, "score", run)
        weights = [1 + (i * 7) % 5 for i in range(files)]  # uneven objects: the planner balances by size
        for i, w in enumerate(weights):
            n = max(1, rows * w // sum(weights))
            key = f"region-{i % 3}/part-{i:04d}.csv" if i % 4 == 0 else f"part-{i:04d}.csv"
            storage.write_bytes(("\n".join(row(False) for _ in range(n)) + "\n").encode(), join_uri(score_uri, key))
        return {"train": train_uri, "score": score_uri, "objects": files}

    data = generate_data("{{ params.data_uri }}", RUN, "{{ params.files }}", "{{ params.rows }}")

    train = SageMakerDistributedTrainingOperator(
        task_id="train",
        entry_point="train.py",
        source_dir=os.path.join(HERE, "scripts", "inference"),
        image_uri=SKLEARN_IMAGE,
        instance_type="{{ params.instance_type }}",
        instance_count=1,
        inputs={"train": "{{ ti.xcom_pull(task_ids='generate_data')['train'] }}"},
        output_path="{{ params.output_uri }}/models",
        role="{{ params.role }}",
        hyperparameters={"alpha": 0.1, "degree": 2},
        metric_definitions=[{"Name": "train:r2", "Regex": r"train_r2=([0-9.eE+-]+)"}],
        max_run=1800,
        poll_interval=2,
    )
    data >> train

    @task
    def model_name(run_id=None) -> str:
        """One model for every way (CreateModel once; the operators reuse it)."""
        import hashlib

        return "smdist-sklearn-" + hashlib.sha1(str(run_id).encode()).hexdigest()[:12]

    name = model_name()
    model = dict(model_name=name, model_data="{{ ti.xcom_pull(task_ids='train')['model_artifacts'] }}",
                 image_uri=SKLEARN_IMAGE, role="{{ params.role }}", instance_type="{{ params.instance_type }}",
                 instance_count="{{ params.instance_count }}", poll_interval=2)

    # way 1: one Batch Transform job over instance_count instances
    score_transform = SageMakerShardedBatchInferenceOperator(
        task_id="score_transform", fan_out="transform", input_uri=SCORE_INPUT, output_uri=OUTPUT + "/transform",
        **model, **RECORDS)
    # way 2: one processing job, ShardedByS3Key input, the model's inference code on each instance
    score_processing = SageMakerShardedBatchInferenceOperator(
        task_id="score_processing", fan_out="processing", input_uri=SCORE_INPUT, output_uri=OUTPUT + "/processing",
        **model, **RECORDS)
    # way 3: N separate jobs over a planned split, one mapped task (and retry) per shard, then the merge
    # fan_out="jobs" as a TaskGroup: plan -> one mapped task per shard job (retried on its own) -> merge
    score_jobs = sharded_batch_inference("score_jobs", input_uri=SCORE_INPUT, output_uri=OUTPUT + "/jobs",
                                         shards="{{ params.shards }}", shard_retries=2, **model, **RECORDS)
    merge = score_jobs.get_child_by_label("merge")
    train >> [score_transform, score_processing, score_jobs]

    @task
    def compare(transform: dict, processing: dict, jobs: dict, output: str) -> str:
        """Every way complete, the same objects, byte for byte."""
        from airflow_smdist.storage import Storage, join_uri, relative_key

        storage = Storage()
        seen = {}
        for way, summary in (("transform", transform), ("processing", processing), ("jobs", jobs)):
            if not summary["complete"]:
                raise RuntimeError(f"{way}: incomplete: {summary['pending']}")
            prefix = join_uri(output, way)
            seen[way] = {relative_key(prefix, o): storage.read_bytes(o.uri) for o in storage.list(prefix)
                         if "/_smdist/" not in o.uri}
            print(f"{way}: {summary['objects']} object(s), {summary['records']} record(s), "
                  f"{len(summary['jobs'])} job(s): {[j['job_name'] for j in summary['jobs']]}")
        keys = {way: sorted(files) for way, files in seen.items()}
        if not keys["transform"] == keys["processing"] == keys["jobs"]:
            raise RuntimeError(f"the ways wrote different objects: { {w: len(k) for w, k in keys.items()} }")
        for key in keys["transform"]:
            if not seen["transform"][key] == seen["processing"][key] == seen["jobs"][key]:
                raise RuntimeError(f"{key} differs between the ways")
        if len(keys["transform"]) != transform["objects"]:
            raise RuntimeError("not one output per input object")
        print(f"identical: {len(keys['transform'])} outputs, "
              f"{sum(len(v) for v in seen['transform'].values())} bytes each way")
        return sorted(transform["outputs"].values())[len(transform["outputs"]) // 2]

    victim = compare(score_transform.output, score_processing.output, merge.output, OUTPUT)

    @task
    def delete_one_output(uri: str) -> str:
        """Lose one output, as a partial failure or an accidental delete would."""
        import os as _os

        from airflow_smdist.storage import Storage, parse_uri

        scheme, bucket, key = parse_uri(uri)
        if scheme == "file":
            _os.remove(key)
        else:
            Storage().s3.delete_object(Bucket=bucket, Key=key)
        print(f"deleted {uri}")
        return uri

    deleted = delete_one_output(victim)
    rescore = SageMakerShardedBatchInferenceOperator(
        task_id="rescore_transform", fan_out="transform", input_uri=SCORE_INPUT, output_uri=OUTPUT + "/transform",
        **model, **RECORDS)
    deleted >> rescore

    @task
    def check_rerun(summary: dict, deleted_uri: str) -> dict:
        """The re-run found the missing object, processed it alone, and left the prefix complete."""
        if not summary["complete"] or summary["processed"] != 1:
            raise RuntimeError(f"expected one object re-processed and a complete prefix, got {summary}")
        print(f"re-run processed 1 of {summary['objects']} object(s) ({deleted_uri}) with job(s) "
              f"{[j['job_name'] for j in summary['jobs']]}; manifest {summary['manifest_uri']}")
        return {"manifest": summary["manifest_uri"], "objects": summary["objects"], "records": summary["records"]}

    check_rerun(rescore.output, deleted)
