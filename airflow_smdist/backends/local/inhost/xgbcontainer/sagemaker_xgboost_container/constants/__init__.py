"""``sagemaker_xgboost_container.constants`` (stand-in; values from the container at ``f7a93a21``)."""
