"""ragloop retrieval-loop QUERY: seed 004's smoke command, the retrieval loop over the knowledge
base (``ragloop agent-loop``, its old name, still runs it).

It runs :meth:`ragloop.RetrievalLoop.offline` (no LLM, no credentials): seed 004 calls its loop
AgentLoopV0, ragloop calls it RetrievalLoop, and the output says so first. Then the run as the
seed's table: the query, the stop reason, the budget used, the cache stats, the final chunks and
one line per iteration.
"""

from __future__ import annotations

import sys

import click

from ragloop import RagloopError, RetrievalLoop, RetrievalResult
from ragloop.cli.common import kb_option, open_kb, print_json, shown_path, text_argument
from ragloop.cli.demo import open_demo
from ragloop.cli.tables import printable
from ragloop.observability import install_json_logging

SHOWN_CHUNKS = 5


def _short(text: str, width: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= width else text[: width - 1] + "…"


def render(result: RetrievalResult) -> str:
    """The seed's table, then the best chunks."""
    spent = result.budget_used
    budget = f"tokens={spent.tokens} wall_ms={spent.wall_ms:.0f} iters={spent.iters}"
    if spent.dollars:
        budget += f" dollars={spent.dollars:.6f}"
    lines = [
        "loop:         RetrievalLoop (offline: hybrid search, entity-bridge refiner, no LLM)",
        f"query:        {result.query!r}",
        f"stop_reason:  {result.stop_reason.value}",
        f"budget_used:  {budget}",
        f"cache_stats:  {result.cache_stats}",
        f"final_chunks: {len(result.chunks)}",
        "iterations:",
    ]
    for it in result.trace:
        query = repr(_short(it.query, 58))
        lines.append(
            f"  #{it.index:<2} q={query:<32} route={it.route:<7} results={it.results_n:<3} "
            f"new={it.new_chunks_n:<3} best={it.best_score:.2f} plan_reused={it.plan_reused!s:<5} "
            f"sticky={it.sticky}"
        )
    if result.chunks:
        lines.append("top chunks:")
        # best first: the loop keeps chunks in the order the hops found them
        best = sorted(result.chunks, key=lambda c: c.score, reverse=True)
        for rank, chunk in enumerate(best[:SHOWN_CHUNKS], 1):
            where = shown_path(chunk.source)
            lines.append(f"  {rank}. {chunk.score:.3f} {where}: {_short(chunk.content, 70)}")
    return printable("\n".join(lines))


@click.command(name="retrieval-loop")
@click.argument("query")
@kb_option
@click.option("--demo", is_flag=True, help="Use the demo knowledge base (built on first use).")
@click.option(
    "--max-iterations",
    "--max-iter",
    "max_iter",
    type=click.IntRange(1, 50),
    default=5,
    show_default=True,
    help="Iterations at most (--max-iter, seed 004's spelling, works too).",
)
@click.option(
    "--sub-query",
    "sub_queries",
    multiple=True,
    help="Query of the next iteration, before any refinement (repeatable, in order).",
)
@click.option(
    "--min-new-chunks",
    type=click.IntRange(0),
    default=2,
    show_default=True,
    help="Stop when an iteration adds fewer new chunks (0: never).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option("--log-json", is_flag=True, help="Log the loop's events to stderr as JSON lines.")
def retrieval_loop(
    query: str,
    kb_location: str | None,
    demo: bool,
    max_iter: int,
    sub_queries: tuple[str, ...],
    min_new_chunks: int,
    as_json: bool,
    log_json: bool,
) -> None:
    """Gather evidence for QUERY with the retrieval loop (offline, no LLM).

    QUERY "-" reads the query from standard input."""
    query = text_argument(query, "query")
    if log_json:
        install_json_logging(sys.stderr)
    if kb_location is not None and demo:
        raise click.UsageError("--kb and --demo name two knowledge bases; give one")
    kb = open_demo() if demo else open_kb(kb_location, create=False)
    try:
        loop = RetrievalLoop.offline(
            kb, max_iterations=max_iter, min_new_chunks_per_iter=min_new_chunks
        )
        result = loop.run(query, sub_queries=list(sub_queries) or None)
    except (RagloopError, ValueError) as error:
        raise click.ClickException(str(error)) from None
    finally:
        kb.close()
    if as_json:
        print_json(result.model_dump(mode="json"))
    else:
        click.echo(render(result))
