"""Reports of an evaluation: a markdown table, JSON, and a PNG chart of recall against k."""

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
        cells += [f"{m[f'recall_all@{k}']:.3f} ({m[f'passage_recall@{k}']:.3f})" for k in report.ks]
        cells += [f"{m['mrr_first']:.3f}", f"{m['mrr_last']:.3f}", f"{m['ndcg@10']:.3f}"]
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
    """A PNG of recall of all gold passages against k, one line per configuration (needs the
    ``eval`` extra: matplotlib)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("the chart needs the eval extra: pip install 'ragloop[eval]'") from None
    figure, axes = plt.subplots(figsize=(7, 4.5), dpi=120)
    for s in report.summaries:
        values = [s.metrics[f"recall_all@{k}"] for k in report.ks]
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
    figure.tight_layout()
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out)
    plt.close(figure)
    return out
