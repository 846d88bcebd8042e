"""The trigger's log cursor in its task instance's XCom, on Airflow 2's metadata database (MWAA 2.10 and 2.11):
the path of ``_compat.trigger_xcom_get`` / ``trigger_xcom_set`` / ``task_xcom_delete`` that Airflow 3's supervisor
channel does not take (tests/unit/test_trigger_cursor.py plays that one; scripts/e2e/test_trigger_moves.py runs it
in a deployment). In a fresh AIRFLOW_HOME with a migrated database: a DAG run and its task instance, the record
the operator seeds before it defers (``ti.xcom_push``), the trigger's store read and written from an event loop
(the triggerer's), and the delete the operator makes back from the trigger."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from airflow_smdist._compat import AIRFLOW_V_3_0_PLUS

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

SCRIPT = r"""
import asyncio, json
import pendulum
from airflow.models import DAG, DagRun, TaskInstance
from airflow.operators.empty import EmptyOperator
from airflow.utils.session import create_session
from airflow.utils.state import DagRunState
from airflow.utils.types import DagRunType
from airflow_smdist._compat import task_xcom_delete
from airflow_smdist.triggers.cursor import XCOM_KEY, XComCursorStore

dag = DAG("cursor_dag", start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), schedule=None)
task = EmptyOperator(task_id="train", dag=dag)
with create_session() as session:
    session.add(DagRun(dag_id="cursor_dag", run_id="run-1", run_type=DagRunType.MANUAL, state=DagRunState.RUNNING,
                       execution_date=pendulum.now("UTC")))
    session.flush()
    ti = TaskInstance(task, run_id="run-1")
    session.add(ti)
seen = {}
store = XComCursorStore(ti)
seen["missing"] = asyncio.run(store.load())
ti.xcom_push(key=XCOM_KEY, value={"key": "deferral-1", "cursor": None})  # the operator's seed
seen["seeded"] = asyncio.run(store.load())
asyncio.run(store.save({"key": "deferral-1", "cursor": {"t": 1700000000000, "seen": ["e1"]}}))
seen["saved"] = asyncio.run(XComCursorStore(ti).load())  # another trigger, another event loop
task_xcom_delete(ti, XCOM_KEY)
seen["deleted"] = asyncio.run(store.load())
print("SEEN " + json.dumps(seen))
"""


@pytest.mark.skipif(AIRFLOW_V_3_0_PLUS, reason="Airflow 3 reaches XComs through the supervisor channel (unit and e2e)")
def test_the_trigger_cursor_round_trips_through_airflow_2s_xcom_table(tmp_path):
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow"), "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
           "PYTHONPATH": REPO}
    env.pop("AIRFLOW__CORE__UNIT_TEST_MODE", None)
    os.makedirs(env["AIRFLOW_HOME"])
    airflow = os.path.join(os.path.dirname(sys.executable), "airflow")
    migrate = subprocess.run([airflow, "db", "migrate"], env=env, capture_output=True, text=True, timeout=300)
    assert migrate.returncode == 0, migrate.stdout[-3000:] + migrate.stderr[-3000:]
    run = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    line = next((x for x in run.stdout.splitlines() if x.startswith("SEEN ")), None)
    assert run.returncode == 0 and line, run.stdout[-3000:] + run.stderr[-3000:]
    assert json.loads(line[len("SEEN "):]) == {
        "missing": None,
        "seeded": {"key": "deferral-1", "cursor": None},
        "saved": {"key": "deferral-1", "cursor": {"t": 1700000000000, "seen": ["e1"]}},
        "deleted": None,
    }
