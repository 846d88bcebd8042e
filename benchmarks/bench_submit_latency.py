"""Task start -> job submitted: the training operator's ``execute`` (``wait_for_completion=False``) in a fresh
interpreter, on the sagemaker backend against a moto server on loopback, for a framework image (looked up
from the SDK's tables) vs an explicit ``image_uri``, and the old path (the SDK's ``image_uris.retrieve``,
importing the SDK) for reference.

Each sample is a new process that has imported ``airflow.sdk`` already (a task runner has), then times from
building the operator to ``CreateTrainingJob`` answered: request building and validation, the image lookup,
the source upload to S3, the Describe that finds no earlier job, the Create (timed when CreateTrainingJob has
answered). Variants are sampled round-robin; medians are reported.
Usage: python benchmarks/bench_submit_latency.py [repeats]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests", "integration"))
sys.path.insert(0, HERE)

from _common import load_note, report

CHILD = r'''
import sys, time, uuid
from types import SimpleNamespace
import airflow.sdk  # a task runner has Airflow imported before execute()
variant, source_dir, bucket = sys.argv[1:4]
if variant == "sdk":  # the old path, for reference: the SDK's own retrieve (imports the SDK)
    from airflow_smdist.specs import images
    from sagemaker.core.image_uris import retrieve  # the [oracle] extra
    images.lookup_image_uri = lambda *a, **k: retrieve(*a, **k)
from airflow_smdist.backends import sagemaker as sm_backend
submitted = []
_submit = sm_backend.SageMakerBackend.submit
def timed_submit(self, *a, **k):  # the moment CreateTrainingJob has answered
    name = _submit(self, *a, **k)
    submitted.append(time.perf_counter())
    return name
sm_backend.SageMakerBackend.submit = timed_submit
t0 = time.perf_counter()
from airflow_smdist.operators.training import SageMakerDistributedTrainingOperator
image = {"image_uri": "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.5.1-cpu-py311"} \
    if variant == "image_uri" else {"framework": "pytorch", "framework_version": "2.5.1", "py_version": "py311"}
op = SageMakerDistributedTrainingOperator(
    task_id="t" + uuid.uuid4().hex[:6], backend="sagemaker", entry_point="train.py", source_dir=source_dir,
    role="arn:aws:iam::123456789012:role/SageMakerRole", output_path=f"s3://{bucket}/out",
    instance_type="ml.m5.xlarge", wait_for_completion=False, **image)
ti = SimpleNamespace(dag_id="bench", task_id=op.task_id, map_index=-1, try_number=1, xcom_push=lambda **kw: None)
op.execute({"ti": ti, "run_id": uuid.uuid4().hex})
print("RESULT", submitted[0] - t0)
'''


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    import boto3
    from moto_server import MotoServer

    server = MotoServer()
    url = server.start()
    env = {**os.environ, "PYTHONPATH": REPO, "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
           "AWS_DEFAULT_REGION": "us-east-1", "SMDIST_LOCAL_ROOT": tempfile.mkdtemp(prefix="smdist-bench-submit-"),
           "AIRFLOW_CONN_AWS_DEFAULT": json.dumps({"conn_type": "aws", "extra": {"endpoint_url": url,
                                                                                 "region_name": "us-east-1"}})}
    bucket = "smdist-bench-submit"
    boto3.client("s3", endpoint_url=url, region_name="us-east-1", aws_access_key_id="testing",
                 aws_secret_access_key="testing").create_bucket(Bucket=bucket)
    src = tempfile.mkdtemp(prefix="smdist-bench-src-")
    with open(os.path.join(src, "train.py"), "w") as f:
        f.write("print('hello')\n")
    variants = {"image_uri": "explicit image_uri (baseline)", "framework": "framework image, tables read as data",
                "sdk": "framework image, SDK's image_uris.retrieve (old path)"}
    samples: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(repeats):
        for v in variants:
            out = subprocess.run([sys.executable, "-c", CHILD, v, src, bucket], capture_output=True, text=True, env=env,
                                 check=False)
            line = [x for x in out.stdout.splitlines() if x.startswith("RESULT")]
            if not line:
                raise SystemExit(out.stderr[-3000:])
            samples[v].append(float(line[-1].split()[1]))
    server.stop()
    med = {v: statistics.median(x) for v, x in samples.items()}
    rows = [(label, f"{med[v]:.2f} s", f"{med[v] / med['image_uri']:.2f}") for v, label in variants.items()]
    report("Task start to job submitted (training operator, sagemaker backend on moto)", rows,
           note=f"median of {repeats} fresh interpreters each (airflow.sdk imported first), sampled round-robin. "
                f"{load_note()} Samples (s): " + json.dumps({v: [round(x, 2) for x in s] for v, s in samples.items()}))


if __name__ == "__main__":
    main()
