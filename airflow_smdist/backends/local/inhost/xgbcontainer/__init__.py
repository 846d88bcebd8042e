"""What SageMaker's XGBoost framework image has of its own, for script mode (issue 29): a stand-in for the
container's package ``sagemaker_xgboost_container`` (not on PyPI), written here from the container's source.

Scripts written for the image (``sagemaker-xgboost:1.7-1``, ``entry_point=...``) import the container's own
package: ``from sagemaker_xgboost_container import distributed`` (``rabit_run``, ``Rabit``,
``wait_hostname_resolution``), ``from sagemaker_xgboost_container.data_utils import get_dmatrix``, the
``constants``, and ``sagemaker_algorithm_toolkit.exceptions`` (the errors ``data_utils`` raises). The packages
below this directory have the same public names, signatures and behaviour, implemented for the xgboost the
runtime installs (1.7.x for the 1.7 image: ``xgboost.collective`` and the Python ``xgboost.tracker.RabitTracker``;
2.x/3.x: the C++ tracker). Source read: aws/sagemaker-xgboost-container (Apache-2.0) at
``f7a93a21e50e44b4077f0889a7f676cad8c226f3`` (branch ``1.7-1``), and ``cb8df91cd44c7b01c53ccf321fd3fdf3eb78adae``
(HEAD, the 3.x port); docs/contracts.md §8.

How it reaches a job: :func:`runtimes._with_platform` copies ``sagemaker_xgboost_container/`` and
``sagemaker_algorithm_toolkit/`` into the job's private ``platform/site/`` and puts that directory last on the
hosts' ``PYTHONPATH``, for jobs of the XGBoost image only (a scikit-learn job importing the package fails with
ModuleNotFoundError, as on SageMaker). For an image whose Python is older than 3.10 (the 1.5 and 1.7 images run
3.8 and 3.9) run on a newer Python here, ``py39_compat.py`` goes there too, as ``sitecustomize``: the image's
``sagemaker_containers`` (``entry_point``, ``_env``) uses ``collections.Mapping``, which Python 3.10 removed.
"""
