"""``python -m airflow_smdist.cli jobs ...``: the ``smdist`` console script, where its script is not on PATH."""

from airflow_smdist.cli.definition import main

main()
