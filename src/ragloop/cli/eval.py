"""ragloop eval DATASET: one-shot retrieval and the loops over a dataset, compared at equal k."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import click
import platformdirs
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from ragloop.cli.common import (
    EMBEDDER_HELP,
    InputError,
    check_embedder,
    console,
    errors,
    output_option,
    parse_settings,
)
from ragloop.cli.tables import Column, cell, print_table
from ragloop.core.errors import RagloopError
from ragloop.engines.options import AgentLoopOptions, RAGLoopOptions
from ragloop.evaluation.configurations import (
    ENGINES,
    build_knowledge_base,
    evaluator_name,
    make_configuration,
)
from ragloop.evaluation.datasets import EvalDataset, load_dataset
from ragloop.evaluation.harness import Configuration, EvalReport, evaluate
from ragloop.evaluation.report import recall_chart
from ragloop.evaluation.selective import (
    CHECK_TARGETS,
    DEFAULT_TARGET,
    CalibrationCheck,
    calibration_check,
)

ANSWERING = ("rag", "agent")  # the configurations that score their answers


def _cache_path(dataset: EvalDataset, embedder: str, titles: bool) -> Path:
    digest = hashlib.sha256()
    for passage in dataset.passages:
        digest.update(f"{passage.id}\0{passage.title}\0{passage.text}\0".encode())
    name = f"{dataset.name}-{digest.hexdigest()[:12]}-{embedder}{'' if titles else '-notitles'}"
    return Path(platformdirs.user_cache_dir("ragloop")) / "eval" / f"{name}.sqlite"


def _accepts_target(engine: str) -> bool:
    """Whether the engine's offline constructor takes ``target_precision``."""
    options = {"rag": RAGLoopOptions, "agent": AgentLoopOptions}.get(engine)
    return options is not None and "target_precision" in options.__annotations__


def _options_for(
    engine: str, options: dict[str, object], target: float | None
) -> dict[str, object]:
    """The loop settings of one engine: ``--target-precision``, when given, goes to the loops
    that answer against a target (unless ``--set target_precision=`` says otherwise)."""
    if target is None or "target_precision" in options or not _accepts_target(engine):
        return options
    return {**options, "target_precision": target}


@click.command(name="eval")
@click.argument("dataset", type=click.Path(exists=True, path_type=Path))
@click.option(
    "--corpus",
    type=click.Path(exists=True, path_type=Path),
    default=None,
    help="Companion file: a MuSiQue corpus, BEIR qrels, or a simple dataset's corpus.",
)
@click.option(
    "--kb",
    "kb_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help="Knowledge base to build the pool into (default: a cached file per dataset).",
)
@click.option(
    "--embedder", default="default", show_default=True, callback=check_embedder, help=EMBEDDER_HELP
)
@click.option(
    "--engine",
    "engines",
    multiple=True,
    type=click.Choice(sorted(ENGINES)),
    help="Configurations to run (repeatable; default: every one-shot mode and loop).",
)
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="A loop setting, e.g. --set max_iterations=2 (repeatable).",
)
@click.option("--limit", type=click.IntRange(1), default=None, help="Only the first N questions.")
@click.option("--no-titles", is_flag=True, help="Leave passage titles out of the index.")
@output_option("--json", "json_out", help="Write the full report (per question too) as JSON.")
@output_option(
    "--chart",
    help="Write a PNG chart of recall against k, and of the risk-coverage curves when "
    "configurations score their answers (needs the eval extra: matplotlib).",
)
@click.option(
    "--target-precision",
    type=click.FloatRange(0.0, 1.0),
    default=None,
    help="The target precision the answer figures are read at (default 0.5); also given to "
    "the answering loops (rag, agent).",
)
@output_option(
    "--calibrate",
    "calibrate_out",
    help="Fit a calibration of the evaluator's score on the answers of the first answering "
    "configuration (rag, agent) and write it to this JSON file.",
)
@click.option(
    "--calibration-method",
    type=click.Choice(["selective", "platt", "isotonic"]),
    default="selective",
    show_default=True,
    help="selective: a score reads as the precision of the answers at least as sure, so a "
    "target precision is the precision of the answers given; platt: the chance of each "
    "answer, a logistic curve (two numbers); isotonic: the chance of each answer, a monotone "
    "step function (needs more questions).",
)
def eval_command(
    dataset: Path,
    corpus: Path | None,
    kb_path: Path | None,
    embedder: str,
    engines: tuple[str, ...],
    settings: tuple[str, ...],
    limit: int | None,
    no_titles: bool,
    json_out: Path | None,
    chart: Path | None,
    target_precision: float | None,
    calibrate_out: Path | None,
    calibration_method: str,
) -> None:
    """Compare one-shot retrieval with the loops on DATASET (HotpotQA, IRCoT, MuSiQue, BEIR or
    simple JSONL), at equal k, with paired significance tests.

    The answering loops are also scored as selective answerers: risk-coverage, AURC, precision
    at the target precision, refusals."""
    if chart is not None and importlib.util.find_spec("matplotlib") is None:
        raise InputError(
            "--chart needs matplotlib: pip install 'ragloop[eval]' (or leave --chart out)"
        )
    if calibrate_out is not None and engines and not set(engines) & set(ANSWERING):
        raise InputError("--calibrate needs an answering configuration: --engine rag or agent")
    options = parse_settings(settings)  # a malformed --set fails before any indexing
    target = DEFAULT_TARGET if target_precision is None else target_precision
    try:
        data = load_dataset(dataset, corpus).sample(limit)
        if calibrate_out is not None and not any(
            q.answers or not q.answerable for q in data.questions
        ):
            raise InputError(
                f"--calibrate needs gold answers, and {dataset} has none: nothing tells a "
                "right answer from a wrong one"
            )
        path = kb_path or _cache_path(data, embedder, not no_titles)
        with console.status(f"indexing {len(data.passages):,} passages into {path} ..."):
            kb = build_knowledge_base(
                data,
                path,
                embedder=None if embedder == "none" else embedder,
                titles=not no_titles,
            )
        chosen = engines or tuple(
            e for e in ENGINES if kb.embedder is not None or e not in ("dense", "hybrid")
        )
        configurations = [
            make_configuration(engine, kb, **_options_for(engine, options, target_precision))
            for engine in chosen
        ]
        with Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            console=errors,
            transient=True,
        ) as progress:
            tasks: dict[str, TaskID] = {}

            def on_progress(name: str, done: int, total: int) -> None:
                if name not in tasks:
                    tasks[name] = progress.add_task(name, total=total)
                progress.update(tasks[name], completed=done)

            report = evaluate(
                data, configurations, on_progress=on_progress, target_precision=target
            )
        kb.close()
    except RagloopError as error:
        raise click.ClickException(str(error)) from None
    show(report, len(data.passages))
    if json_out:
        json_out.write_text(report.model_dump_json(indent=2), encoding="utf-8")
        console.print(f"report written to {json_out}")
    if chart:
        console.print(f"chart written to {recall_chart(report, chart)}")
    if calibrate_out is not None:
        calibrate(report, configurations, calibrate_out, calibration_method)


def calibrate(
    report: EvalReport,
    configurations: list[Configuration],
    path: Path,
    method: str,
) -> CalibrationCheck:
    """Fit a calibration on the evaluator scores of the first configuration (in the order
    run) whose answers are scored, against whether each answer was right; write it to
    ``path`` and show it in-sample and cross-validated beside the score as it comes."""
    for configuration in configurations:
        rows = [
            r
            for r in report.results[configuration.name]
            if r.right is not None and (r.score is not None or r.probability is not None)
        ]
        if rows:
            break
    else:
        raise click.ClickException(
            "--calibrate: no configuration scored its answers on questions with gold answers "
            "(run --engine rag or agent on a dataset with answers)"
        )
    if len(rows) < 2:
        raise click.ClickException("--calibrate needs at least two scored answers")
    scores = [r.score if r.score is not None else r.probability for r in rows]
    check = calibration_check(
        scores,  # type: ignore[arg-type]
        [bool(r.right) for r in rows],
        method=method,  # type: ignore[arg-type]
        evaluator=evaluator_name(configuration),
        fitted_on=f"{report.dataset}: {configuration.name}'s answers",
    )
    check.calibration.save(path)
    others = [
        c.name
        for c in configurations
        if c is not configuration and report.summary(c.name).selective is not None
    ]
    show_calibration(check, configuration.name)
    console.print(
        f"calibration ({check.calibration.method}, evaluator "
        f"{check.calibration.evaluator}) written to {path}: fitted on the {len(rows)} answers "
        f"of {cell(configuration.name)}"
        + (f" (not of {', '.join(others)}: choose with --engine)" if others else "")
    )
    return check


def show_calibration(check: CalibrationCheck, name: str) -> None:
    """The score as it comes, the fit in-sample and the fit cross-validated: at each target,
    the precision of the answers whose chance reaches it (and the share answered), and the
    expected calibration error."""
    readings = [check.raw, check.in_sample]
    if check.cross_validated is not None:
        readings.append(check.cross_validated)
    rows = []
    for reading in readings:
        cells = [cell(reading.label)]
        for point in reading.targets:
            precision = "-" if point.precision is None else f"{point.precision:.3f}"
            cells.append(f"{precision} ({point.coverage:.0%})")
        cells.append(f"{reading.ece:.3f}")
        rows.append(cells)
    targets = [Column(f"precision @ {t:g}", numeric=True) for t in CHECK_TARGETS]
    print_table(
        console,
        ["chance of being right", *targets, Column("ECE", numeric=True)],
        rows,
        title=f"calibration on {check.questions} answers of {name}",
    )
    console.print(
        "precision @ t: how often the answers whose chance is at least t were right (the share "
        "of questions they are, in brackets); ECE: the mean gap between chance and how often "
        "right. In-sample figures come from the answers the fit was made on and flatter it; "
        f"the cross-validated ones ({check.folds} folds) from answers each fit never saw."
        if check.cross_validated is not None
        else "Too few answers to cross-validate: the in-sample figures flatter the fit."
    )


def _value(metrics: dict[str, float], key: str) -> str:
    """A mean metric, or "-" when no question had it (no answer, no gold passage)."""
    return f"{metrics[key]:.3f}" if key in metrics else "-"


def show(report: EvalReport, passages: int) -> None:
    first = report.summaries[0] if report.summaries else None
    questions = first.questions if first else 0
    headers = [*(f"R@{k}" for k in report.ks), "MRR", "nDCG@10", "F1"]
    headers += ["retrievals", "p50 ms", "p95 ms"]
    rows = []
    for s in report.summaries:
        m = s.metrics
        f1 = _value(m, "f1")
        rows.append(
            [
                cell(s.name) + (" *" if s.baseline else ""),
                *(_value(m, f"recall_all@{k}") for k in report.ks),
                _value(m, "mrr_first"),
                _value(m, "ndcg@10"),
                f1,
                f"{s.retrieval_calls:.1f}",
                f"{s.latency_p50_ms:.0f}",
                f"{s.latency_p95_ms:.0f}",
            ]
        )
    print_table(
        console,
        ["configuration", *(Column(h, numeric=True) for h in headers)],
        rows,
        title=f"{report.dataset}: {questions} questions, {passages:,} passages",
    )
    console.print("R@k: recall of all gold passages in the top k; * one-shot baselines.")
    significant = [c for c in report.comparisons if c.metric == "recall_all@5"]
    if significant:
        rows = [
            [
                cell(c.candidate),
                f"{c.difference * 100:+.1f} points" + (" (significant)" if c.significant else ""),
                f"{c.p_value:.3g}",
                cell(f"{c.test} vs {c.baseline}"),
            ]
            for c in significant
        ]
        print_table(
            console,
            ["configuration", "difference", Column("p-value", numeric=True), "test"],
            rows,
            title="recall@5 against the best one-shot baseline",
        )
    show_selective(report)


def show_selective(report: EvalReport) -> None:
    """The configurations that score their answers, as selective answerers."""
    scored = [s for s in report.summaries if s.selective is not None]
    if not scored:
        return
    target = report.target_precision

    def fraction(value: float | None) -> str:
        return "-" if value is None else f"{value:.3f}"

    rows = []
    for s in scored:
        m = s.selective
        assert m is not None
        rows.append(
            [
                cell(s.name),
                f"{m.questions}" + (f" ({m.unanswerable} unanswerable)" if m.unanswerable else ""),
                f"{m.accuracy:.3f}",
                f"{m.aurc:.3f}",
                fraction(m.precision_at_target),
                f"{m.coverage_at_target:.3f}",
                f"{m.confident_but_wrong:.3f}",
                fraction(m.refusal_precision),
                fraction(m.refusal_recall),
            ]
        )
    headers = ["questions", "accuracy", "AURC", f"precision @ {target:g}", f"coverage @ {target:g}"]
    headers += ["confident but wrong", "refusal precision", "refusal recall"]
    print_table(
        console,
        ["configuration", *(Column(h, numeric=True) for h in headers)],
        rows,
        title="answers: how right when answering, against how often",
    )
    console.print(
        "Over the questions with gold answers (an answer is right when it contains one; any "
        "answer to an unanswerable question is wrong). AURC: area under the risk-coverage "
        f"curve, 0 best; precision/coverage @ {target:g}: the answers whose probability "
        "reaches it; confident: a converged or answered run; a refusal (not confident) is "
        "warranted when the answer was not right: refusal precision = warranted / refusals, "
        "refusal recall = refused / answers not right."
    )
