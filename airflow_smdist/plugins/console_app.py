"""The job page's FastAPI app (Airflow >= 3.0's api-server mounts it under ``/smdist``; see :mod:`.console`).

Routes (every one needs an authenticated Airflow user: the UI's session cookie or a bearer token, checked by
Airflow's own ``get_user``):

* ``GET  /jobs``                         the local jobs the user may read (their DAG's task logs)
* ``GET  /jobs/{kind}/{name}``           one job's page (:mod:`.console_page`)
* ``GET  /jobs/{kind}/{name}/logs``      new log lines since ``cursor`` (JSON), for following a running job
* ``GET  /jobs/{kind}/{name}/plot.png``  metrics and per-host utilization, drawn from the job's own samples
* ``POST /jobs/{kind}/{name}/stop``      stop it: needs edit access to the task instances of the job's DAG

A job belongs to the DAG named by its owner tag (the task instance that made it); reading it needs read access
to that DAG's task logs, stopping it edit access to its task instances. A job without an owner (submitted
outside a task) is shown to users who may read every DAG, and is stopped only with ``airflow smdist jobs
stop``. Nothing here serves a file by a name the request gives: a job is a kind of the registry and a
SageMaker job name (``[a-zA-Z0-9](-*[a-zA-Z0-9])*``), looked up under the job root.
"""

from __future__ import annotations

import base64
import binascii
import json
import threading
import time
from typing import Annotated, Any
from typing import Literal
from urllib.parse import quote

from airflow.api_fastapi.core_api.security import get_user
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response

from airflow_smdist.backends.base import JOB_KINDS, JOB_NAME, TERMINAL_STATES
from airflow_smdist.plugins import console_page as page

#: the signed-in Airflow user (Airflow's own dependency: the UI's session cookie or a bearer token). Module-level,
#: so that FastAPI resolves the annotations (this module's are strings: ``from __future__ import annotations``)
User = Annotated[Any, Depends(get_user)]
#: the header the page's Stop button sends: a form on another site cannot send it (CSRF)
STOP_HEADER = "X-Smdist-Console"
#: the backend (its connection's job root) is looked up again after this many seconds
BACKEND_TTL_SECONDS = 60.0
#: log lines one answer of the logs endpoint carries at most (the cursor continues after them)
MAX_EVENTS_PER_ANSWER = 5000


class _Backend:
    """The ``smdist`` connection's local backend, looked up at most every :data:`BACKEND_TTL_SECONDS`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._value: Any = None
        self._at = 0.0

    def __call__(self) -> Any:
        with self._lock:
            if self._value is None or time.monotonic() - self._at > BACKEND_TTL_SECONDS:
                from argparse import Namespace

                from airflow_smdist.cli.jobs import get_backend

                self._value, self._at = get_backend(Namespace(root=None, conn_id=None)), time.monotonic()
            return self._value


get_backend = _Backend()


# -- who may do what -----------------------------------------------------------------------------------------
def _team(dag_id: str) -> str | None:
    from airflow.configuration import conf

    if not conf.getboolean("core", "multi_team", fallback=False):
        return None
    from airflow.models.dag import DagModel

    return DagModel.get_team_name(dag_id)


def may(user: Any, dag_id: str | None, method: Literal["GET", "PUT"]) -> bool:
    """Whether ``user`` may read (``GET``: the DAG's task logs) or stop (``PUT``: its task instances) a job of
    ``dag_id``; a job of no DAG needs that on every DAG to be read, and is never stopped here."""
    from airflow.api_fastapi.app import get_auth_manager
    from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity, DagDetails

    if dag_id is None and method != "GET":
        return False
    entity = DagAccessEntity.TASK_LOGS if method == "GET" else DagAccessEntity.TASK_INSTANCE
    details = DagDetails(id=dag_id, team_name=_team(dag_id)) if dag_id else None
    return bool(get_auth_manager().is_authorized_dag(method=method, access_entity=entity, details=details,
                                                     user=user))


def _job(backend: Any, kind: str, name: str) -> tuple[str, str]:
    """(kind, name) of an existing job, else 404; never a path outside the job root."""
    if kind not in JOB_KINDS or not JOB_NAME.match(name) or not backend.store.exists(kind, name):
        raise HTTPException(404, f"No local {kind} job named {name}")
    root = backend.store.root.resolve()
    if root not in backend.job_dir(kind, name).resolve().parents:  # a job directory that is a link elsewhere
        raise HTTPException(404, f"No local {kind} job named {name}")
    return kind, name


def _readable(request: Request, user: Any, kind: str, name: str) -> tuple[Any, str | None]:
    """(backend, the job's DAG) when ``user`` may read the job; 404 or 403 otherwise."""
    backend = get_backend()
    _job(backend, kind, name)
    dag_id = page.owner_dag(backend, kind, name)
    if not may(user, dag_id, "GET"):
        raise HTTPException(403, "Forbidden")
    return backend, dag_id


# -- the cursor of the logs endpoint: the backend's byte offsets, as URL-safe text --------------------------
def encode_cursor(cursor: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(cursor, separators=(",", ":")).encode()).decode().rstrip("=")


def _offsets(value: Any) -> bool:
    """A cursor is host -> byte offset, nested for a tuning job's trials (nothing else)."""
    if not isinstance(value, dict):
        return False
    return all(isinstance(k, str) and ((isinstance(v, int) and v >= 0) or v is None or _offsets(v))
               for k, v in value.items())


def decode_cursor(text: str | None) -> Any:
    if not text:
        return None
    try:
        cursor = json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (ValueError, binascii.Error):
        raise HTTPException(400, "Bad cursor") from None
    if not _offsets(cursor):
        raise HTTPException(400, "Bad cursor")
    return cursor


# -- the app -------------------------------------------------------------------------------------------------
def create_app() -> FastAPI:
    app = FastAPI(title="SageMaker jobs (local)", docs_url=None, redoc_url=None, openapi_url=None)

    @app.exception_handler(HTTPException)
    async def login_first(request: Request, exc: HTTPException) -> Response:
        """A page opened without a session goes to the login page (and back); an API call gets the error."""
        if exc.status_code == 401 and "text/html" in request.headers.get("accept", ""):
            from airflow.api_fastapi.app import get_auth_manager

            return RedirectResponse(get_auth_manager().get_url_login(next_url=str(request.url)), status_code=303)
        return JSONResponse({"detail": exc.detail}, status_code=exc.status_code, headers=exc.headers)

    @app.get("/jobs", response_class=HTMLResponse)
    def job_list(request: Request, user: User) -> HTMLResponse:
        backend = get_backend()
        rows = [r for r in page.rows(backend) if may(user, r["dag_id"], "GET")]
        return HTMLResponse(page.list_html(rows, base=str(request.scope.get("root_path", ""))))

    @app.get("/jobs/{kind}/{name}", response_class=HTMLResponse)
    def job_page(request: Request, kind: str, name: str, user: User) -> HTMLResponse:
        backend, dag_id = _readable(request, user, kind, name)
        view = page.job_view(backend, kind, name, max_events=MAX_EVENTS_PER_ANSWER)
        view["cursor"] = encode_cursor(view.pop("raw_cursor"))
        view["may_stop"] = may(user, dag_id, "PUT")
        return HTMLResponse(page.job_html(view, base=str(request.scope.get("root_path", ""))))

    @app.get("/jobs/{kind}/{name}/logs")
    def job_logs(request: Request, kind: str, name: str, user: User, cursor: str | None = None) -> JSONResponse:
        backend, _ = _readable(request, user, kind, name)
        events, new_cursor, state = page.new_lines(backend, kind, name, decode_cursor(cursor), MAX_EVENTS_PER_ANSWER)
        return JSONResponse({"events": events, "cursor": encode_cursor(new_cursor), **state})

    @app.get("/jobs/{kind}/{name}/plot.png")
    def job_plot(request: Request, kind: str, name: str, user: User) -> Response:
        backend, _ = _readable(request, user, kind, name)
        png = page.plot_png(backend, kind, name)
        if png is None:
            raise HTTPException(404, "No metrics or utilization samples yet")
        return Response(png, media_type="image/png", headers={"Cache-Control": "no-store"})

    @app.post("/jobs/{kind}/{name}/stop")
    def job_stop(request: Request, kind: str, name: str, user: User) -> JSONResponse:
        if request.headers.get(STOP_HEADER) != "stop":
            raise HTTPException(403, f"Stop needs the {STOP_HEADER} header (the page's Stop button sends it)")
        backend, dag_id = _readable(request, user, kind, name)
        if not may(user, dag_id, "PUT"):
            raise HTTPException(403, "Stopping this job needs edit access to the task instances of DAG "
                                     f"{dag_id}" if dag_id else "This job belongs to no DAG: stop it with "
                                     f"`airflow smdist jobs stop {name}`")
        status = page.status(backend, kind, name)
        if status not in TERMINAL_STATES:
            backend.stop(kind, name)
            status = page.status(backend, kind, name)
        return JSONResponse({"status": status, "page": f"{request.scope.get('root_path', '')}/jobs/{kind}/"
                                                       f"{quote(name)}"})

    return app
