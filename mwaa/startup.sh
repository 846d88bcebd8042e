#!/bin/sh
# MWAA startup script (StartupScriptS3Path): runs on every scheduler, worker and web server before Airflow.
# Jobs go to SageMaker on MWAA; the local backend is for development machines and CI.
export SMDIST_BACKEND="${SMDIST_BACKEND:-sagemaker}"
# SageMaker's control-plane quotas are per account and region: keep polls of many deferred jobs coalesced
# and unhurried (see the README's "Waiting at scale").
export AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE="${AIRFLOW__OPERATORS__DEFAULT_DEFERRABLE:-True}"
