"""Replaying stored runs: the same questions, engines and settings, against the knowledge base
and configuration as they are now, and what changed.

:func:`replay` takes stored runs (:class:`~ragloop.TraceRecord`), asks each question again with
the engine and settings its trace names (``meta``: ``engine``, ``model``, and the loop settings
``ragloop ask`` and the server record), and compares the two runs as their traces tell them
(:class:`RunOutcome`): the answer, the documents it cites, the stop reason, whether the run
stood by its answer, its chance of being right, iterations, searches, model calls and tokens.

Each question gets a :class:`Verdict`: ``worse`` when the run stood by its answer before and
does not now, or its chance of being right fell by :data:`WORSE_BY` or more, or it cites
nothing where it cited something; ``better`` for the reverse; ``changed`` when the answer or
its citations changed otherwise; ``same`` when neither did (timings never count); ``failed``
when the run raised. The :class:`ReplayReport` counts them and says whether the share that did
not get worse reaches a floor (``ragloop traces replay --fail-under``), so a change of
documents or settings can be gated in CI.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from html import escape
from typing import Any, Literal, get_args

from pydantic import BaseModel, Field

from ragloop.core.errors import ConfigError
from ragloop.core.records import StopReason
from ragloop.observability.events import EventKind
from ragloop.observability.staleness import REPLAY_OF
from ragloop.observability.traces import TraceRecord, TraceRecorder, TraceStorage

Verdict = Literal["same", "changed", "better", "worse", "failed", "new"]
WORSE_BY = 0.1  # a fall in the chance of being right that counts as worse
SETTINGS = ("max_iterations", "target_precision", "confidence_threshold", "top_k", "calibration")
CONFIDENT = {StopReason.CONVERGED.value, StopReason.ANSWERED.value}
_SOURCES_LINE = re.compile(r"\n*Sources:.*\Z", re.DOTALL)

EngineFactory = Callable[[str, str | None, dict[str, Any]], Any]


class RunOutcome(BaseModel):
    """What one run came to, as its trace tells it."""

    trace_id: str
    answer: str | None
    cited: list[str] = Field(description="The sources its answer cites, in citation order.")
    stop_reason: str | None
    confident: bool
    probability: float | None
    iterations: int
    searches: int
    llm_calls: int = 0
    tokens: int

    @classmethod
    def of(cls, record: TraceRecord) -> RunOutcome:
        finished = record.events[-1] if record.events else None
        attributes = finished.attributes if finished is not None else {}
        probability = attributes.get("probability")
        calls = attributes.get("llm_calls")
        confident = attributes.get("confident")  # older traces: a converged or answered stop
        spent = attributes.get("budget_used")
        tokens = spent.get("tokens", 0) if isinstance(spent, dict) else 0
        return cls(
            trace_id=record.id,
            answer=record.answer,
            cited=[c.source for c in record.cited] or _cited_sources(attributes.get("citations")),
            stop_reason=record.stop_reason,
            confident=confident if isinstance(confident, bool) else record.stop_reason in CONFIDENT,
            probability=float(probability) if isinstance(probability, int | float) else None,
            iterations=record.iterations,
            searches=sum(e.kind is EventKind.SEARCH for e in record.events),
            llm_calls=calls if isinstance(calls, int) else 0,
            tokens=int(tokens) if isinstance(tokens, int | float) else 0,
        )


class ReplayedQuestion(BaseModel):
    """One question asked again: the run before and the run now, and what changed."""

    question: str
    engine: str
    verdict: Verdict
    before: RunOutcome | None
    after: RunOutcome | None
    answer_changed: bool = False
    cited_gained: list[str] = Field(default_factory=list)
    cited_lost: list[str] = Field(default_factory=list)
    error: str | None = None


class ReplayReport(BaseModel):
    """Every question replayed, and how many came out each way."""

    questions: list[ReplayedQuestion]
    counts: dict[str, int]

    @property
    def not_worse(self) -> float:
        """The share of the replayed questions (those with a run before) that did not get
        worse (1.0 when there are none)."""
        compared = [q for q in self.questions if q.verdict != "new"]
        if not compared:
            return 1.0
        return sum(q.verdict not in ("worse", "failed") for q in compared) / len(compared)


def answer_text(answer: str | None) -> str:
    """An answer without its ``Sources:`` line, spaces collapsed: what is compared."""
    return " ".join(_SOURCES_LINE.sub("", answer or "").split())


def compare(
    question: str, engine: str, before: RunOutcome | None, after: RunOutcome
) -> ReplayedQuestion:
    """The verdict on ``after`` against ``before`` (``new`` without a run before)."""
    if before is None:
        return ReplayedQuestion(
            question=question, engine=engine, verdict="new", before=None, after=after
        )
    changed = answer_text(before.answer) != answer_text(after.answer)
    gained = [s for s in after.cited if s not in before.cited]
    lost = [s for s in before.cited if s not in after.cited]
    verdict: Verdict = "changed" if changed or gained or lost else "same"
    drop = (before.probability or 0.0) - (after.probability or 0.0)
    if (
        (before.confident and not after.confident)
        or drop >= WORSE_BY
        or (before.cited and not after.cited)
    ):
        verdict = "worse"
    elif (
        (after.confident and not before.confident)
        or -drop >= WORSE_BY
        or (after.cited and not before.cited)
    ):
        verdict = "better"
    return ReplayedQuestion(
        question=question,
        engine=engine,
        verdict=verdict,
        before=before,
        after=after,
        answer_changed=changed,
        cited_gained=gained,
        cited_lost=lost,
    )


def run_settings(record: TraceRecord) -> tuple[str, str | None, dict[str, Any]]:
    """The engine, model spec (None: offline) and loop settings a stored run was made with."""
    meta = record.meta
    engine = str(meta.get("engine") or record.engine)
    model = meta.get("model")
    spec = None if model in (None, "offline") else str(model)
    settings = {k: meta[k] for k in SETTINGS if meta.get(k) is not None}
    return engine, spec, settings


@dataclass(frozen=True)
class Keeping:
    """Where the replayed runs are stored, so each ``after.trace_id`` opens with ``ragloop
    traces show``: ``store`` (None: kept in memory only), ``meta`` stored with each (the
    knowledge base, the settings and model given instead of the recorded ones), ``content``
    as ``[traces] content``. Each stored replay names the run it replayed (``replay_of`` in its
    meta): that run is then answered, and no longer listed as stale."""

    store: TraceStorage | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    content: bool = True


def replay(
    records: Iterable[TraceRecord],
    make_engine: EngineFactory,
    *,
    on_question: Callable[[ReplayedQuestion], None] | None = None,
    keeping: Keeping | None = None,
) -> ReplayReport:
    """Ask each stored run's question again with an engine ``make_engine(engine, model,
    settings)`` builds (one per distinct engine and settings) and compare the runs; the new
    runs are stored as ``keeping`` says."""
    engines: dict[tuple[Any, ...], Any] = {}
    done = []
    for record in records:
        if not record.question:
            raise ConfigError(
                "replay", f"run {record.id[:12]} kept no question ([traces] content = false)"
            )
        name, spec, settings = run_settings(record)
        key = (name, spec, tuple(sorted(settings.items())))
        if key not in engines:
            engines[key] = make_engine(name, spec, dict(settings))
        meta = {"engine": name, "model": spec or "offline", **settings, REPLAY_OF: record.id}
        again = _again(engines[key], record.question, name, RunOutcome.of(record), keeping, meta)
        done.append(again)
        if on_question is not None:
            on_question(done[-1])
    return report_of(done)


def replay_questions(
    questions: Sequence[str],
    earlier: Sequence[TraceRecord],
    make_engine: EngineFactory,
    *,
    engine: str,
    on_question: Callable[[ReplayedQuestion], None] | None = None,
    keeping: Keeping | None = None,
) -> ReplayReport:
    """Ask an eval set's questions: each against the newest ``earlier`` run of the same
    question (of any engine: asked again with that run's engine and settings), or, for a
    question never asked, with ``engine`` and its defaults (a ``new`` question)."""
    newest: dict[str, TraceRecord] = {}
    for record in sorted(earlier, key=lambda r: r.started_at):
        if record.question:
            newest[record.question] = record
    stored = [newest[q] for q in questions if q in newest]
    report = replay(stored, make_engine, on_question=on_question, keeping=keeping)
    fresh_engine = None
    for question in (q for q in questions if q not in newest):
        fresh_engine = fresh_engine or make_engine(engine, None, {})
        meta = {"engine": engine, "model": "offline"}
        report.questions.append(_again(fresh_engine, question, engine, None, keeping, meta))
        if on_question is not None:
            on_question(report.questions[-1])
    return report_of(report.questions)


def report_of(questions: list[ReplayedQuestion]) -> ReplayReport:
    counts = dict.fromkeys(get_args(Verdict), 0)
    for q in questions:
        counts[q.verdict] += 1
    return ReplayReport(questions=questions, counts=counts)


def _again(
    engine: Any,
    question: str,
    name: str,
    before: RunOutcome | None,
    keeping: Keeping | None,
    meta: dict[str, Any],
) -> ReplayedQuestion:
    """Run ``question`` on ``engine`` with a recorder listening (storing the run as
    ``keeping`` says), and compare."""
    keeping = keeping or Keeping()
    recorder = TraceRecorder(
        keeping.store, meta={**meta, **keeping.meta}, content=keeping.content, keep=1
    )
    with recorder:
        try:
            engine.run(question)
        except Exception as error:  # one question that fails does not stop the replay
            return ReplayedQuestion(
                question=question, engine=name, verdict="failed", before=before, after=None,
                error=f"{type(error).__name__}: {error}",
            )  # fmt: skip
    (record,) = recorder.records.values()
    return compare(question, name, before, RunOutcome.of(record))


def _cited_sources(citations: object) -> list[str]:
    """The sources of a run's citations as its event lists them (traces before versions)."""
    found: list[str] = []
    for c in citations if isinstance(citations, list) else []:
        source = c.get("source") if isinstance(c, dict) else None
        if isinstance(source, str) and source not in found:
            found.append(source)
    return found


def answer_diff(before: str | None, after: str | None) -> tuple[str, str]:
    """The two answers as HTML, word by word: what the new one dropped in ``<del>`` in the
    first, what it added in ``<ins>`` in the second (the rest as it was)."""
    old, new = answer_text(before).split(), answer_text(after).split()
    left: list[str] = []
    right: list[str] = []
    for op, a, b, c, d in SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        was, now = escape(" ".join(old[a:b])), escape(" ".join(new[c:d]))
        if op == "equal":
            left.append(was)
            right.append(now)
            continue
        if was:
            left.append(f"<del>{was}</del>")
        if now:
            right.append(f"<ins>{now}</ins>")
    return " ".join(left), " ".join(right)


def render_html(report: ReplayReport) -> str:
    """The report as a self-contained HTML page (no scripts, nothing loaded); in a question
    whose answer changed, the words the new answer dropped and added are marked, and so is
    each figure of the run (stop reason, chance, iterations, ...) that moved."""
    rows = []
    for q in report.questions:
        before, after = q.before, q.after
        cited = "".join(
            [f"<div class='gained'>+ {escape(s)}</div>" for s in q.cited_gained]
            + [f"<div class='lost'>- {escape(s)}</div>" for s in q.cited_lost]
        )
        was, now = answer_diff(before.answer if before else None, after.answer if after else None)
        rows.append(
            f"<tr class='{q.verdict}'><td><span class='badge {q.verdict}'>{q.verdict}</span></td>"
            f"<td>{escape(q.question)}<br><small>{escape(q.engine)}</small></td>"
            f"<td>{_run_cell(before, was, after)}</td><td>{_run_cell(after, now, before)}"
            + (f"<div class='lost'>{escape(q.error)}</div>" if q.error else "")
            + f"</td><td>{cited}</td></tr>"
        )
    counts = ", ".join(f"{n} {verdict}" for verdict, n in report.counts.items() if n)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>ragloop replay</title>
<style>
body {{ font: 15px/1.45 system-ui, sans-serif; margin: 2rem; color: #1d2330; }}
table {{ border-collapse: collapse; width: 100%; }}
td, th {{ border-top: 1px solid #e5e7eb; padding: .4rem; vertical-align: top; text-align: left; }}
.badge {{ border-radius: .3rem; padding: 0 .35rem; font-size: .8rem; }}
.badge.worse, .badge.failed {{ background: #fee2e2; }} .badge.better {{ background: #dcfce7; }}
.badge.changed {{ background: #fef3c7; }} .badge.same, .badge.new {{ background: #e5e7eb; }}
.gained {{ color: #15803d; }} .lost {{ color: #b91c1c; }} small {{ color: #6b7280; }}
del {{ background: #fee2e2; color: #991b1b; }} ins {{ background: #dcfce7; color: #166534;
  text-decoration: none; }} .moved {{ background: #fef3c7; color: #1d2330; border-radius: .2rem; }}
</style></head><body>
<h1>Replay of {len(report.questions)} question(s)</h1>
<p>{escape(counts)}; did not get worse: {report.not_worse:.0%}</p>
<table><tr><th></th><th>question</th><th>before</th><th>now</th><th>citations</th></tr>
{"".join(rows)}</table></body></html>
"""


def _run_cell(run: RunOutcome | None, answer: str, other: RunOutcome | None) -> str:
    """A run's answer (marked words) and its figures, each that differs from ``other``'s
    marked as moved."""
    if run is None:
        return "-"
    figures = _figures(run)
    theirs = _figures(other) if other is not None else figures
    shown = ", ".join(
        f"<span class='moved'>{escape(text)}</span>" if text != theirs[n] else escape(text)
        for n, text in enumerate(figures)
    )
    return f"<div class='answer'>{answer}</div><small>{shown}</small>"


def _figures(run: RunOutcome) -> list[str]:
    chance = "-" if run.probability is None else f"{run.probability:.2f}"
    return [
        run.stop_reason or "-",
        f"chance {chance}",
        f"{run.iterations} iteration(s)",
        f"{run.searches} search(es)",
        f"{run.llm_calls} model call(s)",
        f"{run.tokens} token(s)",
    ]
