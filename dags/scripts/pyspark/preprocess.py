"""PySpark preprocessing, written for SageMaker's Spark processing container (PySparkProcessor).

Reads the raw CSV input (``--input``, a ProcessingInput LocalPath), cleans and encodes it with
``features.py`` (shipped with --py-files), splits it into train / validation with a fixed seed, and writes
each split as headerless CSV (label first) to its ProcessingOutput LocalPath, which SageMaker uploads to S3
at the end of the job. A one-line summary goes to /opt/ml/output/message (the job's ExitMessage).
"""

import argparse
import json
import os

import features
from pyspark.sql import SparkSession
from pyspark.sql import functions as F


def drop_bookkeeping(path):
    """Spark writes Hadoop's .crc checksums and a _SUCCESS marker beside the parts; the processing job
    uploads everything under the output directory, and the next jobs (training channels, batch transform)
    should see only data objects."""
    local = path[len("file://"):] if path.startswith("file://") else path
    if not os.path.isdir(local):
        return
    for name in os.listdir(local):
        if name.endswith(".crc") or name == "_SUCCESS":
            os.remove(os.path.join(local, name))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--input", required=True)
    p.add_argument("--train-output", required=True)
    p.add_argument("--validation-output", required=True)
    p.add_argument("--validation-fraction", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--partitions", type=int, default=0, help="output files per split (0: one per task slot)")
    args = p.parse_args()

    spark = SparkSession.builder.appName("smdist-tabular-preprocess").getOrCreate()
    sc = spark.sparkContext
    print(f"spark master={sc.master} defaultParallelism={sc.defaultParallelism} "
          f"shuffle.partitions={spark.conf.get('spark.sql.shuffle.partitions')}", flush=True)

    raw = spark.read.csv(args.input, header=True, inferSchema=True)
    total = raw.count()
    df = features.encode(features.clean(raw)).select(*features.feature_columns())
    train, validation = df.randomSplit([1 - args.validation_fraction, args.validation_fraction], seed=args.seed)
    parts = args.partitions or sc.defaultParallelism
    counts = {}
    for name, split, path in (("train", train, args.train_output), ("validation", validation, args.validation_output)):
        split = split.repartition(parts).cache()
        counts[name] = split.count()
        split.write.mode("overwrite").option("header", False).csv(path)
        drop_bookkeeping(path)
        churn = split.agg(F.mean(features.LABEL)).first()[0]
        print(f"{name}: rows={counts[name]} churn_rate={churn:.4f} files={parts} -> {path}", flush=True)
    summary = {"raw_rows": total, "kept_rows": counts["train"] + counts["validation"], **counts}
    print("summary " + json.dumps(summary), flush=True)
    message = os.path.join(os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml"), "output", "message")
    if os.path.isdir(os.path.dirname(message)):
        with open(message, "w") as f:
            f.write(json.dumps(summary))
    spark.stop()


if __name__ == "__main__":
    main()
