"""The job page of local jobs, as an Airflow plugin (entry point group ``airflow.plugins``).

On Airflow 3 the api-server mounts the plugin's FastAPI app (:mod:`.console_app`) under :data:`URL_PREFIX`
(``/smdist/jobs``: the list; ``/smdist/jobs/<kind>/<name>``: one job's page) and, from 3.1, the UI lists
it in its navigation as "SageMaker jobs (local)". The local jobs' extra links open the page
(:class:`airflow_smdist.operators.links.LocalJobPageLink`). On Airflow 2 the plugin registers nothing.

Every Airflow process that loads plugins imports this module (the scheduler, the dag-processor, each task):
it imports nothing heavy. FastAPI, the backend and matplotlib are imported when the api-server asks for the
app (:attr:`SmdistConsolePlugin.fastapi_apps`) or when a page is drawn.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from airflow_smdist._compat import AirflowPlugin, console_supported

#: where the api-server mounts the app
URL_PREFIX = "/smdist"
#: the navigation entry (Airflow >= 3.1)
NAV_TITLE = "SageMaker jobs (local)"


def job_page_path(kind: str, name: str) -> str:
    """The job page's path under the api-server's base URL."""
    return f"{URL_PREFIX}/jobs/{kind}/{name}"


@cache
def _app() -> Any:
    from airflow_smdist.plugins.console_app import create_app

    return create_app()


class SmdistConsolePlugin(AirflowPlugin):
    """The job page of local jobs (Airflow >= 3.0; nothing on Airflow 2)."""

    name = "smdist_console"
    # an iframe in the UI (url_route): the page shares the UI's origin and session cookie
    external_views = [{"name": NAV_TITLE, "href": f"{URL_PREFIX}/jobs", "url_route": "smdist-jobs",
                       "destination": "nav", "category": "browse"}] if console_supported() else []

    # AirflowPlugin declares fastapi_apps a plain list; a property reads the same to the api-server, which only
    # reads it, and makes the app when it is read
    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        """Read by the api-server only: the app is made then, not when the plugin is loaded."""
        if not console_supported():
            return []
        return [{"name": "smdist_console", "app": _app(), "url_prefix": URL_PREFIX}]
