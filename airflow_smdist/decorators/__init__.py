"""TaskFlow decorators: ``@task.smdist`` (a function as a multi-host training job) and
``@task.smdist_processing`` (one call per host of a processing job, over its shard of the inputs).

Registered through the provider info's ``task-decorators``, so ``from airflow.sdk import task`` (Airflow 3)
or ``from airflow.decorators import task`` (Airflow 2) has ``task.smdist`` once the provider is installed.
Also importable directly: ``from airflow_smdist.decorators.smdist import smdist_task``.
"""
