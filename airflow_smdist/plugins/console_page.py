"""What the job page shows, read from the local backend, and the HTML it is drawn as (no template engine).

Reuses the ``smdist jobs`` commands' functions (:mod:`airflow_smdist.cli.jobs`: the list's rows, the masked
Describe* response) and :mod:`airflow_smdist.insight` (findings and the plot, from the job's own metric and
utilization samples). Every value put in HTML is escaped; the page's script adds log lines as text nodes.
"""

from __future__ import annotations

import html
import io
import json
from typing import Any
from urllib.parse import quote

from airflow_smdist.backends.base import TERMINAL_STATES

#: how often the page asks for new log lines while the job runs (milliseconds)
POLL_MS = 1500


# -- reading ------------------------------------------------------------------------------------------------
def owner_dag(backend: Any, kind: str, name: str) -> str | None:
    """The DAG of the task instance that owns the job (its owner tag; a tuning trial: its tuning job's)."""
    from airflow_smdist.backends.local.retention import owner_of

    try:
        owner = owner_of(backend.list_tags(kind, name))
        if owner is None and kind == "training":
            parent = backend.store.state(kind, name).get("parent")
            if parent and backend.store.exists("tuning", parent):
                owner = owner_of(backend.list_tags("tuning", parent))
    except ValueError:  # an owner tag shortened with a hash: no DAG can be named
        return None
    return owner.dag_id if owner else None


def status(backend: Any, kind: str, name: str) -> str:
    return str(backend._live_state(kind, name)["status"])


def rows(backend: Any) -> list[dict[str, Any]]:
    """``smdist jobs list``'s rows, newest first, with each job's end time."""
    from airflow_smdist.cli.jobs import _iso, list_rows

    out = list_rows(backend, None, None, None)
    for row in out:
        row["ended"] = _iso(backend.store.state(row["kind"], row["name"]).get("ended"))
    return out


def new_lines(backend: Any, kind: str, name: str, cursor: Any,
              limit: int) -> tuple[list[dict[str, Any]], Any, dict[str, Any]]:
    """The log lines after ``cursor`` (``{t, host, m}``), the next cursor and the job's status. The status is
    read before the lines, so a job seen finished has no line left unread."""
    from airflow_smdist.cli.jobs import redact, secret_values

    state = backend._live_state(kind, name)
    events, cursor = backend.log_events(kind, name, cursor)
    secrets = secret_values(backend.store.request(kind, name))
    out = [{"t": e.timestamp, "host": e.host, "m": redact(e.message, secrets)} for e in events]
    return out, cursor, {"status": state["status"], "secondary_status": state.get("secondary_status"),
                         "done": state["status"] in TERMINAL_STATES}


def outputs_of(d: dict[str, Any]) -> list[tuple[str, str]]:
    """(what, URI) of everything the job writes, from its Describe* response (any kind)."""
    out = []
    if (d.get("ModelArtifacts") or {}).get("S3ModelArtifacts"):
        out.append(("model artifacts", d["ModelArtifacts"]["S3ModelArtifacts"]))
    if (d.get("OutputDataConfig") or {}).get("S3OutputPath"):
        out.append(("output path", d["OutputDataConfig"]["S3OutputPath"]))
    if (d.get("CheckpointConfig") or {}).get("S3Uri"):
        out.append(("checkpoints", d["CheckpointConfig"]["S3Uri"]))
    for o in (d.get("ProcessingOutputConfig") or {}).get("Outputs") or []:
        if (o.get("S3Output") or {}).get("S3Uri"):
            out.append((f"output {o.get('OutputName', '')}", o["S3Output"]["S3Uri"]))
    if (d.get("TransformOutput") or {}).get("S3OutputPath"):
        out.append(("transform output", d["TransformOutput"]["S3OutputPath"]))
    best = (d.get("BestTrainingJob") or {}).get("TrainingJobName")
    if best:
        out.append(("best training job", best))
    return out


def _samples(backend: Any, kind: str, name: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    from airflow_smdist.backends.local.job.sampler import read_utilization
    from airflow_smdist.backends.local.store import read_jsonl

    job_dir = backend.job_dir(kind, name)
    points, _ = read_jsonl(job_dir / "metrics.jsonl")
    return points, read_utilization(job_dir)


def _written_insight(backend: Any, d: dict[str, Any], what: str) -> bytes | None:
    """What the operator wrote of a training job's insight when the job ended (``insight.json`` or
    ``insight.png`` beside its output: :func:`airflow_smdist.insight.job_insight`), None where it wrote none
    (a job run without the operator, or ``insight=False``, or one still running)."""
    output = (d.get("OutputDataConfig") or {}).get("S3OutputPath")
    name = d.get("TrainingJobName")
    if not output or not name or d.get("TrainingJobStatus") not in ("Completed", "Failed", "Stopped"):
        return None
    from airflow_smdist.storage import Storage

    try:
        return bytes(Storage.for_backend(backend).read_bytes(f"{output.rstrip('/')}/{name}/output/{what}"))
    except Exception:  # noqa: BLE001 - none written (or not readable): the page computes what it can
        return None


def _summary(backend: Any, kind: str, name: str,
             d: dict[str, Any]) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
    """The insight summary (findings, metric curves) and the samples (None: none yet). One insight per job: an
    ended training job's is the one its operator wrote (and logged); the page computes one only where none was
    written (a job still running, or run without the operator)."""
    from airflow_smdist import insight

    written = _written_insight(backend, d, "insight.json")
    if written is not None:
        try:
            summary: dict[str, Any] = json.loads(written)
            return summary, []
        except ValueError:  # not the operator's JSON (written by hand, cut short): computed below instead
            pass
    points, samples = _samples(backend, kind, name)
    if not points and not samples:
        return None, samples
    state = backend.store.state(kind, name)
    channels = d.get("InputDataConfig", d.get("ProcessingInputs"))
    summary = insight.summarize(name, points, samples, start=state.get("started") or state.get("created"),
                                end=state.get("ended"), channels=bool(channels) if channels is not None else None)
    return summary, samples


def plot_png(backend: Any, kind: str, name: str) -> bytes | None:
    """The insight plot of the job as it is now (metric curves, CPU, I/O and memory per host)."""
    from airflow_smdist import insight

    d = backend.describe(kind, name)
    written = _written_insight(backend, d, "insight.png")
    if written is not None:  # the operator's own plot of the ended job
        return written
    summary, samples = _summary(backend, kind, name, d)
    if summary is None:
        return None
    return bytes(insight.plot(summary, samples, io.BytesIO()).getvalue())


def _transitions(d: dict[str, Any], state: dict[str, Any]) -> list[dict[str, Any]]:
    from airflow_smdist.cli.jobs import _iso

    found = d.get("SecondaryStatusTransitions")
    if found is not None:
        return [{"status": t.get("Status"), "start": str(t.get("StartTime") or ""),
                 "end": str(t.get("EndTime") or ""), "message": t.get("StatusMessage", "")} for t in found]
    return [{"status": t.get("status"), "start": _iso(t.get("start")) or "", "end": _iso(t.get("end")) or "",
             "message": t.get("message", "")} for t in state.get("transitions") or []]


def _by_host(events: list[Any], secrets: list[str], limit: int) -> dict[str, dict[str, Any]]:
    from airflow_smdist.cli.jobs import redact

    hosts: dict[str, dict[str, Any]] = {}
    for e in events:
        hosts.setdefault(e.host, {"lines": [], "dropped": 0})["lines"].append(redact(e.message, secrets))
    for h in hosts.values():
        if len(h["lines"]) > limit:
            h["dropped"], h["lines"] = len(h["lines"]) - limit, h["lines"][-limit:]
    return dict(sorted(hosts.items()))


def job_view(backend: Any, kind: str, name: str, *, max_events: int) -> dict[str, Any]:
    """Everything the job page shows (``raw_cursor``: where following its log goes on)."""
    from airflow_smdist.cli.jobs import job_row, masked, secret_values

    request = backend.store.request(kind, name)
    d = backend.describe(kind, name)
    state = backend._live_state(kind, name)
    events, cursor = backend.log_events(kind, name)
    secrets = secret_values(request)
    summary, _ = _summary(backend, kind, name, d)
    row = job_row(backend, kind, name)
    return {"kind": kind, "name": name, "row": row, "status": state["status"],
            "secondary_status": state.get("secondary_status"), "failure": d.get("FailureReason"),
            "request": masked(request), "transitions": _transitions(d, state),
            "hosts": _by_host(events, secrets, max_events), "raw_cursor": cursor, "outputs": outputs_of(d),
            "final_metrics": [(m.get("MetricName"), m.get("Value")) for m in d.get("FinalMetricDataList") or []],
            "findings": summary["findings"] if summary else [], "reading": summary["reading"] if summary else None,
            "has_plot": summary is not None}


# -- drawing ------------------------------------------------------------------------------------------------
def e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


STYLE = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.2rem;color:#1a202c;background:#fff}
h1{font-size:1.35rem;margin:.2rem 0 .8rem} h2{font-size:1.05rem;margin:1.4rem 0 .5rem}
table{border-collapse:collapse;font-size:.9rem} td,th{border-bottom:1px solid #e2e8f0;padding:.3rem .6rem;
text-align:left;vertical-align:top} th{background:#f7fafc}
.status{display:inline-block;padding:.1rem .5rem;border-radius:.8rem;background:#edf2f7;font-weight:600}
.Completed{background:#c6f6d5}.Failed{background:#fed7d7}.Stopped,.Stopping{background:#feebc8}
.InProgress{background:#bee3f8}
pre{background:#1a202c;color:#e2e8f0;padding:.6rem;max-height:28rem;overflow:auto;font-size:.8rem;margin:.2rem 0}
details{margin:.3rem 0} summary{cursor:pointer;font-weight:600}
button{background:#c53030;color:#fff;border:0;border-radius:.3rem;padding:.4rem .9rem;font-size:.9rem;cursor:pointer}
button:disabled{background:#a0aec0;cursor:default} .muted{color:#718096} img{max-width:100%;border:1px solid #e2e8f0}
a{color:#2b6cb0}
"""


def _doc(title: str, body: str) -> str:
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{e(title)}</title>"
            f"<meta name=viewport content='width=device-width'><style>{STYLE}</style></head><body>{body}</body></html>")


def _status(status: str, secondary: str | None = None) -> str:
    extra = f" <span class=muted>({e(secondary)})</span>" if secondary and secondary != status else ""
    return f"<span class='status {e(status)}'>{e(status)}</span>{extra}"


def _owner(row: dict[str, Any]) -> str:
    if not row.get("dag_id"):
        return "<span class=muted>no task instance</span>"
    return e(f"{row['dag_id']} / {row['task_id']} / {row['run_id']}") + (
        f" <span class=muted>(try {e(row['try_number'])})</span>" if row.get("try_number") else "")


def list_html(rows: list[dict[str, Any]], *, base: str) -> str:
    head = "".join(f"<th>{h}</th>" for h in ("Kind", "Name", "Status", "Started", "Ended", "Duration",
                                              "DAG / task / run"))
    body = "".join(
        f"<tr><td>{e(r['kind'])}</td><td><a href='{e(base)}/jobs/{e(r['kind'])}/{quote(r['name'])}'>"
        f"{e(r['name'])}</a></td><td>{_status(r['status'], r.get('secondary_status'))}</td>"
        f"<td>{e(r['started'])}</td><td>{e(r.get('ended'))}</td><td>{e(r['duration'])}</td><td>{_owner(r)}</td></tr>"
        for r in rows)
    empty = "" if rows else "<p class=muted>No local jobs (or none of a DAG you may read).</p>"
    return _doc("SageMaker jobs (local)", f"<h1>SageMaker jobs (local)</h1><p class=muted>Jobs the local backend ran "
                f"on this deployment, newest first. <code>airflow smdist jobs ...</code> lists, follows, stops and "
                f"prunes them too.</p><table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>{empty}")


def _table(pairs: list[tuple[Any, Any]]) -> str:
    return "<table>" + "".join(f"<tr><th>{e(k)}</th><td>{e(v)}</td></tr>" for k, v in pairs) + "</table>"


def _summary_html(view: dict[str, Any]) -> str:
    row = view["row"]
    failure = f"<p><b>Failure:</b> {e(view['failure'])}</p>" if view.get("failure") else ""
    stop = ("<button id=stop type=button>Stop</button> <span id=stop-result class=muted></span>"
            if view["may_stop"] and view["status"] not in TERMINAL_STATES else "")
    from airflow_smdist.cli.jobs import _duration

    took = _duration(row["duration"]) if row.get("duration") is not None else None
    facts = "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in (
        ("Kind", e(view["kind"])), ("Started", e(row.get("started"))), ("Duration", e(took)),
        ("DAG / task / run", _owner(row))))
    return (f"<p><span id=status>{_status(view['status'], view['secondary_status'])}</span> {stop}</p>{failure}"
            f"<table>{facts}</table>")


def _transitions_html(view: dict[str, Any]) -> str:
    rows = "".join(f"<tr><td>{e(t['status'])}</td><td>{e(t['start'])}</td><td>{e(t['end'])}</td>"
                   f"<td>{e(t['message'])}</td></tr>" for t in view["transitions"])
    return ("<h2>Status transitions</h2><table id=transitions><thead><tr><th>Status</th><th>Start</th><th>End</th>"
            f"<th>Message</th></tr></thead><tbody>{rows}</tbody></table>")


def _logs_html(view: dict[str, Any]) -> str:
    parts = []
    for host, h in view["hosts"].items():
        dropped = (f"<p class=muted>{h['dropped']} earlier lines not shown: <code>airflow smdist jobs logs "
                   f"{e(view['name'])}</code></p>" if h["dropped"] else "")
        text = e("\n".join(h["lines"]) + ("\n" if h["lines"] else ""))
        parts.append(f"<details open class=host data-host='{e(host)}'><summary>{e(host)}</summary>{dropped}"
                     f"<pre data-host='{e(host)}'>{text}</pre></details>")
    none = "" if parts else "<p id=no-logs class=muted>No log lines yet.</p>"
    return f"<h2>Logs</h2><div id=logs>{''.join(parts)}{none}</div>"


def _insight_html(view: dict[str, Any], plot_url: str) -> str:
    out = "<h2>Metrics and utilization</h2>"
    if view["final_metrics"]:
        out += _table(view["final_metrics"])
    if view["reading"]:
        out += "<p id=reading>" + e(view["reading"]) + "</p>"
    if view["findings"]:
        out += "<ul id=findings>" + "".join(f"<li>{e(f)}</li>" for f in view["findings"]) + "</ul>"
    if view["has_plot"]:
        out += f"<p><img id=plot src='{e(plot_url)}' alt='metrics and per-host utilization'></p>"
    elif not view["final_metrics"]:
        out += "<p class=muted>No metrics or utilization samples yet.</p>"
    return out


SCRIPT = """
const S = JSON.parse(document.getElementById('smdist-state').textContent);
function hostPre(host) {
  for (const p of document.querySelectorAll('pre[data-host]')) if (p.dataset.host === host) return p;
  const d = document.createElement('details'); d.open = true; d.className = 'host'; d.dataset.host = host;
  const s = document.createElement('summary'); s.textContent = host; d.appendChild(s);
  const p = document.createElement('pre'); p.dataset.host = host; d.appendChild(p);
  document.getElementById('logs').appendChild(d); const none = document.getElementById('no-logs');
  if (none) none.remove(); return p;
}
function setStatus(j) {
  const el = document.querySelector('#status .status'); el.textContent = j.status; el.className = 'status ' + j.status;
  let sub = document.querySelector('#status .muted');
  if (!sub) { sub = document.createElement('span'); sub.className = 'muted'; el.after(' ', sub); }
  sub.textContent = j.secondary_status && j.secondary_status !== j.status ? '(' + j.secondary_status + ')' : '';
}
async function poll() {
  try {
    const r = await fetch(S.logs + '?cursor=' + encodeURIComponent(S.cursor),
                          {credentials: 'same-origin', headers: {Accept: 'application/json'}});
    if (r.ok) {
      const j = await r.json(); S.cursor = j.cursor;
      for (const ev of j.events) {
        const p = hostPre(ev.host); const stick = p.scrollTop + p.clientHeight >= p.scrollHeight - 4;
        p.appendChild(document.createTextNode(ev.m + '\\n')); if (stick) p.scrollTop = p.scrollHeight;
      }
      setStatus(j);
      if (j.done) { setTimeout(() => location.reload(), 1000); return; }
    }
  } catch (err) { /* the api-server restarts: try again */ }
  setTimeout(poll, S.poll_ms);
}
const stop = document.getElementById('stop');
// two clicks, not confirm(): the UI shows the page in a sandboxed iframe, where dialogs are blocked
if (stop) stop.addEventListener('click', async () => {
  if (stop.dataset.armed !== '1') {
    stop.dataset.armed = '1'; stop.textContent = 'Click again to stop ' + S.name;
    setTimeout(() => { if (!stop.disabled) { stop.dataset.armed = ''; stop.textContent = 'Stop'; } }, 5000);
    return;
  }
  stop.disabled = true;
  const r = await fetch(S.stop, {method: 'POST', credentials: 'same-origin', headers: {'X-Smdist-Console': 'stop'}});
  const j = await r.json().catch(() => ({}));
  document.getElementById('stop-result').textContent = r.ok ? 'stop requested: ' + j.status : (j.detail || r.status);
  if (!r.ok) stop.disabled = false;
});
if (S.follow) setTimeout(poll, S.poll_ms);
"""


def job_html(view: dict[str, Any], *, base: str) -> str:
    page = f"{base}/jobs/{view['kind']}/{quote(view['name'])}"
    state = {"name": view["name"], "cursor": view["cursor"], "logs": f"{page}/logs", "stop": f"{page}/stop",
             "follow": view["status"] not in TERMINAL_STATES, "poll_ms": POLL_MS}
    data = json.dumps(state).replace("<", "\\u003c")
    request = e(json.dumps(view["request"], indent=1, default=str))
    outputs = _table(view["outputs"]) if view["outputs"] else "<p class=muted>None yet.</p>"
    body = (f"<p><a href='{e(base)}/jobs'>SageMaker jobs (local)</a></p>"
            f"<h1>{e(view['kind'])} job {e(view['name'])}</h1>{_summary_html(view)}{_transitions_html(view)}"
            f"{_logs_html(view)}{_insight_html(view, page + '/plot.png')}<h2>Outputs</h2>{outputs}"
            f"<h2>Request</h2><details><summary>Create request (secret-looking values masked)</summary>"
            f"<pre id=request>{request}</pre></details>"
            f"<script type=application/json id=smdist-state>{data}</script><script>{SCRIPT}</script>")
    return _doc(f"{view['kind']} job {view['name']}", body)
