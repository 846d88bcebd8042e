"""What runs inside a simulated host, not in the Airflow task or the job supervisor.

Every module here is started by path, inside the host, where the rest of the package is not importable: none
imports ``airflow_smdist`` outside this directory. The host's init process and the MPI agent run with
``python -I -S`` and import the standard library only; the others run in the image's runtime and import what
the image has (numpy, xgboost) where they need it. ``tests/unit/test_import_graph.py`` checks both.

* :mod:`.hostinit`: a host's init process (namespaces, its own root, the lifeline to the supervisor);
* :mod:`.mpiagent`: Open MPI's rsh agent, which starts ``orted`` inside the host it names;
* :mod:`.mpishim`: the launcher of MPI and parameter-server jobs, as the training toolkit runs them;
* :mod:`.builtin_xgboost`: the built-in XGBoost algorithm's training and serving contract;
* ``xgbcontainer/``: the import surface of the XGBoost framework image's script mode
  (``sagemaker_xgboost_container``, ``sagemaker_algorithm_toolkit``), copied into a job's ``platform/site``.
"""
