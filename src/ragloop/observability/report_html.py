"""A stored trace as one self-contained HTML page: no scripts, no external styles or fonts.

The page shows the question, the answer and why the run stopped; a small SVG chart of the
evaluation score per iteration (for an AgentLoop run, the best chunk score per turn); and the
run as a timeline: each iteration's queries and strategy, its score and the evaluator's reason,
and the chunks it retrieved with their sources and scores (their text folded away, when the
trace recorded it). Every piece of recorded text is escaped.
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Sequence
from datetime import UTC, datetime
from html import escape

from ragloop.core.records import StopReason
from ragloop.observability.events import EventKind
from ragloop.observability.staleness import StaleSource
from ragloop.observability.trace_reading import TraceStep, summarize, trace_steps
from ragloop.observability.traces import TraceRecord

_CSS = """
:root { --ink:#1d2433; --muted:#5b6475; --line:#e3e6ec; --bg:#fafbfc; --card:#fff;
  --accent:#2f6f4f; --accent-soft:#e6f2eb; --warn:#9a5b13; --warn-soft:#fbf0e1; }
* { box-sizing: border-box; }
body { margin:0; font:15px/1.5 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
  color:var(--ink); background:var(--bg); }
main { max-width:920px; margin:0 auto; padding:32px 20px 48px; }
h1 { font-size:1.5rem; margin:.2rem 0 1rem; }
h2 { font-size:1.05rem; margin:0 0 .75rem; color:var(--muted); text-transform:uppercase;
  letter-spacing:.04em; }
.eyebrow { color:var(--muted); margin:0; font-size:.85rem; }
section { background:var(--card); border:1px solid var(--line); border-radius:10px;
  padding:18px 20px; margin:16px 0; }
dl.summary { display:grid; grid-template-columns:repeat(auto-fit,minmax(150px,1fr)); gap:8px 16px;
  margin:0; }
dl.summary dt { color:var(--muted); font-size:.8rem; }
dl.summary dd { margin:0; font-weight:600; }
.answer-text { white-space:pre-wrap; margin:0; }
.badge { display:inline-block; padding:1px 8px; border-radius:999px; font-size:.8rem;
  background:var(--accent-soft); color:var(--accent); font-weight:600; }
.badge.stop { background:var(--warn-soft); color:var(--warn); }
.badge.success { background:#e6f2eb; color:#2f6f4f; }
.badge.settled { background:#e3f1f4; color:#1f6474; }
.badge.limit { background:#e7edf8; color:#2c4f8a; }
.badge.budget { background:#fbf0e1; color:#9a5b13; }
.badge.caller { background:#f2e9f7; color:#6d3b8c; }
.badge.gave_up { background:#eef0f3; color:#4a5263; }
.badge.error { background:#fbe7e6; color:#a3261d; }
ol.hops { list-style:none; margin:6px 0 10px; padding:0 0 0 10px; border-left:3px solid
  var(--line); font-size:.9rem; }
ol.hops li { margin:2px 0; }
ol.steps { list-style:none; margin:0; padding:0; position:relative; }
ol.steps::before { content:""; position:absolute; left:15px; top:4px; bottom:4px; width:2px;
  background:var(--line); }
li.step { position:relative; padding:0 0 22px 46px; }
li.step .marker { position:absolute; left:0; top:0; width:32px; height:32px; border-radius:50%;
  background:var(--accent); color:#fff; font-weight:700; display:flex; align-items:center;
  justify-content:center; }
.meta { margin:4px 0 8px; display:flex; gap:10px; align-items:center; flex-wrap:wrap; }
.score { font-variant-numeric:tabular-nums; font-weight:700; }
ul.queries { margin:0 0 8px; padding:0; list-style:none; }
ul.queries li { margin:2px 0; }
code { background:#f1f3f6; padding:1px 6px; border-radius:4px; font-size:.9em; }
.reason, .note { margin:4px 0 8px; color:var(--muted); }
table.chunks { width:100%; border-collapse:collapse; font-size:.9rem; }
table.chunks th { text-align:left; color:var(--muted); font-weight:500; border-bottom:1px solid
  var(--line); padding:4px 6px; }
table.chunks td { padding:4px 6px; border-bottom:1px solid var(--line); vertical-align:top; }
td.num { text-align:right; font-variant-numeric:tabular-nums; width:1%; white-space:nowrap; }
.bar { display:inline-block; height:6px; background:var(--accent); border-radius:3px;
  vertical-align:middle; margin-left:6px; }
details { margin:4px 0; }
details p { white-space:pre-wrap; margin:6px 0 0; }
small { color:var(--muted); }
svg text { font:12px system-ui,sans-serif; fill:var(--muted); }
footer { color:var(--muted); font-size:.8rem; text-align:center; }
"""


NOT_RECORDED = "(question not recorded: the trace keeps no content, [traces] content = false)"


def _e(text: object) -> str:
    return escape(str(text), quote=True)


def _when(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _threshold(record: TraceRecord) -> float | None:
    for event in record.events:
        if event.kind is EventKind.RUN_STARTED:
            value = event.attributes.get("confidence_threshold")
            return float(value) if isinstance(value, int | float) else None
    return None


def score_chart(
    values: list[tuple[int, float | None]], *, threshold: float | None, label: str
) -> str:
    """An inline SVG line chart of scores in [0, 1], one point per step."""
    width, height, left, right, top, bottom = 560, 190, 40, 16, 14, 34
    plot_w, plot_h = width - left - right, height - top - bottom
    n = len(values)

    def x(i: int) -> float:
        return left + (plot_w / 2 if n == 1 else plot_w * i / (n - 1))

    def y(v: float) -> float:
        return top + plot_h * (1.0 - max(0.0, min(1.0, v)))

    parts = [
        f'<svg role="img" aria-label="{_e(label)}" viewBox="0 0 {width} {height}" '
        f'width="100%" height="{height}">',
        f"<title>{_e(label)}</title>",
    ]
    for tick in (0.0, 0.5, 1.0):
        parts.append(
            f'<line x1="{left}" x2="{width - right}" y1="{y(tick):.1f}" y2="{y(tick):.1f}" '
            'stroke="#e3e6ec"/>'
            f'<text x="{left - 8}" y="{y(tick) + 4:.1f}" text-anchor="end">{tick:.1f}</text>'
        )
    if threshold is not None:
        parts.append(
            f'<line class="threshold" x1="{left}" x2="{width - right}" y1="{y(threshold):.1f}" '
            f'y2="{y(threshold):.1f}" stroke="#9a5b13" stroke-dasharray="5 4"/>'
            f'<text x="{width - right}" y="{y(threshold) - 5:.1f}" text-anchor="end">'
            f"threshold {threshold:.2f}</text>"
        )
    points = [(i, v) for i, (_, v) in enumerate(values) if v is not None]
    if len(points) > 1:
        path = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in points)
        parts.append(f'<polyline points="{path}" fill="none" stroke="#2f6f4f" stroke-width="2"/>')
    for i, (number, v) in enumerate(values):
        parts.append(f'<text x="{x(i):.1f}" y="{height - 12}" text-anchor="middle">{number}</text>')
        if v is not None:
            parts.append(
                f'<circle class="point" cx="{x(i):.1f}" cy="{y(v):.1f}" r="5" fill="#2f6f4f">'
                f"<title>{number}: {v:.2f}</title></circle>"
            )
    parts.append("</svg>")
    return "".join(parts)


def _chunks_table(step: TraceStep) -> str:
    if not step.chunks:
        return "<p class='note'>No chunks.</p>"
    rows = []
    for rank, chunk in enumerate(step.chunks, 1):
        title = f"<br><small>{_e(chunk.title)}</small>" if chunk.title else ""
        bar = f'<span class="bar" style="width:{max(2, round(chunk.score * 60))}px"></span>'
        rows.append(
            f"<tr class='chunk'><td class='num'>{rank}</td>"
            f"<td>{_e(chunk.source)}{title}</td>"
            f"<td class='num'>{chunk.score:.3f}{bar}</td></tr>"
        )
        if chunk.text:
            rows.append(
                f"<tr><td></td><td colspan='2'><details><summary>text</summary>"
                f"<p>{_e(chunk.text)}</p></details></td></tr>"
            )
    return (
        "<table class='chunks'><thead><tr><th>#</th><th>source</th><th>score</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>"
    )


def _outcome(stop_reason: str) -> str:
    """The CSS class of a stop reason: its kind of outcome, so each kind has its colour."""
    try:
        return StopReason(stop_reason).outcome
    except ValueError:  # a trace written by another version
        return ""


def _hops(step: TraceStep) -> str:
    """The hops of the RetrievalLoop runs that served a step: query, new chunks, best score."""
    if not step.hops:
        return ""
    items = []
    for hop in step.hops:
        best = hop.best_chunk_score
        found = f"{hop.chunk_count} chunk(s)" + (f", best {best:.3f}" if best is not None else "")
        queries = " | ".join(hop.queries) or "(query not recorded)"
        items.append(f"<li class='hop'>hop {hop.number}: <code>{_e(queries)}</code> {found}</li>")
    stops = " ".join(
        f"<span class='badge {_outcome(s)}'>{_e(s)}</span>" for s in dict.fromkeys(step.hop_stops)
    )
    head = f"<p class='note'>Retrieval hops (stopped: {stops})</p>" if stops else ""
    return f"{head}<ol class='hops'>{''.join(items)}</ol>"


def _step(step: TraceStep, engine: str) -> str:
    if not step.finished:  # hops whose step never finished: the run stopped first
        return f"<li class='partial'><div class='body'>{_hops(step)}</div></li>"
    what = "turn" if engine == "agent" else "iteration"
    badges = []
    if step.strategy:
        badges.append(f"<span class='badge'>{_e(step.strategy)}</span>")
    elif step.number == 1 and engine != "agent":
        badges.append("<span class='badge'>original question</span>")
    badges += [f"<span class='badge'>{_e(t)}</span>" for t in dict.fromkeys(step.tools)]
    if step.score is not None:
        badges.append(f"<span class='score'>score {step.score:.2f}</span>")
    queries = "".join(f"<li><code>{_e(q)}</code></li>" for q in step.queries)
    body = [
        _hops(step),
        f"<p class='meta'><strong>{what.title()} {step.number}</strong> {' '.join(badges)}</p>",
        f"<ul class='queries'>{queries}</ul>" if queries else "",
        f"<p class='note'>{_e(step.note)}</p>" if step.note else "",
        f"<p class='reasoning'><small>{_e(step.reasoning)}</small></p>" if step.reasoning else "",
        f"<p class='reason'>{_e(step.reason)}</p>" if step.reason else "",
        _chunks_table(step),
        f"<details><summary>answer</summary><p>{_e(step.answer)}</p></details>"
        if step.answer
        else "",
    ]
    return (
        f"<li class='step' id='step-{step.number}'><div class='marker'>{step.number}</div>"
        f"<div class='body'>{''.join(body)}</div></li>"
    )


def _stale(stale: Sequence[StaleSource]) -> str:
    """The mark of a run whose cited documents changed since it ran."""
    if not stale:
        return ""
    changed = "".join(
        f"<li><span class='badge error'>{_e(s.change)}</span> {_e(s.source)} "
        f"<small>({_e(s.collection)})</small></li>"
        for s in stale
    )
    return (
        "<section class='stale'><h2>Stale</h2><p class='note'>The documents this answer cites "
        f"have changed since it ran; ask again for an answer from them as they are.</p>"
        f"<ul class='queries'>{changed}</ul></section>"
    )


def _gaps(record: TraceRecord) -> str:
    """What a run that was not confident found and did not find (its evidence gaps)."""
    gaps = record.gaps
    if gaps is None:
        return ""
    chance = ""
    if gaps.probability is not None:
        target = "" if gaps.target is None else f" (target {gaps.target:.2f})"
        chance = (
            f"<p class='note'>Chance that the answer is right: {gaps.probability:.2f}{target}</p>"
        )
    parts = "".join(
        f"<li><span class='badge success'>found</span> {_e(p.part)} <small>in {_e(p.source)}"
        f"</small></li>"
        if p.found
        else f"<li><span class='badge error'>not found</span> {_e(p.part)}</li>"
        for p in gaps.parts
    )
    missing = (
        f"<p class='note'>No chunk mentions: {_e(', '.join(gaps.missing_terms))}</p>"
        if gaps.missing_terms
        else ""
    )
    nearest = "".join(
        f"<tr><td class='num'>{n.score:.2f}</td><td>{_e(n.source)}</td><td>{_e(n.text)}</td></tr>"
        for n in gaps.nearest
    )
    searches = "".join(f"<li><code>{_e(q)}</code></li>" for q in gaps.searches)
    return (
        "<h2>What was found and what was not</h2>"
        f"{chance}<ul class='queries'>{parts}</ul>{missing}"
        + (
            "<table class='chunks'><tr><th>score</th><th>closest</th><th>text</th></tr>"
            f"{nearest}</table>"
            if nearest
            else ""
        )
        + (f"<p class='note'>Searched, in order:</p><ol>{searches}</ol>" if searches else "")
    )


def render_html(record: TraceRecord, stale: Sequence[StaleSource] = ()) -> str:
    """The trace as a self-contained HTML page (see the module docstring); ``stale``: the
    documents the answer cites that have changed since the run (marked above the answer)."""
    steps = trace_steps(record)
    ran = summarize(record, steps)
    agent = record.engine == "agent"
    finished = [s for s in steps if s.finished]
    if agent:
        values = [(s.number, s.best_chunk_score) for s in finished]
        label = "Best chunk score per turn"
    else:
        values = [(s.number, s.score) for s in finished]
        label = "Evaluation score per iteration"
    question = record.question or NOT_RECORDED
    answer = record.answer or ("(not recorded)" if not record.content else "(no answer)")
    duration = f"{record.duration_ms:.0f} ms" if record.duration_ms is not None else "-"
    try:
        version = importlib.metadata.version("ragloop")
    except importlib.metadata.PackageNotFoundError:  # a source tree never installed
        version = "unknown"
    summary = [
        (
            "stop reason",
            f"<span class='badge stop {_outcome(ran.stop_reason)}'>"
            f"{_e(ran.stop_reason)}</span><br><small>{_e(ran.detail)}</small>",
        ),
        ("iterations" if not agent else "turns", _e(record.iterations)),
        ("duration", _e(duration)),
        ("engine", _e(ran.engine)),
        ("trace id", f"<code>{_e(record.id[:12])}</code>"),
        ("content", "recorded" if record.content else "left out"),
    ]
    cells = "".join(f"<div><dt>{k}</dt><dd>{v}</dd></div>" for k, v in summary)
    chart = (
        score_chart(values, threshold=None if agent else _threshold(record), label=label)
        if finished
        else "<p class='note'>No iterations were recorded.</p>"
    )
    timeline = "".join(_step(s, record.engine) for s in steps)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>ragloop trace: {_e(question[:80])}</title>
<style>{_CSS}</style>
</head>
<body>
<main>
<header>
<p class="eyebrow">ragloop trace &middot; {_e(_when(record.started_at))}</p>
<h1>{_e(question)}</h1>
<dl class="summary">{cells}</dl>
</header>
{_stale(stale)}<section class="answer"><h2>Answer</h2><p class="answer-text">{_e(answer)}</p>
{_gaps(record)}</section>
<section class="chart"><h2>{_e(label)}</h2>{chart}</section>
<section class="timeline"><h2>Timeline</h2><ol class="steps">{timeline}</ol></section>
<footer>Written by ragloop {_e(version)}. This page is self-contained: no scripts, nothing
loaded from the network.</footer>
</main>
</body>
</html>
"""
