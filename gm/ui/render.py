"""The status page as one self-contained HTML document (pure: a `Page` in, text out).

Nothing in it is fetched from anywhere: the style is inline, the charts are inline SVG, and
there is no script. It reloads itself with a meta refresh, which works without JavaScript.
Every text that came from a user or a worker (names, metric keys and values, reasons,
messages) is clipped to a length, then HTML-escaped, in `_text`, the one way text gets in.
"""

from __future__ import annotations

import time
from html import escape
from typing import Any

from gm.ui.jobs import JobSummary
from gm.ui.model import JobView, NodeRow, Page
from gm.ui.svg import COLORS, chart
from gm.ui.warnings import WarningEntry

REFRESH_SECONDS = 10
MAX_NAME = 253  # a Kubernetes name's longest
MAX_SHORT = 64  # a phase, stage, reason, metric key or value
MAX_MESSAGE = 300

STYLE = """
body{font:13px/1.4 system-ui,sans-serif;margin:16px;color:#111;background:#fff}
h1{font-size:18px;margin:0 0 4px}h2{font-size:15px;margin:20px 0 6px}
p.note{color:#555;margin:2px 0 8px;max-width:110ch}
table{border-collapse:collapse;width:100%}
th,td{border-bottom:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}
th{background:#f3f4f6;font-weight:600}
td.num{text-align:right;font-variant-numeric:tabular-nums}
.up{color:#047857;font-weight:600}.down{color:#b91c1c;font-weight:600}
.failed,.Failed{color:#b91c1c}.Succeeded,.Running,.Completed{color:#047857}
code{font-size:12px;word-break:break-all}
ul.metrics{list-style:none;margin:0;padding:0}
svg.chart{display:block;background:#fafafa}svg.chart rect.frame{fill:none;stroke:#ddd}
svg.chart text.nodata{font-size:11px;fill:#888}
span.s0{color:#2563eb}span.s1{color:#dc2626}span.s2{color:#059669}
.legend span{margin-right:8px;font-size:12px}
"""


def render(page: Page) -> str:
    parts = [
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        f'<meta http-equiv="refresh" content="{REFRESH_SECONDS}">',
        "<title>Sedna GM status</title>", f"<style>{STYLE}</style></head><body>",
        "<h1>Sedna GlobalManager</h1>",
        f'<p class="note">As this GM held it at {_clock(page.now)}; the page reloads every '
        f"{REFRESH_SECONDS} s. Jobs: {page.jobs_total}"
        + "".join(f", {_text(kind, MAX_SHORT)} {n}" for kind, n in page.by_kind.items()) + ".</p>",
        _nodes(page.nodes, page.now), _jobs(page.jobs, page), _warnings(page.warnings, page.now),
        "</body></html>\n",
    ]
    return "".join(parts)


def _nodes(rows: list[NodeRow], now: float) -> str:
    note = ("<p class=\"note\">Edge nodes with an LC session on this GM, and the ones that left in the "
            "last minutes. An LC does not report its outbox depth to the GM (the LC's own /metrics has "
            "it, <code>sedna_lc_outbox_size</code>): what the GM knows is the object versions queued "
            "for the node and the highest report seq it acked to the node.</p>")
    head = _head("Node", "State", "Mode", "Connected since", "Last frame", "Queued to node", "Last acked report seq")
    body = "".join(_node(row, now) for row in rows) or _empty(7, "no LC has connected")
    return f'<h2 id="nodes">Edge nodes</h2>{note}<table class="nodes">{head}<tbody>{body}</tbody></table>'


def _node(row: NodeRow, now: float) -> str:
    if row.connected:
        state, since = '<span class="up">connected</span>', _ago(row.since, now)
        pending, acked = _opt(row.pending), _opt(row.acked_seq)
    else:  # what a session had is gone with it
        state, since, pending, acked = '<span class="down">disconnected</span>', "-", "-", "-"
    return (f'<tr class="node" data-node="{_text(row.node, MAX_NAME)}" data-state="{"up" if row.connected else "down"}">'
            f"<td>{_text(row.node, MAX_NAME)}</td><td>{state}</td><td>{_text(row.mode, MAX_SHORT) or '-'}</td>"
            f"<td>{since}</td><td>{_ago(row.last_frame, now)}</td>"
            f'<td class="num">{pending}</td><td class="num">{acked}</td></tr>')


def _jobs(views: list[JobView], page: Page) -> str:
    note = ("<p class=\"note\">Every job the GM reconciles, from its caches. The chart is the job's key "
            "series as the GM saw its status change (kept in memory, the last points of each job): "
            "JointInferenceService its inference and hard-example counts, FederatedLearningJob its round, "
            "the learning jobs their stage (Train 1, Eval 2, Deploy 3) and cycle, the other kinds their "
            "workers' counters, each on its own scale.</p>")
    head = _head("Kind", "Namespace/name", "Phase", "Stage / round", "Workers", "Latest metrics", "Chart")
    body = "".join(_job(view, page.now) for view in views) or _empty(7, "no job")
    more = (f'<p class="note">{page.jobs_total - len(views)} more jobs not listed.</p>'
            if page.jobs_total > len(views) else "")
    return f'<h2 id="jobs">Jobs</h2>{note}<table class="jobs">{head}<tbody>{body}</tbody></table>{more}'


def _job(view: JobView, now: float) -> str:
    s = view.summary
    name = f"{s.namespace}/{s.name}"
    title = f' title="{_text(s.reason + ": " + s.message, MAX_MESSAGE)}"' if s.reason or s.message else ""
    legend = "".join(f'<span class="s{i}">{_text(series.name, MAX_SHORT)} {_number(series.values[-1])}</span>'
                     for i, series in enumerate(view.series[:len(COLORS)]))
    drawn = chart(view.series, now=now, label=f"{s.kind} {name}")
    return (f'<tr class="job" data-kind="{_text(s.kind, MAX_SHORT)}" data-name="{_text(name, 2 * MAX_NAME)}">'
            f"<td>{_text(s.kind, MAX_SHORT)}</td><td>{_text(name, 2 * MAX_NAME)}</td>"
            f'<td class="{_text(s.phase, MAX_SHORT)}"{title}>{_text(s.phase, MAX_SHORT) or "-"}</td>'
            f"<td>{_progress(s)}</td><td>{_workers(s)}</td><td>{_metrics(s)}</td>"
            f'<td>{drawn}<div class="legend">{legend}</div></td></tr>')


def _progress(s: JobSummary) -> str:
    parts = []
    if s.stage:
        parts.append(f"stage {_text(s.stage, MAX_SHORT)}")
    if s.cycle is not None:
        parts.append(f"cycle {s.cycle}")
    if s.round is not None:
        parts.append(f"round {s.round}")
    return ", ".join(parts) or "-"


def _workers(s: JobSummary) -> str:
    return ", ".join(f"{field} {n}" for field, n in s.workers) or "-"


def _metrics(s: JobSummary) -> str:
    if not s.metrics:
        return "-"
    items = "".join(f"<li><code>{_text(k, MAX_SHORT)}</code> {_text(v, MAX_SHORT)}</li>" for k, v in s.metrics)
    return f'<ul class="metrics">{items}</ul>'


def _warnings(entries: list[WarningEntry], now: float) -> str:
    note = ('<p class="note">The last Warning events this GM emitted (newest first; another replica\'s '
            "are not here: <code>kubectl get events --field-selector type=Warning</code>).</p>")
    head = _head("When", "Object", "Reason", "Message")
    body = "".join(
        f'<tr class="warning"><td>{_ago(w.time, now)}</td>'
        f"<td>{_text(w.kind, MAX_SHORT)} {_text(f'{w.namespace}/{w.name}', 2 * MAX_NAME)}</td>"
        f"<td>{_text(w.reason, MAX_SHORT)}</td><td>{_text(w.message, MAX_MESSAGE)}</td></tr>"
        for w in entries) or _empty(4, "no Warning event since this GM started")
    return f'<h2 id="warnings">Recent warnings</h2>{note}<table class="warnings">{head}<tbody>{body}</tbody></table>'


def _head(*names: str) -> str:
    return "<thead><tr>" + "".join(f"<th>{name}</th>" for name in names) + "</tr></thead>"


def _empty(columns: int, what: str) -> str:
    return f'<tr class="empty"><td colspan="{columns}">{what}</td></tr>'


def _text(value: Any, limit: int) -> str:
    """Clipped to `limit` characters, then escaped for text and attribute values alike."""
    text = "" if value is None else str(value)
    if len(text) > limit:
        text = text[:limit - 1] + "\u2026"
    return escape(text, quote=True)


def _opt(value: int | None) -> str:
    return "not known" if value is None else str(value)


def _number(value: float) -> str:
    if value != value:  # NaN: no value yet
        return "-"
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else f"{value:.4g}"


def _clock(t: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def _ago(t: float | None, now: float) -> str:
    if t is None:
        return "not known"
    seconds = max(0.0, now - t)
    if seconds < 120:
        span = f"{seconds:.0f} s"
    elif seconds < 7200:
        span = f"{seconds / 60:.0f} min"
    else:
        span = f"{seconds / 3600:.1f} h"
    return f'<span title="{_clock(t)}">{span} ago</span>'

