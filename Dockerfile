# Local Airflow image for docker-compose.yaml: the official Airflow image plus this provider from the checkout.
ARG AIRFLOW_IMAGE=apache/airflow:3.3.2-python3.12
FROM ${AIRFLOW_IMAGE}
USER root
# Java for PySpark processing jobs on the local backend; iproute2's ip for namespaced hosts' network (root only)
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless iproute2 \
    && apt-get clean && rm -rf /var/lib/apt/lists/*
USER airflow
COPY --chown=airflow:root . /opt/airflow-smdist
# [local]: torch 2.13.0 (add your PyTorch CPU wheel index with PIP_EXTRA_INDEX_URL for a small image),
# pyspark, optuna, scikit-learn
RUN pip install --no-cache-dir "/opt/airflow-smdist[local]"
