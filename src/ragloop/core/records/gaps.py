"""The evidence behind an answer that is not confident: what was found, what was not, what came
closest and what was searched (``result.gaps`` on every answering engine's result)."""

from __future__ import annotations

from pydantic import BaseModel, Field

QUOTE_CHARS = 160  # how much of a chunk a part quotes
CLOSEST_CHARS = 400  # how much of its passage a near miss quotes
LINE_PARTS = 3  # parts named in the one-line summary, each side
# what an answer that is not confident says first, in every front end (ask, the page, the
# HTTP API, the OpenAI route, MCP)
NOT_SURE = "No sure answer was found in the documents."
CLOSEST_LEAD = "The closest passages, best first:"


def _short(text: str, limit: int = 60) -> str:
    text = " ".join(text.split()).rstrip("?")
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


class GapPart(BaseModel):
    """One part of the question (the whole question when it has one part): whether the
    evidence covers it, and where. ``chunk_id``, ``source`` and ``quote`` name the chunk and the
    sentence that cover it (or, for a part not found, are empty)."""

    part: str
    found: bool
    chunk_id: str | None = None
    source: str | None = None
    quote: str | None = None


class NearMiss(BaseModel):
    """A chunk that came close: retrieved for the question, but not enough to answer it.
    ``text`` quotes the part of it that comes closest (its best sentence, when the evaluator
    can tell), ``heading`` the section that sits under; ``score`` is how close it came, in
    [0, 1] (the evaluator's reading of its best sentence, else its retrieval relevance);
    ``query`` the search that found it."""

    chunk_id: str
    source: str
    score: float = Field(ge=0.0, le=1.0)
    text: str
    query: str = ""
    heading: str | None = None


class EvidenceGaps(BaseModel):
    """Why an answer is not confident, in terms a person can act on.

    - ``parts``: each part of the question (as the judge or the decomposition split it) with
      the chunk that covers it, or not found;
    - ``missing_terms``: words of the question that no retrieved chunk contains;
    - ``nearest``: the best chunks that were retrieved, with their scores and sources;
    - ``searches``: every search the run made, in order;
    - ``probability``: the calibrated chance that the answer is right, and ``target`` the
      precision it had to reach (None when the run had none).
    """

    parts: list[GapPart] = Field(default_factory=list)
    missing_terms: list[str] = Field(default_factory=list)
    nearest: list[NearMiss] = Field(default_factory=list)
    searches: list[str] = Field(default_factory=list)
    probability: float | None = Field(default=None, ge=0.0, le=1.0)
    target: float | None = Field(default=None, ge=0.0, le=1.0)

    @property
    def found(self) -> list[GapPart]:
        return [p for p in self.parts if p.found]

    @property
    def not_found(self) -> list[GapPart]:
        return [p for p in self.parts if not p.found]

    def evidence_text(self) -> str:
        """What an answer that is not confident shows: that no sure answer was found, what
        was found of a question of several parts and what was not (with the sentence found for
        each part found), then the closest passages, best first, each with its source and
        section (Markdown lists)."""
        lines = [NOT_SURE]
        if self.found and self.not_found:
            lines.append(self.line())
            quoted = [
                f'- {_short(p.part.rstrip("?"))}: "{" ".join(p.quote.split())}" ({p.source})'
                for p in self.found
                if p.quote and p.source
            ]
            lines += ["", *quoted] if quoted else []
        if self.nearest:
            lines += ["", CLOSEST_LEAD]
            for n, miss in enumerate(self.nearest, 1):
                where = miss.source + (f", {miss.heading}" if miss.heading else "")
                lines.append(f"{n}. {' '.join(miss.text.split())} ({where})")
        return "\n".join(lines)

    def line(self) -> str:
        """One short line for chat clients: ``Found: ...; not found: ...``."""

        def named(parts: list[GapPart]) -> str:
            shown = "; ".join(f"'{_short(p.part)}'" for p in parts[:LINE_PARTS])
            more = len(parts) - LINE_PARTS
            return shown + (f" and {more} more" if more > 0 else "")

        pieces = []
        if self.found:
            where = self.found[0].source
            pieces.append(f"Found: {named(self.found)}" + (f" (in {where})" if where else ""))
        if self.not_found:
            pieces.append(f"not found: {named(self.not_found)}")
        if self.missing_terms and not self.found:
            terms = ", ".join(f"'{t}'" for t in self.missing_terms[:LINE_PARTS])
            pieces.append(f"no document mentions {terms}")
        if not pieces:
            return ""
        text = "; ".join(pieces)
        return text[0].upper() + text[1:] + "."


def shown_answer(answer: str | None, confident: bool, gaps: EvidenceGaps | None) -> str:
    """An answer as every front end shows it: a confident one as it is; one that is not
    confident evidence first (:meth:`EvidenceGaps.evidence_text`), never the best attempt
    dressed as an answer."""
    if confident or gaps is None:
        return answer or ""
    return gaps.evidence_text()
