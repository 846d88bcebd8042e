"""Feature engineering shared by the PySpark preprocessing app (shipped to Spark with --py-files).

Pure DataFrame transformations, so the same code runs on the local backend's Spark and in SageMaker's
Spark processing container.
"""

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

NUMERIC = ["age", "tenure_months", "monthly_charges", "support_calls"]
PLANS = ["basic", "standard", "premium"]
LABEL = "churned"


def clean(df: DataFrame) -> DataFrame:
    """Drop rows without a label or with impossible values; fill missing numbers with the column median."""
    df = df.where(F.col(LABEL).isNotNull() & (F.col("age").isNull() | F.col("age").between(18, 100)))
    medians = df.approxQuantile(NUMERIC, [0.5], 0.01)
    return df.fillna({c: float(m[0]) for c, m in zip(NUMERIC, medians) if m})


def encode(df: DataFrame) -> DataFrame:
    """One-hot encode the plan and standardise the numeric columns (z-scores over the whole data set)."""
    for plan in PLANS:
        df = df.withColumn(f"plan_{plan}", (F.col("plan") == plan).cast("double"))
    stats = df.agg(*[F.mean(c).alias(f"{c}_mean") for c in NUMERIC],
                   *[F.stddev(c).alias(f"{c}_std") for c in NUMERIC]).first()
    for c in NUMERIC:
        std = stats[f"{c}_std"] or 1.0
        df = df.withColumn(c, (F.col(c) - F.lit(stats[f"{c}_mean"])) / F.lit(std))
    return df


def feature_columns() -> list:
    """Label first, then the features: the CSV layout SageMaker's built-in algorithms and our script read."""
    return [LABEL] + NUMERIC + [f"plan_{p}" for p in PLANS]
