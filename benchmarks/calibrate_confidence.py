"""Fit what the offline engines' "confident" means, across corpora, and check it on each corpus
by leaving that corpus out of the fit (issue 59: confident answers right at least 80% of the
time on any corpus).

The HeuristicEvaluator's score was fitted (``calibrate_offline.py``) to read as the chance that
*one* answer is right; a user who is told "sure" wants the answers ragloop is sure of to be right
most of the time. A ``selective`` calibration (``ragloop.components.calibration``) reads a score
as the precision of the answers scored at least as high, so a target precision is a promise
about those answers. It is fitted here on the runs of RAGLoop.offline and AgentLoop.offline
over several corpora together, each run's score (the engine's chance, under the identity) and
whether the engine's own answer was right (an answer to a question the documents do not answer
never is), each corpus weighted alike, and judged with grouped cross-validation: every corpus's
figures come from a calibration fitted without it.

The runs come from ``bench_answers.py --dump`` (run with the judge's score as it comes,
``--raw``):

    python benchmarks/bench_answers.py --demo --engines ragloop,agentloop \\
        --raw --dump demo.jsonl
    python benchmarks/bench_answers.py --questions benchmarks/howto_dev.jsonl \\
        --engines ragloop,agentloop --raw --dump howto.jsonl
    python benchmarks/bench_answers.py --engines ragloop,agentloop \\
        --raw --dump pydocs.jsonl
    python benchmarks/bench_answers.py --withheld 30 --engines ragloop,agentloop \\
        --raw --dump multihop.jsonl
    python benchmarks/calibrate_confidence.py demo.jsonl howto.jsonl pydocs.jsonl \\
        multihop.jsonl [--write]

A run's corpus is read from its id (``demo-``, ``howto-`` and ``pyd-`` ids are the demo shop and
the Python docs; ``HotpotQA:`` and ``MuSiQue:`` the multi-hop sets): the two Python docs sets
are one corpus, never fitted and judged on each other. ``--write`` saves the calibration fitted
on every corpus as ragloop's shipped offline calibration.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np

from ragloop.components.calibration import Calibration

SHIPPED = (
    Path(__file__).resolve().parents[1]
    / "src"
    / "ragloop"
    / "components"
    / "heuristics"
    / "offline_calibration.json"
)
TARGETS = (0.5, 0.7, 0.8, 0.9)
REPEATS = 20  # weight: each corpus's runs repeated to as many as the largest's, at most this


def corpus_of(run_id: str) -> str:
    if run_id.startswith("demo-"):
        return "demo shop"
    if run_id.startswith(("howto-", "pyd-")):
        return "Python docs"
    return run_id.split(":", 1)[0]


def read_runs(paths: list[Path]) -> dict[str, list[tuple[float, bool]]]:
    """(score, the engine's own answer right) of every run that has a score, per corpus."""
    runs: dict[str, list[tuple[float, bool]]] = defaultdict(list)
    for path in paths:
        for line in path.read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row.get("score") is None:
                continue
            right = bool(row["attempt_right"]) and row["kind"] not in ("unanswerable", "withheld")
            runs[corpus_of(row["id"])].append((float(row["score"]), right))
    return dict(runs)


def fit(runs: dict[str, list[tuple[float, bool]]], corpora: list[str]) -> Calibration:
    """A selective calibration over ``corpora``, each weighted as the largest (its runs
    repeated), so that no one corpus decides what "sure" means."""
    largest = max(len(runs[c]) for c in corpora)
    scores: list[float] = []
    right: list[bool] = []
    for corpus in corpora:
        times = min(REPEATS, max(1, round(largest / len(runs[corpus]))))
        for _ in range(times):
            scores += [s for s, _ in runs[corpus]]
            right += [r for _, r in runs[corpus]]
    fitted = Calibration.fit(
        scores, right, method="selective", evaluator="heuristic", fitted_on=", ".join(corpora)
    )
    return fitted.model_copy(update={"questions": sum(len(runs[c]) for c in corpora)})


def at_target(
    calibration: Calibration, runs: list[tuple[float, bool]], target: float
) -> tuple[float, float, float]:
    """Precision, coverage and confident-but-wrong (of all runs) when ``calibration`` stands
    by the answers whose chance reaches ``target``."""
    sure = [r for s, r in runs if calibration.probability(s) >= target]
    precision = float(np.mean(sure)) if sure else float("nan")
    wrong = sum(1 for r in sure if not r)
    return precision, len(sure) / len(runs), wrong / len(runs)


def cell(figures: tuple[float, float, float]) -> str:
    precision, coverage, wrong = figures
    shown = "-" if np.isnan(precision) else f"{precision:.0%}"
    return f"{shown} / {coverage:.0%} / {wrong:.0%}"


def report(runs: dict[str, list[tuple[float, bool]]]) -> list[str]:
    corpora = sorted(runs)
    everything = fit(runs, corpora)
    lines = [
        "Precision / coverage / confident but wrong (of all runs), RAGLoop.offline and "
        "AgentLoop.offline together, each corpus judged by a calibration fitted without it "
        "(left out) and by the one fitted on every corpus (in sample):",
        "",
        "| corpus | runs | right | "
        + " | ".join(f"target {t}: left out | in sample" for t in TARGETS)
        + " |",
        "|---|---|---|" + "---|---|" * len(TARGETS),
    ]
    for corpus in corpora:
        held = fit(runs, [c for c in corpora if c != corpus])
        share = np.mean([r for _, r in runs[corpus]])
        cells = []
        for target in TARGETS:
            cells += [cell(at_target(held, runs[corpus], target))]
            cells += [cell(at_target(everything, runs[corpus], target))]
        lines.append(
            f"| {corpus} | {len(runs[corpus])} | {share:.0%} | " + " | ".join(cells) + " |"
        )
    lines += [
        "",
        "The calibration fitted on every corpus: a score stands for the precision of the "
        "answers scored at least as high; the score each target needs:",
        "",
        "| target | score at least |",
        "|---|---|",
        *(f"| {t} | {everything.score_for(t):.3f} |" for t in TARGETS),
    ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dumps", nargs="+", type=Path, help="bench_answers.py --dump files")
    parser.add_argument("--write", action="store_true", help=f"save the fit as {SHIPPED.name}")
    args = parser.parse_args()
    runs = read_runs(args.dumps)
    if len(runs) < 2:
        sys.exit("need runs of at least two corpora: each is judged by a fit without it")
    print("\n".join(report(runs)))
    if args.write:
        fitted = fit(runs, sorted(runs))
        SHIPPED.write_text(fitted.model_dump_json(indent=1) + "\n", encoding="utf-8")
        print(f"\nwrote {SHIPPED}")


if __name__ == "__main__":
    main()
