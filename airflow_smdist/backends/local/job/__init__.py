"""The job supervisor's room: what runs in the detached ``python -m airflow_smdist.backends.local.job.<kind>
<job dir>`` process that ``LocalBackend.submit`` starts for each local job, not in the Airflow task.

The local backend's modules sit in three rooms, by the process each runs in:

* ``backends/local/`` (the task side, in the Airflow worker, triggerer, CLI or web server):
  :class:`~airflow_smdist.backends.local.LocalBackend` (submit, describe, stop, waits, logs),
  :mod:`~airflow_smdist.backends.local.status_source` (the triggers' pollers), :mod:`~airflow_smdist.backends.
  local.notify` (waking a wait), :mod:`~airflow_smdist.backends.local.retention` (pruning finished jobs), and
  the two modules both sides share: :mod:`~airflow_smdist.backends.local.store` (the job directory's files)
  and :mod:`~airflow_smdist.backends.local.diskspace` (the reserve ``submit`` makes and the supervisor frees);
* ``backends/local/job/`` (here, the supervisor): :mod:`.supervisor` (what every kind's supervisor does), the
  kinds' modules :mod:`.training`, :mod:`.processing`, :mod:`.transform`, :mod:`.tuning`, and what they
  run a job with: :mod:`.launcher` and :mod:`.hostnet` (the simulated hosts and their network), :mod:`.hostfs`
  (a host's directory, never left), :mod:`.runtimes` and ``images/`` (the image's runtime and its
  manifests), :mod:`.mpi`, :mod:`.contract` (the training toolkit's contract), :mod:`.metrics`,
  :mod:`.sampler`, :mod:`.spot` and :mod:`.litter`;
* ``backends/local/inhost/`` (inside a simulated host, started by path): see its package docstring.

Importing the task side loads nothing of this package; the task side reaches in only inside a call, for
what a job's supervisor module also owns: a kind module's ``OPERATION``, ``check_request`` and ``describe``
(:class:`~airflow_smdist.backends.local.LocalJobKind`), :func:`.runtimes.check_image` and
:func:`.spot.rehearsal_state` (checks at submit), :func:`.launcher.isolation_mode`, :func:`.hostnet.reclaim`
(after a dead supervisor), CreateModel's functions in :mod:`.transform`, a tuning job's trial listing in
:mod:`.tuning`, and :func:`.sampler.read_utilization` (insight, the console page). The kind modules stay
whole here rather than split into a task half and a supervisor half: their ``describe`` and ``main`` share
the module's parsing of the request and state (helpers, constants, the supervisor's classes for the
statuses), so a split would move most of each body and duplicate or cross-import the rest, for a task side
that loads them only when it describes or submits a job of that kind. In the other direction, a supervisor
imports the task side's package for a few shared helpers (``ACCOUNT``, ``dt``, ``last_modified``,
``transitions_of``), and uses :class:`~airflow_smdist.backends.local.LocalBackend` itself in two places only,
inside a call: the tuning supervisor submits its trials as training jobs, and :mod:`.litter` asks whether another
job's supervisor still lives. ``tests/unit/test_import_graph.py`` checks both rules.
"""
