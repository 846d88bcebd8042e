"""The provider's commands: ``airflow smdist ...`` on Airflow >= 3.2, the ``smdist`` console script everywhere."""
