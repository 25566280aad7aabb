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
    output_file,
)
from ragloop.cli.tables import Column, cell, print_table
from ragloop.core.errors import RagloopError
from ragloop.evaluation.configurations import ENGINES, build_knowledge_base, make_configuration
from ragloop.evaluation.datasets import EvalDataset, load_dataset
from ragloop.evaluation.harness import EvalReport, evaluate
from ragloop.evaluation.report import recall_chart


def _cache_path(dataset: EvalDataset, embedder: str, titles: bool) -> Path:
    digest = hashlib.sha256()
    for passage in dataset.passages:
        digest.update(f"{passage.id}\0{passage.title}\0{passage.text}\0".encode())
    name = f"{dataset.name}-{digest.hexdigest()[:12]}-{embedder}{'' if titles else '-notitles'}"
    return Path(platformdirs.user_cache_dir("ragloop")) / "eval" / f"{name}.sqlite"


def _parse_settings(settings: tuple[str, ...]) -> dict[str, object]:
    parsed: dict[str, object] = {}
    for item in settings:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--set")
        value: object = raw
        for cast in (int, float):
            try:
                value = cast(raw)
                break
            except ValueError:
                continue
        if raw.lower() in ("true", "false"):
            value = raw.lower() == "true"
        parsed[key.strip()] = value
    return parsed


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
@click.option(
    "--json",
    "json_out",
    type=click.Path(path_type=Path),
    default=None,
    callback=output_file,
    help="Write the full report (per question too) as JSON.",
)
@click.option(
    "--chart",
    type=click.Path(path_type=Path),
    default=None,
    callback=output_file,
    help="Write a PNG chart of recall against k (needs the eval extra: matplotlib).",
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
) -> None:
    """Compare one-shot retrieval with the loops on DATASET (HotpotQA, IRCoT, MuSiQue, BEIR or
    simple JSONL), at equal k, with paired significance tests."""
    if chart is not None and importlib.util.find_spec("matplotlib") is None:
        raise InputError(
            "--chart needs matplotlib: pip install 'ragloop[eval]' (or leave --chart out)"
        )
    options = _parse_settings(settings)  # a malformed --set fails before any indexing
    try:
        data = load_dataset(dataset, corpus).sample(limit)
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
        configurations = [make_configuration(engine, kb, **options) for engine in chosen]
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

            report = evaluate(data, configurations, on_progress=on_progress)
        kb.close()
    except RagloopError as error:
        raise click.ClickException(str(error)) from None
    show(report, len(data.passages))
    if json_out:
        json_out.write_text(report.model_dump_json(indent=2), encoding="utf-8")
        console.print(f"report written to {json_out}")
    if chart:
        console.print(f"chart written to {recall_chart(report, chart)}")


def show(report: EvalReport, passages: int) -> None:
    first = report.summaries[0] if report.summaries else None
    questions = first.questions if first else 0
    headers = [*(f"R@{k}" for k in report.ks), "MRR", "nDCG@10", "F1"]
    headers += ["retrievals", "p50 ms", "p95 ms"]
    rows = []
    for s in report.summaries:
        m = s.metrics
        f1 = f"{m['f1']:.3f}" if "f1" in m else "-"
        rows.append(
            [
                cell(s.name) + (" *" if s.baseline else ""),
                *(f"{m[f'recall_all@{k}']:.3f}" for k in report.ks),
                f"{m['mrr_first']:.3f}",
                f"{m['ndcg@10']:.3f}",
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
