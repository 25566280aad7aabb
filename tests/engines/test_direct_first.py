"""RetrievalLoopConfig(direct_first=True): a hop never pushes the question's own results down."""

from __future__ import annotations

from ragloop import Chunk, RetrievalLoop, RetrievalLoopConfig


def chunk(name: str) -> Chunk:
    return Chunk(content=f"text of {name}", source=name, score=0.5, id=name)


class Searches:
    """A retriever whose rankings are given per query, with a link graph: ``links`` maps a
    chunk id to the chunks it names (what ``KnowledgeBase.linked_chunks`` returns)."""

    def __init__(self, rankings: dict[str, list[str]], links: dict[str, list[str]]) -> None:
        self.rankings = rankings
        self.links = links
        self.kb = self

    def retrieve(self, query: str, top_k: int = 5) -> list[Chunk]:
        return [chunk(name) for name in self.rankings.get(query, [])][:top_k]

    def linked_chunks(self, ids, *, limit=10, collection=None, filters=None) -> list[Chunk]:
        return [chunk(name) for i in ids for name in self.links.get(i, [])][:limit]


def run(
    direct_first: bool,
    hop: list[str] | None = None,
    links: dict[str, list[str]] | None = None,
) -> list[str]:
    searches = Searches(
        {"question": ["a", "b", "c", "d"], "hop": hop or ["e", "c", "f"]},
        links or {"a": ["x", "d"]},  # the top chunk names x (new) and d (found, 4th)
    )
    loop = RetrievalLoop(
        searches,
        config=RetrievalLoopConfig(
            max_iterations=2,
            min_new_chunks_per_iter=0,
            top_k=4,
            follow_links=1,
            direct_first=direct_first,
        ),
    )
    result = loop.run("question", refine_query=lambda question, history, index: "hop")
    return [c.id for c in result.chunks]


def test_hops_rank_after_the_questions_own_results_and_move_up_what_it_found():
    # d, named by the top chunk, moves up to just below it; c, found again by the second search
    # at its 2nd place, keeps its own better rank; x, e and f, found only by hops, come after
    assert run(direct_first=True) == ["a", "d", "b", "c", "x", "e", "f"]


def test_without_direct_first_hops_interleave_with_the_questions_results():
    # x (a link) and e (the second search's top) both go above b, the question's 2nd result
    assert run(direct_first=False) == ["a", "d", "x", "e", "b", "c", "f"]


def test_a_chunk_only_links_name_stays_after_the_questions_results_however_often_named():
    # x is named by the question's top chunk and again by the second search's top chunk: two
    # links, no search found it, so it does not pass b, c and d (it used to move up to 2nd)
    links = {"a": ["x"], "e": ["x"]}
    ranked = run(direct_first=True, hop=["e", "f"], links=links)
    assert ranked == ["a", "b", "c", "d", "x", "e", "f"]


def test_a_chunk_a_link_names_and_the_next_search_finds_moves_up():
    # the bridge: x, named by the top chunk, is the second search's top result: two routes agree
    links = {"a": ["x"]}
    assert run(direct_first=True, hop=["x", "e"], links=links) == ["a", "x", "b", "c", "d", "e"]
