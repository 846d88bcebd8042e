"""Stand-in for the XGBoost image's ``sagemaker_algorithm_toolkit`` (its errors only): see
``airflow_smdist/backends/local/inhost/xgbcontainer/__init__.py``."""
