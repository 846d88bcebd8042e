"""Stand-in for the SageMaker XGBoost image's own package, for script mode: ``distributed``, ``data_utils``,
``constants``. Written by airflow-smdist from the container's source (aws/sagemaker-xgboost-container,
Apache-2.0, at ``f7a93a21e50e44b4077f0889a7f676cad8c226f3``, the ``1.7-1`` branch); see
``airflow_smdist/backends/local/inhost/xgbcontainer/__init__.py`` and docs/contracts.md §8. Its algorithm mode, serving
and encoders are not here (the local backend runs the built-in algorithm and the transform engine itself)."""
