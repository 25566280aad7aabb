"""Fit the offline components' coefficients on HotpotQA questions the benchmarks do not use.

Usage: python benchmarks/calibrate_offline.py. Takes the HotpotQA questions that are not in
bench_eval.py's sample (yes/no questions left out: no sentence says "yes") and MuSiQue's
single-hop sub-questions (each with the answers of the hops before it filled in), retrieves
the 5 best chunks of each with one hybrid search of the cached knowledge base, and fits

1. the sentence scorer (``SENTENCE_COEFFICIENTS`` and ``SENTENCE_LEXICAL`` in
   components/heuristics/extractive.py): a logistic regression of "this sentence contains a gold
   answer" on the sentence features, with and without embedding similarity;
2. the answer judge (``ANSWER_COEFFICIENTS`` and ``ANSWER_LEXICAL`` in
   components/heuristics/judging.py, with and without an embedder): a logistic regression
   of "the extractive answer contains a gold answer" on the answer features, over the answers
   to the questions as retrieved and, as questions the documents cannot answer, the answers to
   the same questions with their gold passages taken out of the knowledge base's results.

It prints the coefficients to paste and a reliability table of the judge on each set. The
features are cached in benchmarks/.cache (``--fresh`` computes them again: do after changing a
feature).

``--pydocs`` also fits the judge with an embedder on every answer RAGLoop.offline gives,
iteration by iteration, to the pydocs dev questions (bench_answers.py's set and its rule of
"right": paraphrases and questions the docs cannot answer among them), weighted as much as the
two other sets together, and shows what RAGLoop.offline would do under the shipped judge and
under the fitted one at a few thresholds (its stop rule replayed over the recorded
iterations), fitted on all the questions and cross-validated (5 folds of questions, 3
shuffles: each fold's figures from a judge fitted without it). This is how the shipped
coefficients were checked against a fit on the documentation questions (docs/offline.md,
"What the judge cannot tell apart"); they are not fitted on them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from functools import partial

import numpy as np
from bench_answers import is_right, pydocs_items, pydocs_knowledge_base
from bench_eval import SAMPLE_EVERY
from bench_retrieval import CACHE, DATASETS, knowledge_base

from ragloop import Corpus, ExtractiveGenerator, RAGLoop
from ragloop.components.citations import strip_citations
from ragloop.components.heuristics import extractive, judging
from ragloop.components.heuristics.extractive import (
    SENTENCE_FEATURES,
    SentenceScorer,
    sentence_similarity,
    split_chunks,
)
from ragloop.components.heuristics.judging import (
    ANSWER_FEATURES,
    UNFINISHED_AT_MOST,
    answer_features,
)
from ragloop.components.heuristics.questions import profile
from ragloop.evaluation.datasets import EvalDataset, EvalQuestion, load_dataset
from ragloop.evaluation.metrics import answer_contains
from ragloop.kb.knowledge_base import KnowledgeBase

TOP_K = 5
PYDOCS_SHARE = 0.5  # the pydocs loop answers' share of the embedded judge's fit
THRESHOLDS = (0.5, 0.55, 0.6)  # where the replayed loop's figures are shown
KINDS = ("fact", "paraphrase", "multi", "unanswerable")


def chance(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """The fitted logistic model's probability for each row of ``x``."""
    return 1 / (1 + np.exp(-(x @ w)))


def fit_logistic(
    x: np.ndarray,
    y: np.ndarray,
    l2: float = 1e-2,
    steps: int = 50,
    weights: np.ndarray | None = None,
) -> np.ndarray:
    """Newton's method on the L2-regularised (and optionally weighted) log loss; column 0 of x
    is the intercept."""
    s = np.ones(len(y)) if weights is None else weights
    w = np.zeros(x.shape[1])
    for _ in range(steps):
        p = chance(x, w)
        grad = x.T @ (s * (p - y)) + l2 * w
        hess = x.T @ (x * (s * p * (1 - p))[:, None]) + l2 * np.eye(x.shape[1])
        w -= np.linalg.solve(hess, grad)
    return w


# The direction each answer feature can only push the chance: an answer does not become more
# likely right by covering less of the question, nor less by covering more of it. A coefficient
# fitted the other way (a quirk of the fitting data, such as HotpotQA's rough person and place
# detection) is held at 0. (The kind of answer asked for and the evidence's coverage were
# fitted at 0.00 with and without an embedder and went; the kind still decides "complete".)
ANSWER_SIGNS = {
    "coverage": 1,
    "names": 1,
    "similarity": 1,
    "length": -1,
    "foreign": -1,
    "parts_missing": -1,
    "ungrounded": -1,
}


def fit_signed(
    x: np.ndarray, y: np.ndarray, signs: list[int], weights: np.ndarray | None = None
) -> np.ndarray:
    """:func:`fit_logistic` with each coefficient (after the intercept) held to the sign
    given (0: free): a coefficient fitted the other way is fixed at 0 and the rest refitted."""
    free = list(range(x.shape[1]))
    while True:
        w = np.zeros(x.shape[1])
        w[free] = fit_logistic(x[:, free], y, weights=weights)
        wrong = [i for i in free[1:] if signs[i - 1] and np.sign(w[i]) == -signs[i - 1]]
        if not wrong:
            return w
        free = [i for i in free if i not in wrong]


def coefficients(names: tuple[str, ...], w: np.ndarray) -> str:
    pairs = [f'"bias": {w[0]:.2f}'] + [f'"{n}": {v:.2f}' for n, v in zip(names, w[1:], strict=True)]
    return "{" + ", ".join(pairs) + "}"


def sentence_data(kb, questions, *, embedded: bool) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    """Sentence features (``x``, intercept first), labels (``y``: the sentence contains a gold
    answer) and the question each sentence belongs to (``g``)."""
    corpus = Corpus.of(kb) if embedded else None
    rows, labels, groups = [], [], []
    for n, q in enumerate(questions):
        chunks = kb.search(q.question, top_k=TOP_K)
        sentences = split_chunks(chunks)
        if not sentences:
            continue
        scorer = SentenceScorer.build(q.question, sentences)
        similarity = sentence_similarity(corpus, scorer, chunks) if embedded else None
        scorer.score(chunks, similarity, corpus)
        for sentence in sentences:
            rows.append([1.0, *(sentence.features[k] for k in SENTENCE_FEATURES)])
            labels.append(float(answer_contains(sentence.text, q.answers)))
            groups.append(n)
    return {"x": np.array(rows), "y": np.array(labels), "g": np.array(groups)}


def answer_data(kb, questions, *, embedded: bool) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    """Answer features and labels: each question as retrieved, and again without its gold
    passages (a question the documents cannot answer); with or without the embedder."""
    corpus = Corpus.of(kb) if embedded else Corpus.of(kb, embedder=None)
    generator = ExtractiveGenerator(corpus=corpus, unsure_below=0.0)
    rows, labels = [], []
    for q in questions:
        found = kb.search(q.question, top_k=4 * TOP_K)
        for chunks in (found[:TOP_K], [c for c in found if c.source not in q.gold][:TOP_K]):
            answer = generator.generate(q.question, chunks).answer
            asked = profile(q.question)
            analysis = generator.judge.analyse(asked, chunks, answer)
            if not analysis.answered:
                continue
            features = answer_features(asked, analysis)
            rows.append([1.0, *(features[k] for k in ANSWER_FEATURES)])
            labels.append(float(answer_contains(strip_citations(answer), q.answers)))
    return {"x": np.array(rows), "y": np.array(labels)}


def pydocs_loop_data() -> dict[str, np.ndarray]:
    """Every answer RAGLoop.offline gives to the pydocs dev questions, iteration by iteration
    (each run to its last iteration: ``confidence_threshold=1.0``): the answer features, right
    or not (bench_answers.py's rule), whether the judge holds it as unfinished (``cap``: a part
    or hop missing, an unknown name), its question (``g``) and each question's kind (``kinds``,
    an index into :data:`KINDS`)."""
    loop = RAGLoop.offline(pydocs_knowledge_base(), confidence_threshold=1.0)
    generator = loop.generator
    assert isinstance(generator, ExtractiveGenerator)
    rows, labels, capped, groups, kinds = [], [], [], [], []
    for n, item in enumerate(pydocs_items()):
        asked = profile(item.question)
        kinds.append(KINDS.index(item.kind))
        for iteration in loop.run(item.question).trace:
            found = generator.judge.analyse(asked, iteration.chunks, iteration.answer)
            if not found.answered:
                continue
            features = answer_features(asked, found)
            rows.append([1.0, *(features[k] for k in ANSWER_FEATURES)])
            labels.append(float(is_right(iteration.answer, item.gold)))
            capped.append(float(bool(found.hops or found.uncovered_parts or found.unknown_names)))
            groups.append(n)
    return {
        "x": np.array(rows),
        "y": np.array(labels),
        "cap": np.array(capped),
        "g": np.array(groups),
        "kinds": np.array(kinds),
    }


def replayed(scores: np.ndarray, loop: dict[str, np.ndarray], threshold: float) -> str:
    """RAGLoop's stop rule replayed over the recorded iterations: the first answer the judge
    scores at least ``threshold`` is given, confident; else the best one, not confident."""
    scores = np.where(loop["cap"] > 0, np.minimum(scores, UNFINISHED_AT_MOST), scores)
    kinds = [KINDS[k] for k in loop["kinds"]]
    confident, right = np.zeros(len(kinds), bool), np.zeros(len(kinds), bool)
    for q in range(len(kinds)):
        rows = np.flatnonzero(loop["g"] == q)
        if not len(rows):
            continue
        over = rows[scores[rows] >= threshold]
        confident[q] = len(over) > 0
        chosen = over[0] if len(over) else rows[np.argmax(scores[rows])]
        right[q] = bool(loop["y"][chosen])
    answerable = np.array([k != "unanswerable" for k in kinds])
    paraphrase = np.array([k == "paraphrase" for k in kinds])
    return (
        f"accuracy {right[answerable].sum()}/{answerable.sum()}, "
        f"confident and right {(confident & right)[answerable].sum()}, "
        f"paraphrases right {right[paraphrase].sum()}/{paraphrase.sum()} "
        f"(confident {(confident & right)[paraphrase].sum()}), "
        f"confident but wrong {(confident & ~right).sum()}/{len(kinds)}, "
        f"refused {(~confident)[~answerable].sum()}/{(~answerable).sum()}"
    )


def fit_beside(
    x: np.ndarray, y: np.ndarray, others: list[tuple[np.ndarray, np.ndarray]], signs: list[int]
) -> np.ndarray:
    """:func:`fit_signed` over the pydocs loop answers (``x``, ``y``) and ``others`` at once:
    the pydocs answers weigh :data:`PYDOCS_SHARE` of the whole, the other sets the rest in
    equal parts."""
    parts = [(x, y), *others]
    shares = [PYDOCS_SHARE, *((1 - PYDOCS_SHARE) / len(others) for _ in others)]
    total = sum(len(labels) for _, labels in parts)
    weights = [
        np.full(len(labels), share * total / len(labels))
        for (_, labels), share in zip(parts, shares, strict=True)
    ]
    return fit_signed(
        np.vstack([rows for rows, _ in parts]),
        np.concatenate([labels for _, labels in parts]),
        signs,
        weights=np.concatenate(weights),
    )


def cross_validated(
    loop: dict[str, np.ndarray],
    others: list[tuple[np.ndarray, np.ndarray]],
    signs: list[int],
    seed: int,
) -> np.ndarray:
    """The judge's chance of each pydocs loop answer, from a fit without its question's fold
    (5 folds of questions) and with all of ``others``."""
    questions = np.random.default_rng(seed).permutation(len(loop["kinds"]))
    out = np.zeros(len(loop["y"]))
    for fold in np.array_split(questions, 5):
        held = np.isin(loop["g"], fold)
        w = fit_beside(loop["x"][~held], loop["y"][~held], others, signs)
        out[held] = chance(loop["x"][held], w)
    return out


def reliability(p: np.ndarray, y: np.ndarray) -> list[str]:
    """Predicted chance against how often it was right, in bins of 0.2."""
    lines = ["| predicted | answers | mean predicted | right |", "|---|---|---|---|"]
    for low in (0.0, 0.2, 0.4, 0.6, 0.8):
        inside = (p >= low) & (p < low + 0.2 if low < 0.8 else p <= 1.0)
        if inside.any():
            lines.append(
                f"| {low:.1f}-{low + 0.2:.1f} | {int(inside.sum())} | "
                f"{p[inside].mean():.2f} | {y[inside].mean():.2f} |"
            )
    return lines


def musique_single_hops(dataset: EvalDataset) -> list[EvalQuestion]:
    """MuSiQue's single-hop sub-questions, each with the answers of the hops before it put in
    for "#1", "#2" (those written as "X >> relation" left out). bench_eval.py asks the whole
    questions; none of it asks these."""
    ids = {(p.title, " ".join(p.text.split())): p.id for p in dataset.passages}
    rows = json.loads(DATASETS["MuSiQue"].read_text(encoding="utf-8"))
    out = []
    for row in rows:
        paragraphs = {p["idx"]: p for p in row["paragraphs"]}
        answers: list[str] = []
        for n, step in enumerate(row["question_decomposition"], 1):
            answers.append(step["answer"])
            text = step["question"]
            for k, earlier in enumerate(answers[:-1], 1):
                text = text.replace(f"#{k}", earlier)
            support = paragraphs.get(step["paragraph_support_idx"])
            if ">>" in text or "#" in text or support is None:
                continue
            key = (support["title"].strip(), " ".join(support["paragraph_text"].split()))
            out.append(
                EvalQuestion(
                    id=f"{row['id']}#{n}", question=text, answers=[step["answer"]], gold=[ids[key]]
                )
            )
    return out


def calibration_sets() -> dict[str, tuple[KnowledgeBase, list[EvalQuestion]]]:
    """HotpotQA's questions outside bench_eval.py's sample (yes/no ones left out) and MuSiQue's
    single-hop sub-questions, each over its own cached knowledge base."""
    hotpot = load_dataset(DATASETS["HotpotQA"])
    held_out = [
        q
        for i, q in enumerate(hotpot.questions)
        if i % SAMPLE_EVERY != 0 and not {a.lower() for a in q.answers} & {"yes", "no"}
    ]
    musique = load_dataset(DATASETS["MuSiQue"])
    return {
        "hotpotqa": (knowledge_base("HotpotQA", hotpot, "minilm"), held_out),
        "musique-single-hop": (
            knowledge_base("MuSiQue", musique, "minilm"),
            musique_single_hops(musique),
        ),
    }


def cached(name: str, make: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Feature rows and labels, computed once (``--fresh`` computes them again)."""
    path = CACHE / f"calibration-{name}.npz"
    if path.exists() and "--fresh" not in sys.argv:
        return dict(np.load(path))
    data = make()
    np.savez(path, **data)
    return data


def fit_ranking(x: np.ndarray, y: np.ndarray, g: np.ndarray, l2: float = 1e-2) -> np.ndarray:
    """A conditional logit: the weights under which each question's right sentences take the
    most of a softmax over that question's sentences (gradient ascent; no intercept, since a
    shift is the same for every sentence of a question)."""
    keep = np.isin(g, np.unique(g[y > 0]))  # questions with a right sentence at all
    x, y, g = x[keep], y[keep], g[keep]
    _, group = np.unique(g, return_inverse=True)
    w = np.zeros(x.shape[1])
    rate = 0.5
    for _ in range(2000):
        z = x @ w
        z -= np.maximum.reduceat(z, np.r_[0, np.flatnonzero(np.diff(group)) + 1])[group]
        e = np.exp(z)
        p = e / np.bincount(group, e)[group]  # softmax within each question
        q = p * y / np.bincount(group, p * y)[group]  # ... over its right sentences
        grad = x.T @ (q - p) / (group.max() + 1) - l2 * w
        w += rate * grad
    return w


def stacked(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The sets' rows one after the other (question numbers kept apart per set)."""
    out = {k: np.concatenate([p[k] for p in parts]) for k in parts[0] if k != "g"}
    if "g" in parts[0]:
        offsets = np.cumsum([0] + [int(p["g"].max()) + 1 for p in parts[:-1]])
        out["g"] = np.concatenate([p["g"] + o for p, o in zip(parts, offsets, strict=True)])
    return out


def fit_sentences(sets: dict[str, tuple[KnowledgeBase, list[EvalQuestion]]]) -> None:
    """The sentence scorer: weights from a ranking fit (which sentence of a question answers
    it), then the intercept from a logistic fit with those weights, so the score reads as a
    chance."""
    for embedded, name in ((True, "SENTENCE_COEFFICIENTS"), (False, "SENTENCE_LEXICAL")):
        data = stacked(
            [
                cached(
                    f"sentences-{key}-{embedded}",
                    partial(sentence_data, kb, questions, embedded=embedded),
                )
                for key, (kb, questions) in sets.items()
            ]
        )
        features = (
            SENTENCE_FEATURES
            if embedded
            else tuple(f for f in SENTENCE_FEATURES if f != "similarity")
        )
        columns = [1 + SENTENCE_FEATURES.index(f) for f in features]
        x, y = data["x"][:, columns], data["y"]
        w = fit_ranking(x, y, data["g"])
        z = x @ w
        bias = fit_logistic(np.column_stack([np.ones_like(z), z]), y)
        weights = np.r_[bias[0], w * bias[1]]
        print(f"{len(y)} sentences, {y.mean():.3f} contain a gold answer")
        print(f"{name} = {coefficients(features, weights)}")
        fitted = dict(zip(("bias", *features), (float(v) for v in weights), strict=True))
        target = extractive.SENTENCE_COEFFICIENTS if embedded else extractive.SENTENCE_LEXICAL
        target.clear()
        target.update(fitted)  # the answers below are picked with the fitted scorer


def fit_answers(
    sets: dict[str, tuple[KnowledgeBase, list[EvalQuestion]]],
    loop: dict[str, np.ndarray] | None = None,
) -> None:
    """The answer judge, with an embedder (``ANSWER_COEFFICIENTS``) and without
    (``ANSWER_LEXICAL``: no similarity, no words said in other words); with ``loop`` (the
    pydocs loop answers, ``--pydocs``) also the fit beside them."""
    for embedded, name in ((True, "ANSWER_COEFFICIENTS"), (False, "ANSWER_LEXICAL")):
        parts = {
            key: cached(
                f"answers-{key}-{embedded}", partial(answer_data, kb, questions, embedded=embedded)
            )
            for key, (kb, questions) in sets.items()
        }
        features = (
            ANSWER_FEATURES if embedded else tuple(f for f in ANSWER_FEATURES if f != "similarity")
        )
        columns = [0] + [1 + ANSWER_FEATURES.index(f) for f in features]
        data = stacked(list(parts.values()))
        signs = [ANSWER_SIGNS[f] for f in features]
        w = fit_signed(data["x"][:, columns], data["y"], signs)
        print(f"{len(data['y'])} answers, {data['y'].mean():.3f} contain a gold answer")
        print(f"{name} = {coefficients(features, w)}")
        for key, part in parts.items():
            print(f"\n{key}: {len(part['y'])} answers")
            print("\n".join(reliability(chance(part["x"][:, columns], w), part["y"])))
        if embedded and loop is not None:
            fit_with_pydocs(loop, [(part["x"], part["y"]) for part in parts.values()], signs)


def fit_with_pydocs(
    loop: dict[str, np.ndarray], others: list[tuple[np.ndarray, np.ndarray]], signs: list[int]
) -> None:
    """The judge with an embedder fitted on the pydocs loop answers too, and RAGLoop.offline
    replayed on them under the shipped judge and under that fit."""
    w = fit_beside(loop["x"], loop["y"], others, signs)
    print(f"\nwith the pydocs loop answers: {coefficients(ANSWER_FEATURES, w)}")
    for x, y in others:
        print("\n".join(reliability(chance(x, w), y)))
    shipped = np.array([judging.ANSWER_COEFFICIENTS[k] for k in ("bias", *ANSWER_FEATURES)])
    today, fitted = chance(loop["x"], shipped), chance(loop["x"], w)
    print(f"\npydocs loop: {len(loop['y'])} answers, {loop['y'].mean():.3f} right")
    print("\n".join(reliability(fitted, loop["y"])))
    folds = [cross_validated(loop, others, signs, seed) for seed in range(3)]
    for threshold in THRESHOLDS:
        print(f"\nRAGLoop.offline replayed at {threshold}:")
        print(f"  shipped judge:   {replayed(today, loop, threshold)}")
        print(f"  fitted on all:   {replayed(fitted, loop, threshold)}")
        for seed, held_out in enumerate(folds):
            print(f"  cross-val (#{seed}): {replayed(held_out, loop, threshold)}")


def main() -> None:
    sets = calibration_sets()
    # the loop's answers as it gives them today: recorded before the sentence scorer is refitted
    loop = cached("pydocs-loop", pydocs_loop_data) if "--pydocs" in sys.argv else None
    fit_sentences(sets)
    fit_answers(sets, loop)


if __name__ == "__main__":
    main()
