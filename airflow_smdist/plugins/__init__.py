"""The provider's Airflow plugin: the job page of local jobs in the Airflow UI (see :mod:`.console`)."""
