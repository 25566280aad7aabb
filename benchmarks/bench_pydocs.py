"""The Python 3.11 documentation (../shared/data/pydocs311), ingested and searched as a user
would: `ragloop ingest`, `ragloop kb embed`, `ragloop search`, each in its own process.

1. Readers: every code block of the pages (as BeautifulSoup reads ``<pre>`` in the main
   content) found whole in the chunks, no heading taken from a code block, the logging levels
   table as rows.
2. Ingest: the text of the whole corpus stored (keyword search ready), then every chunk
   embedded; chunks per second of the ingest beside the bare model's, and the model's speed at
   its former settings (256 word pieces, batches of 32) in the same run; peak memory of each
   process; re-ingest of the unchanged folder, and of the folder with every file touched.
3. Search: latency in process (`ragloop search` end to end: bench_pydocs_search.py).
5. Loops against one search: page@5 of the first iteration of each offline loop (RAGLoop's
   first retrieval, RetrievalLoop's first iteration and its whole evidence) against one hybrid
   search, on the pydocs questions, and recall@5 of both gold passages on HotpotQA, with hops
   ranked after the question's own results (``direct_first``, the default) and interleaved.
4. Exact terms: a query set built from the corpus (each API documented on exactly one page,
   found by its Sphinx anchor, and each command-line option; the page is the gold), asked bare
   and in a question, and the pydocs questions; page@1 and page@5 for bm25, dense, hybrid
   fused by plain RRF, and hybrid as it ships (exact terms first).
"""

from __future__ import annotations

import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import pydocs
from bench_retrieval import DATASETS, knowledge_base
from bs4 import BeautifulSoup
from former_embedder import FormerMiniLM

from ragloop import RAGLoop, RetrievalLoop
from ragloop.core.records import Chunk
from ragloop.evaluation.configurations import ranked_passages
from ragloop.evaluation.datasets import load_dataset
from ragloop.evaluation.metrics import recall_all
from ragloop.kb.embedding.embedders import get_embedder
from ragloop.kb.index.fusion import reciprocal_rank_fusion
from ragloop.kb.ingest.chunking import chunk_document
from ragloop.kb.knowledge_base import KnowledgeBase
from ragloop.kb.readers import read_html
from ragloop.kb.stores.base import Scope

PYTHON = sys.executable
MODES = ("bm25", "dense", "hybrid, plain RRF", "hybrid (default)")
NAMES_SAMPLED = 400
MEASURE = """
import resource, subprocess, sys, time
started = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
wall = time.perf_counter() - started
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(wall, rss * 1024, done.returncode, sep="\\n")
print(done.stdout)
sys.stderr.write(done.stderr)
"""


def ragloop(*args: str) -> tuple[float, int, str]:
    """(wall seconds, peak resident bytes, stdout) of one ragloop command in its own process."""
    done = subprocess.run(
        [PYTHON, "-c", MEASURE, PYTHON, "-m", "ragloop", *args],
        capture_output=True,
        text=True,
        check=True,
    )
    wall, rss, code, *out = done.stdout.split("\n")
    if code != "0":
        raise RuntimeError(f"ragloop {' '.join(args)} failed: {done.stderr[-2000:]}")
    return float(wall), int(rss), "\n".join(out)


# -- 1. readers ----------------------------------------------------------------------------------


def code_blocks(html: str) -> list[str]:
    """The page's code blocks as BeautifulSoup reads them (main content, trailing spaces and
    blank edge lines dropped)."""
    main = BeautifulSoup(html, "html.parser").select_one('[role="main"]')
    blocks = []
    for pre in main.find_all("pre") if main else []:
        lines = [line.rstrip() for line in pre.get_text().split("\n")]
        while lines and not lines[0]:
            lines.pop(0)
        while lines and not lines[-1]:
            lines.pop()
        if lines:
            blocks.append("\n".join(lines))
    return blocks


def readers_section(corpus: Path) -> list[str]:
    pages = chunks = blocks = whole = heading_lines = 0
    logging_table = ""
    for path in sorted(corpus.rglob("*.html")):
        html = path.read_text(encoding="utf-8")
        doc = read_html(html, path)
        drafts = chunk_document(doc)
        pages += 1
        chunks += len(drafts)
        text = "\n".join(d.text for d in drafts)
        code = code_blocks(html)
        code_lines = {line.strip() for block in code for line in block.split("\n") if line}
        for block in code:
            blocks += 1
            # whole in one chunk, or (a block longer than a chunk) every line in order
            if any(block in d.text for d in drafts) or all(
                line in text for line in block.split("\n")
            ):
                whole += 1
        heading_lines += sum(
            1 for d in drafts for h in d.heading_path if h.startswith("#") and h in code_lines
        )
        if path.name == "logging.html":
            logging_table = next(d.text for d in drafts if "CRITICAL | 50" in d.text)
    table = logging_table.split("\n\n")[-1] if logging_table else "(not found)"
    return [
        "### Readers",
        "",
        f"{pages} pages, {chunks:,} chunks. Code blocks found whole in the chunks: "
        f"**{whole:,} of {blocks:,}**. Chunks whose heading path holds a line of a code block: "
        f"**{heading_lines}**. The logging levels table, as a chunk holds it:",
        "",
        "```text",
        *table.split("\n"),
        "```",
    ]


# -- 2. ingest ---------------------------------------------------------------------------------


def sample_texts(kb: KnowledgeBase, n: int) -> list[str]:
    """Index texts of ``n`` chunks of the knowledge base, drawn at random."""
    rows = kb.store.missing_vectors("none", 100_000)  # every chunk: no vector of model "none"
    return [text for _, text in random.Random(0).sample(rows, n)]


def model_speed(texts: list[str]) -> tuple[float, float]:
    """Chunks/s of the default embedder and of MiniLM at its former settings, interleaved."""
    current = get_embedder("minilm")
    former = FormerMiniLM()
    times: dict[str, list[float]] = {"current": [], "former": []}
    for _ in range(2):
        for name, embedder in (("current", current), ("former", former)):
            started = time.perf_counter()
            embedder.embed(texts)
            times[name].append(time.perf_counter() - started)
    return (
        len(texts) / statistics.median(times["current"]),
        len(texts) / statistics.median(times["former"]),
    )


def ingest_section(corpus: Path, kb_path: Path) -> list[str]:
    text_wall, text_rss, out = ragloop(
        "ingest", str(corpus), "--kb", str(kb_path), "--vectors", "later", "--json"
    )
    report = json.loads(out)
    chunks = report["chunks_added"]
    embed_wall, embed_rss, _ = ragloop("kb", "embed", "--kb", str(kb_path), "--quiet")
    again_wall, _, out = ragloop("ingest", str(corpus), "--kb", str(kb_path), "--json")
    unchanged = json.loads(out)["unchanged"]
    now = time.time()
    for path in corpus.rglob("*.html"):
        os.utime(path, (now, now))
    touched_wall, _, out = ragloop("ingest", str(corpus), "--kb", str(kb_path), "--json")
    touched = json.loads(out)["unchanged"]
    with KnowledgeBase(kb_path) as kb:
        current, former = model_speed(sample_texts(kb, 600))
    ingest_rate = chunks / embed_wall
    return [
        "### Ingest",
        "",
        "| step | wall | chunks/s | peak memory |",
        "|---|---|---|---|",
        f"| `ragloop ingest --vectors later`: text of {report['added']} pages stored, "
        f"{chunks:,} chunks, keyword search ready | {text_wall:.1f} s | {chunks / text_wall:.0f} "
        f"| {text_rss / 1e6:,.0f} MB |",
        f"| `ragloop kb embed`: every chunk embedded | {embed_wall:.1f} s | "
        f"**{ingest_rate:.1f}** | {embed_rss / 1e6:,.0f} MB |",
        f"| the whole ingest (both) | {text_wall + embed_wall:.1f} s | "
        f"{chunks / (text_wall + embed_wall):.1f} | {max(text_rss, embed_rss) / 1e6:,.0f} MB |",
        f"| re-ingest, nothing changed ({unchanged} unchanged) | {again_wall:.2f} s | | |",
        f"| re-ingest, every file touched, same bytes ({touched} unchanged) | "
        f"{touched_wall:.2f} s | | |",
        "",
        f"The bare model on 600 of these chunks, in this run: **{current:.1f} chunks/s** at its "
        f"settings (batches of up to 1,024 word pieces, one run of one thread a core), "
        f"{former:.1f} chunks/s at the former ones (batches of 32 texts, one run of a thread "
        f"a core): {current / former:.2f}x. The ingest embeds at "
        f"{ingest_rate / current:.0%} of the bare model's speed (process start, model load, "
        "reading the texts, writing the vectors).",
    ]


# -- 3. search ---------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def search_section(kb_path: Path) -> list[str]:
    questions = [q.text for q in pydocs.questions(answerable=False)]
    lines = ["### Search", "", "| mode | p50 | p95 |", "|---|---|---|"]
    with KnowledgeBase(kb_path) as kb:
        kb.search("warm up", top_k=5)
        for mode in ("bm25", "dense", "hybrid"):
            times = []
            for question in questions:
                started = time.perf_counter()
                kb.search(question, top_k=5, mode=mode)
                times.append((time.perf_counter() - started) * 1000)
            lines.append(
                f"| {mode} | {percentile(times, 0.5):.1f} ms | {percentile(times, 0.95):.1f} ms |"
            )
    lines += [
        "",
        "`ragloop search` end to end, with its time split between start-up, imports, opening "
        "and the first search: the next section (benchmarks/bench_pydocs_search.py).",
    ]
    return lines


# -- 4. exact terms -------------------------------------------------------------------------------

_SIGNATURE = re.compile(r'<dt class="sig sig-object (py|std)" id="([^"]+)">(.*?)</dt>', re.S)
_TAG = re.compile(r"<[^>]+>")


def exact_queries(corpus: Path) -> list[tuple[str, str, tuple[str, ...]]]:
    """(query, kind, gold pages): each API whose name is documented on one page only, asked
    by its name and in a question, and each command-line option."""
    names: dict[str, set[str]] = defaultdict(set)
    options: dict[str, set[str]] = defaultdict(set)
    for path in sorted(corpus.rglob("*.html")):
        page = path.relative_to(corpus).as_posix()
        html = path.read_text(encoding="utf-8")
        for kind, anchor, signature in _SIGNATURE.findall(html):
            if kind == "py":
                names[anchor.split(".")[-1]].add(page)
            elif anchor.startswith("cmdoption-"):
                text = " ".join(_TAG.sub("", signature).replace("¶", "").split())
                option = text.split()[0].rstrip(",") if text else ""
                if option.startswith("-") and len(option) > 2:
                    options[option].add(page)
    unique = sorted(n for n, pages in names.items() if len(pages) == 1 and len(n) > 3)
    picked = random.Random(0).sample(unique, min(NAMES_SAMPLED, len(unique)))
    queries = []
    for name in sorted(picked):
        gold = tuple(names[name])
        queries.append((name, "name", gold))
        queries.append((f"What does {name} do?", "name in a question", gold))
    for option, pages in sorted(options.items()):
        if len(pages) == 1:
            queries.append((f"What does the {option} option do?", "option", tuple(pages)))
    return queries


def ranked_pages(kb: KnowledgeBase, query: str) -> dict[str, list[str]]:
    depth = 40
    bm25 = kb.store.keyword_search(query, depth, Scope())
    dense = kb.store.vector_search(kb.query_vector(query), depth, Scope())
    plain = reciprocal_rank_fusion({"bm25": bm25, "dense": dense}, top_k=20, k=kb.rrf_k)
    shipped = kb.search(query, top_k=20, mode="hybrid")
    return {
        mode: [c.source for c in found]
        for mode, found in zip(MODES, (bm25, dense, plain, shipped), strict=True)
    }


def scores_table(rows: dict[str, list[tuple[dict[str, list[str]], tuple[str, ...]]]]) -> list[str]:
    header = "| queries | n | " + " | ".join(f"{m} @1 / @5" for m in MODES) + " |"
    lines = [header, "|" + "---|" * (2 + len(MODES))]
    for kind, results in rows.items():
        cells = []
        for mode in MODES:
            at1 = statistics.fmean(pydocs.page_at(r[mode], gold, 1) for r, gold in results)
            at5 = statistics.fmean(pydocs.page_at(r[mode], gold, 5) for r, gold in results)
            cells.append(f"{at1:.3f} / {at5:.3f}")
        lines.append(f"| {kind} | {len(results)} | " + " | ".join(cells) + " |")
    return lines


def exact_section(corpus: Path, kb_path: Path) -> list[str]:
    rows: dict[str, list[tuple[dict[str, list[str]], tuple[str, ...]]]] = defaultdict(list)
    with KnowledgeBase(kb_path) as kb:
        for query, kind, gold in exact_queries(corpus):
            rows[kind].append((ranked_pages(kb, query), gold))
        for question in pydocs.questions():
            rows[f"pydocs questions: {question.kind}"].append(
                (ranked_pages(kb, question.text), question.gold_files)
            )
    return [
        "### Exact terms",
        "",
        f"Page@1 / page@5 (distinct pages). Names: {NAMES_SAMPLED} APIs drawn at random from "
        "those documented on one page only (Sphinx anchors), each asked bare (`lru_cache`) and "
        "in a question (`What does lru_cache do?`); options: every command-line option "
        "documented on one page; then the answerable pydocs questions by kind.",
        "",
        *scores_table(dict(rows)),
    ]


def first_pages(chunks: list[Chunk]) -> list[str]:
    return [c.source for c in chunks]


def loops_section(kb_path: Path) -> list[str]:
    questions = pydocs.questions()
    rows = ["| loop, over the pydocs questions | page@5 | one search | worse | better |",
            "|---|---|---|---|---|"]  # fmt: skip
    with KnowledgeBase(kb_path) as kb:
        plain = [pydocs.page_at(first_pages(kb.search(q.text, top_k=5)), q.gold_files, 5)
                 for q in questions]  # fmt: skip
        runs = {
            "RetrievalLoop.offline, first iteration": lambda q: (
                RetrievalLoop.offline(kb, max_iterations=1).run(q).chunks[:5]
            ),
            "RetrievalLoop.offline, whole evidence": lambda q: loop.run(q).chunks[:5],
            "RAGLoop.offline, first iteration": lambda q: rag.run(q).trace[0].chunks[:5],
        }
        loop = RetrievalLoop.offline(kb)
        rag = RAGLoop.offline(kb)
        for name, first in runs.items():
            got = [pydocs.page_at(first_pages(first(q.text)), q.gold_files, 5) for q in questions]
            rows.append(
                f"| {name} | {statistics.fmean(got):.3f} | {statistics.fmean(plain):.3f} | "
                f"{sum(g < p for g, p in zip(got, plain, strict=True))} | "
                f"{sum(g > p for g, p in zip(got, plain, strict=True))} |"
            )
    hotpot = load_dataset(DATASETS["HotpotQA"])
    kb = knowledge_base("HotpotQA", hotpot, "minilm")
    one = [recall_all(ranked_passages(kb.search(q.question, top_k=40)), q.gold, 5)
           for q in hotpot.questions]  # fmt: skip
    rows += ["", "| HotpotQA (500 questions) | recall@5 | one search | worse | better |",
             "|---|---|---|---|---|"]  # fmt: skip
    for name, direct_first in (("hops after the question's results (default)", True),
                               ("hops interleaved", False)):  # fmt: skip
        loop = RetrievalLoop.offline(kb, direct_first=direct_first)
        got = [recall_all(ranked_passages(loop.run(q.question).chunks), q.gold, 5)
               for q in hotpot.questions]  # fmt: skip
        rows.append(
            f"| RetrievalLoop.offline, {name} | {statistics.fmean(got):.3f} | "
            f"{statistics.fmean(one):.3f} | {sum(g < p for g, p in zip(got, one, strict=True))} | "
            f"{sum(g > p for g, p in zip(got, one, strict=True))} |"
        )
    kb.close()
    return [
        "### Loops against one search",
        "",
        "Page@5: a gold page among the first five chunks' pages (RAGLoop answers from five); "
        "'worse' and 'better' count the questions where the loop's first five lose or gain a "
        "gold page (HotpotQA: both gold passages) against one hybrid search.",
        "",
        *rows,
    ]


def run() -> str:
    corpus = pydocs.corpus()
    with tempfile.TemporaryDirectory() as folder:
        kb_path = Path(folder) / "pydocs.sqlite"
        sections = [
            readers_section(corpus),
            ingest_section(corpus, kb_path),
            search_section(kb_path),
            exact_section(corpus, kb_path),
            loops_section(kb_path),
        ]
    return "\n".join(
        [
            "## The Python docs: readers, ingest, search, exact terms",
            "",
            "Command: `make bench` (benchmarks/bench_pydocs.py). The Python 3.11.2 "
            "documentation, 374 HTML pages, read from ../shared/data/pydocs311.",
            "",
            *(line for section in sections for line in [*section, ""]),
        ]
    )


if __name__ == "__main__":
    print(run())
