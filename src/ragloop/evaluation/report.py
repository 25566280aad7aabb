"""Reports of an evaluation: markdown tables, JSON, and a PNG chart of recall against k (with
the risk-coverage curves beside it when configurations give their answers a probability)."""

from __future__ import annotations

from pathlib import Path

from ragloop.evaluation.harness import EvalReport


def markdown_table(report: EvalReport) -> str:
    """One row per configuration: recall of all gold at each k (partial-credit recall in
    brackets), MRR, nDCG@10, answer scores when there are answers, and the cost."""
    has_answers = any("f1" in s.metrics for s in report.summaries)
    head = ["configuration", *(f"R@{k}" for k in report.ks), "MRR first", "MRR last", "nDCG@10"]
    if has_answers:
        head += ["EM", "F1"]
    head += ["retrievals", "LLM calls", "tokens", "p50 ms", "p95 ms"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in report.summaries:
        m = s.metrics
        cells = [s.name + (" (baseline)" if s.baseline else "")]
        if f"recall_all@{report.ks[0]}" in m:
            cells += [
                f"{m[f'recall_all@{k}']:.3f} ({m[f'passage_recall@{k}']:.3f})" for k in report.ks
            ]
            cells += [f"{m['mrr_first']:.3f}", f"{m['mrr_last']:.3f}", f"{m['ndcg@10']:.3f}"]
        else:  # no question with gold passages to score
            cells += ["-"] * (len(report.ks) + 3)
        if has_answers:
            cells += [f"{m.get('em', 0):.3f}", f"{m.get('f1', 0):.3f}"]
        cells += [
            f"{s.retrieval_calls:.1f}",
            f"{s.llm_calls:.1f}",
            f"{s.tokens:.0f}",
            f"{s.latency_p50_ms:.1f}",
            f"{s.latency_p95_ms:.1f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fraction(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def selective_table(report: EvalReport) -> str:
    """One row per configuration that gives its answers a probability: the questions judged
    (those the documents cannot answer among them), accuracy over all of them, AURC, the
    precision and coverage of the answers at the report's target precision, confident but
    wrong (over all questions), and refusal precision and recall. Empty when no configuration
    has selective figures."""
    rows = [s for s in report.summaries if s.selective is not None]
    if not rows:
        return ""
    target = report.target_precision
    head = [
        "configuration",
        "questions",
        "accuracy",
        "AURC",
        f"precision @ {target:g}",
        f"coverage @ {target:g}",
        "confident but wrong",
        "refusal precision",
        "refusal recall",
        "ECE",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in rows:
        m = s.selective
        assert m is not None
        questions = f"{m.questions}" + (
            f" ({m.unanswerable} unanswerable)" if m.unanswerable else ""
        )
        cells = [
            s.name,
            questions,
            f"{m.accuracy:.3f}",
            f"{m.aurc:.3f}",
            _fraction(m.precision_at_target),
            f"{m.coverage_at_target:.3f}",
            f"{m.confident_but_wrong:.3f}",
            _fraction(m.refusal_precision),
            _fraction(m.refusal_recall),
            f"{m.ece:.3f}",
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def significance_table(report: EvalReport, metrics: tuple[str, ...] = ("recall_all@5",)) -> str:
    lines = [
        "| configuration | metric | vs baseline | difference | p-value | test |",
        "|---|---|---|---|---|---|",
    ]
    for c in report.comparisons:
        if c.metric not in metrics:
            continue
        mark = " *" if c.significant else ""
        lines.append(
            f"| {c.candidate} | {c.metric} | {c.baseline} | {c.difference * 100:+.1f} points{mark} "
            f"| {c.p_value:.2g} | {c.test} |"
        )
    return "\n".join(lines)


def kind_table(report: EvalReport, metric: str = "recall_all@5") -> str:
    kinds = sorted({k for s in report.summaries for k in s.by_kind})
    lines = ["| configuration | " + " | ".join(kinds) + " |", "|" + "---|" * (len(kinds) + 1)]
    for s in report.summaries:
        cells = [f"{s.by_kind[k][metric]:.3f}" if k in s.by_kind else "-" for k in kinds]
        lines.append(f"| {s.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def recall_chart(report: EvalReport, path: str | Path, *, title: str | None = None) -> Path:
    """A PNG of recall of all gold passages against k, one line per configuration, and, when
    any configuration gives its answers a probability, a second panel beside it: each such
    configuration's risk-coverage curve (the accuracy of the answers given against the share of
    questions answered, as the threshold on the probability falls). Needs the ``eval`` extra:
    matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("the chart needs the eval extra: pip install 'ragloop[eval]'") from None
    selective = [s for s in report.summaries if s.selective is not None]
    if selective:
        figure, (axes, curves) = plt.subplots(1, 2, figsize=(13, 4.5), dpi=120)
    else:
        figure, axes = plt.subplots(figsize=(7, 4.5), dpi=120)
    for s in report.summaries:
        values = [s.metrics.get(f"recall_all@{k}", 0.0) for k in report.ks]
        axes.plot(
            report.ks, values, marker="o", linestyle="--" if s.baseline else "-", label=s.name
        )
    axes.set_xlabel("k (passages)")
    axes.set_ylabel("recall of all gold passages")
    axes.set_xticks(report.ks)
    axes.set_ylim(0, 1)
    axes.grid(alpha=0.3)
    axes.set_title(title or f"{report.dataset}: recall@k")
    axes.legend(fontsize=8)
    if selective:
        for s in selective:
            m = s.selective
            assert m is not None
            curves.plot(
                [point.coverage for point in m.curve],
                [point.accuracy for point in m.curve],
                marker="." if len(m.curve) < 60 else None,
                linestyle="--" if s.baseline else "-",
                label=f"{s.name} (AURC {m.aurc:.3f})",
            )
        curves.set_xlabel("coverage (share of questions answered)")
        curves.set_ylabel("accuracy of the answers given")
        curves.set_xlim(0, 1)
        curves.set_ylim(0, 1.02)
        curves.grid(alpha=0.3)
        curves.set_title(f"{report.dataset}: risk-coverage")
        curves.legend(fontsize=8)
    figure.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out)
    plt.close(figure)
    return out
