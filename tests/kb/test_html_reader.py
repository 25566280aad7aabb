"""The HTML and Markdown readers keep the text as written: rules checked on small pages of our
own making, shaped like the output of Sphinx, MkDocs (Material, mkdocstrings), pdoc and a
hand-written site (tests/kb/fixtures/html)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragloop.core.text import count_tokens, passage_units
from ragloop.kb.ingest.chunking import ChunkingConfig, chunk_document
from ragloop.kb.readers import Block, ParsedDocument, read_html, read_markdown

FIXTURES = Path(__file__).parent / "fixtures" / "html"


def page(name: str) -> ParsedDocument:
    path = FIXTURES / name
    return read_html(path.read_text(encoding="utf-8"), path)


def headings(doc: ParsedDocument) -> list[tuple[int, str]]:
    return [(b.level, b.text) for b in doc.blocks if b.kind == "heading"]


def chunks_by_text(doc: ParsedDocument) -> dict[str, list[str]]:
    """The heading path of the chunk holding each text block."""
    chunks = chunk_document(doc, ChunkingConfig(min_tokens=0))
    return {
        block.text: next(c.heading_path for c in chunks if block.text in c.text)
        for block in doc.blocks
        if block.kind == "text"
    }


SPHINX_CODE = """# warm the pot first
import kettle

def tea():
    # two litres make eight cups
    return kettle.boil(2)"""


def test_pre_blocks_stay_verbatim_and_their_comments_are_never_headings():
    doc = page("sphinx_api.html")
    code = [b.text for b in doc.blocks if b.meta.get("code")]
    assert code == [SPHINX_CODE]  # indentation, the blank line and both comment lines
    assert all("warm the pot" not in h and "two litres" not in h for _, h in headings(doc))
    (chunk,) = [c for c in chunk_document(doc) if "warm the pot" in c.text]
    assert SPHINX_CODE in chunk.text


def test_sphinx_signatures_head_their_description_and_end_with_it():
    doc = page("sphinx_api.html")
    assert doc.title == "kettle — Boiling water"  # the page's h1, not its <title>
    assert headings(doc) == [
        (1, "kettle — Boiling water"),
        (2, "kettle.boil(litres, *, whistle=True)"),
        (2, "kettle.pour(); kettle.pour(cup)"),  # overloads share one heading
        (2, "class kettle.Kettle"),
        (3, "descale()"),  # a method sits under its class
        (2, "Power levels"),
    ]
    where = chunks_by_text(doc)
    top = "kettle — Boiling water"
    assert where["Boil litres of water and return the time it took."] == [
        top,
        "kettle.boil(litres, *, whistle=True)",
    ]
    assert where["Remove the limescale with citric acid."] == [
        top,
        "class kettle.Kettle",
        "descale()",
    ]
    # after the descriptions, the text is back under the page's own heading
    assert where["Kettles older than 1990 are not supported."] == [top]
    # a field list's terms are text, not headings
    assert where["Raises:"] == [top, "kettle.boil(litres, *, whistle=True)"]


def test_sphinx_page_furniture_is_dropped():
    doc = page("sphinx_api.html")
    text = doc.text
    for gone in ("¶", "never indexed", "genindex", "next |", "Table of Contents", "Copyright",
                 "tracking pixel", "visibility"):  # fmt: skip
        assert gone not in text
    assert "Measured at 230 volts." in text  # a footnote is content, not a sidebar


def test_tables_read_row_by_row_under_their_header():
    doc = page("sphinx_api.html")
    (table,) = [b for b in doc.blocks if "table" in b.meta]
    assert table.text == "Level | Watts\n--- | ---\nLOW | 1200\nHIGH | 3000"
    assert table.meta["table"] == "Level | Watts\n--- | ---"
    # a table without <thead> whose first row is all <th>: that row is the header
    (table,) = [b for b in page("mkdocs_page.html").blocks if "table" in b.meta]
    assert table.text == "Tea | Minutes\n--- | ---\nGreen | 2\nBlack | 4"
    assert table.meta["table"] == "Tea | Minutes\n--- | ---"


# Sphinx's API lists (asyncio-api-index.html): a <colgroup>, a <tbody>, <td> cells only
_SPHINX_LIST = (
    '<table class="docutils"><colgroup><col style="width: 50%" /></colgroup><tbody>'
    '<tr class="row-odd"><td><p><a href="#a"><code>asyncio.CancelledError</code></a></p></td>'
    "<td><p>Raised when a Task is cancelled.</p></td></tr>"
    '<tr class="row-even"><td><p><code>asyncio.BrokenBarrierError</code></p></td>'
    "<td><p>Raised when a Barrier is broken.</p></td></tr></tbody></table>"
)


def test_a_table_without_a_header_row_is_read_as_rows():
    doc = read_html(f"<main><h2>Exceptions</h2>{_SPHINX_LIST}</main>", Path("api.html"))
    (table,) = [b for b in doc.blocks if "table" in b.meta]
    assert table.meta["table"] == ""
    assert table.text == (
        "asyncio.CancelledError | Raised when a Task is cancelled.\n"
        "asyncio.BrokenBarrierError | Raised when a Barrier is broken."
    )
    assert [(u.kind, u.text) for u in passage_units(table.text)] == [
        ("row", "asyncio.CancelledError; Raised when a Task is cancelled."),
        ("row", "asyncio.BrokenBarrierError; Raised when a Barrier is broken."),
    ]
    # <th> cells that are not a whole row head that row, not the table
    mixed = read_html(
        "<table><tr><th>LOW</th><td>1200</td></tr><tr><th>HIGH</th><td>3000</td></tr></table>",
        Path("a.html"),
    )
    assert [(b.text, b.meta) for b in mixed.blocks] == [("LOW | 1200\nHIGH | 3000", {"table": ""})]


_HEADS = {
    "thead": "<thead><tr><td>Name</td><td>Pence</td></tr></thead><tbody>{rows}</tbody>",
    "th row": "<tr><th>Name</th><th>Pence</th></tr>{rows}",
    "none": "<tbody>{rows}</tbody>",
}


@pytest.mark.parametrize("head", list(_HEADS))
def test_a_long_table_repeats_only_a_real_header_in_every_chunk(head):
    rows = "".join(f"<tr><td>ITEM_{i}</td><td>{i * 10}</td></tr>" for i in range(30))
    table = _HEADS[head].format(rows=rows)
    doc = read_html(f"<h1>Prices</h1><table>{table}</table>", Path("a.html"))
    config = ChunkingConfig(max_tokens=40, overlap=8, min_tokens=0)
    chunks = [c for c in chunk_document(doc, config) if "ITEM_" in c.text]
    assert len(chunks) > 1
    header = ["Name | Pence", "--- | ---"] if head != "none" else []
    for chunk in chunks:
        assert chunk.text.split("\n")[: len(header)] == header
        assert count_tokens(chunk.text) <= config.max_tokens
    rows_read = [line for c in chunks for line in c.text.split("\n")[len(header) :]]
    assert rows_read == [f"ITEM_{i} | {i * 10}" for i in range(30)]
    # what the answerer quotes: each row once, with the column names only from a real header
    units = [u.text for c in chunks for u in passage_units(c.text)]
    if head == "none":
        assert units == [f"ITEM_{i}; {i * 10}" for i in range(30)]
    else:
        assert units == [f"Name: ITEM_{i}; Pence: {i * 10}" for i in range(30)]


def test_mkdocs_page_main_content_only():
    doc = page("mkdocs_page.html")
    assert doc.title == "Teapot"
    assert headings(doc) == [(1, "Teapot"), (2, "teapot.steep(minutes=4)"), (2, "Strengths")]
    texts = [b.text for b in doc.blocks if b.kind == "text"]
    assert texts[0] == "Warm the pot,\nthen add the leaves."  # <br> is a line break
    assert "from teapot import steep\n# black tea: four minutes\nsteep(4)" in texts
    assert [t for t in texts if t[:1].isdigit()] == [
        "1. Boil the water.",
        "2. Pour it on the leaves.",
        "3. Wait.",
    ]
    assert "Serve hot." in texts  # an aria-hidden icon is not text
    for gone in ("Skip to content", "Brewing guide", "Home", "Made with MkDocs", "Draft note",
                 "¶"):  # fmt: skip
        assert gone not in doc.text


def test_pdoc_signatures_head_their_docstring_and_hidden_source_is_dropped():
    doc = page("pdoc_module.html")
    assert headings(doc) == [(1, "sugar"), (2, "def stir(spoons: int) -> None:")]
    where = chunks_by_text(doc)
    assert where["Stir in spoons spoonfuls of sugar."] == [
        "sugar",
        "def stir(spoons: int) -> None:",
    ]
    assert where["stir(2)  # two spoons"] == ["sugar", "def stir(spoons: int) -> None:"]
    assert "pass" not in doc.text  # the source shown only on demand
    assert "View Source" not in doc.text
    assert "API Documentation" not in doc.text


def test_plain_page_without_main_drops_site_header_navigation_and_footer():
    doc = page("plain_page.html")
    assert doc.title == "Opening hours"
    assert [b.text for b in doc.blocks if b.kind == "text"] == [
        "We open at 7:30 on weekdays.",  # unclosed <p> and <li> end where the next begins
        "Weekends: 9:00 to 16:00.",
        "- Closed on 25 December.",
        "- Open late on Fridays.",
        "Loose text in a div",
    ]
    assert read_html("<p>plain</p>", Path("notes/tea-times.html")).title == "tea times"
    assert read_html("<title>Tea | Shop</title><p>x</p>", Path("a.html")).title == "Tea | Shop"


def test_inline_markup_adds_no_spaces_and_permalink_signs_go():
    doc = read_html(
        '<main><h2 id="x">Caching<a href="#x">¶</a></h2><p>Use <code>functools.</code>'
        '<code>lru_cache</code>(<em>maxsize</em>=None), see <a href="#y">the notes</a>.</p></main>',
        Path("a.html"),
    )
    assert headings(doc) == [(2, "Caching")]
    assert doc.blocks[1].text == "Use functools.lru_cache(maxsize=None), see the notes."


@pytest.mark.parametrize(
    "markup",
    [
        "<div>" * 3000 + "deep" + "</div>" * 3000,  # nesting
        "<p>para " * 3000,  # paragraphs never closed
        "<ul>" + "<li>item " * 3000 + "</ul>",  # items never closed
        "<b>" * 2000 + "<p>bold</p>" * 2000,  # open inline elements, then blocks
    ],
)
def test_hostile_nesting_reads_every_word(markup: str):
    doc = read_html(markup, Path("a.html"))
    words = doc.text.split()
    assert len(words) >= 1
    assert set(words) <= {"deep", "para", "item", "bold", "-"}


def test_long_code_and_tables_are_cut_between_lines_and_tables_repeat_their_header():
    config = ChunkingConfig(max_tokens=40, overlap=8, min_tokens=0)
    code = "\n".join(f"    total += price_{i}  # item {i}" for i in range(30))
    rows = "\n".join(f"<tr><td>ITEM_{i}</td><td>{i * 10}</td></tr>" for i in range(30))
    doc = read_html(
        f"<h1>Prices</h1><pre>{code}</pre><table><thead><tr><th>Name</th><th>Pence</th></tr>"
        f"</thead><tbody>{rows}</tbody></table>",
        Path("a.html"),
    )
    chunks = chunk_document(doc, config)
    code_lines = code.split("\n")
    code_chunks = [c for c in chunks if "total +=" in c.text]
    table_chunks = [c for c in chunks if "ITEM_" in c.text]
    assert len(code_chunks) > 1
    assert len(table_chunks) > 1
    assert [line for c in code_chunks for line in c.text.split("\n")] == code_lines
    for chunk in table_chunks:
        assert chunk.text.startswith("Name | Pence\n--- | ---\n")
        assert count_tokens(chunk.text) <= config.max_tokens
    assert [line for c in table_chunks for line in c.text.split("\n")[2:]] == [
        f"ITEM_{i} | {i * 10}" for i in range(30)
    ]


def test_markdown_keeps_fenced_code_and_reads_pipe_tables_as_rows():
    doc = read_markdown(
        "# Kettle\n\n```python\n# warm the pot\ndef tea():\n    return 2\n```\n\n"
        "| Level | Watts |\n|---|---:|\n| LOW | 1200 |\n| HIGH | 3000 |\n",
        Path("k.md"),
    )
    assert [(b.kind, b.text, b.meta) for b in doc.blocks] == [
        ("heading", "Kettle", {}),
        ("text", "# warm the pot\ndef tea():\n    return 2", {"code": True}),
        (
            "text",
            "Level | Watts\n--- | ---\nLOW | 1200\nHIGH | 3000",
            {"table": "Level | Watts\n--- | ---"},
        ),
    ]


def test_an_end_block_closes_its_section_in_the_chunker():
    doc = ParsedDocument(
        "T",
        [
            Block("heading", "Guide", 1),
            Block("heading", "f(x)", 2),
            Block("text", "About f."),
            Block("end", "", 2),
            Block("text", "Back in the guide."),
        ],
    )
    chunks = chunk_document(doc, ChunkingConfig(min_tokens=0))
    assert [(c.text, c.heading_path) for c in chunks] == [
        ("About f.", ["Guide", "f(x)"]),
        ("Back in the guide.", ["Guide"]),
    ]
