# Local Airflow image for docker-compose.yaml: the official Airflow image plus this provider from the checkout,
# installed the way Airflow's docs say to extend the image (pip, with apache-airflow pinned to the image's own
# version so that no dependency of the provider moves Airflow).
#
#   docker build -t airflow-smdist:local .
#   docker build --build-arg AIRFLOW_VERSION=3.0.6 --build-arg PYTHON_VERSION=3.12 -t airflow-smdist:3.0.6 .
ARG AIRFLOW_VERSION=3.3.2
ARG PYTHON_VERSION=3.12
FROM apache/airflow:${AIRFLOW_VERSION}-python${PYTHON_VERSION}
ARG AIRFLOW_VERSION
# Where the local backend's PyTorch image runtimes get torch (built on first use by uv, which reads pip's
# settings): a CPU index, since PyPI's x86_64 torch is a multi-GB CUDA build. Empty: PyPI only.
ARG PIP_EXTRA_INDEX_URL=https://download.pytorch.org/whl/cpu
ENV PIP_EXTRA_INDEX_URL=${PIP_EXTRA_INDEX_URL}
USER root
# Java for PySpark processing jobs on the local backend; iproute2's ip and nftables' nft for namespaced hosts'
# network (only where the worker runs as root with the capabilities; see the README)
RUN apt-get update && apt-get install -y --no-install-recommends openjdk-17-jre-headless iproute2 nftables \
    && apt-get clean && rm -rf /var/lib/apt/lists/*
USER airflow
COPY --chown=airflow:root . /opt/airflow-smdist
# [local]: pyspark, optuna, scikit-learn, xgboost, uv, Open MPI (no torch: the job runtimes bring their own)
RUN pip install --no-cache-dir "apache-airflow==${AIRFLOW_VERSION}" "/opt/airflow-smdist[local]"
