"""HTML to blocks in one pass over the markup (the standard library's ``HTMLParser``).

What a reader of the page sees is kept as written; what surrounds it is dropped:

- only the page's main content when it marks one (``role="main"``, else ``<main>``, else its
  ``<article>`` elements); scripts, styles, forms, navigation, sidebars, footers, permalink signs
  (``¶`` anchors) and hidden elements (``hidden``, ``aria-hidden="true"``, ``display: none``)
  never reach the text;
- ``<pre>`` blocks verbatim: indentation, blank lines and ``#`` comment lines are code, never
  headings;
- API signatures become the heading of their description: a Sphinx or pdoc3 ``<dt>`` (one with
  an anchor or Sphinx's ``sig`` class) and pdoc's ``div.attr``; the heading ends with its
  description list or section, so the text after it is back under the page's own heading;
  overloads (several signatures for one description) share one heading;
- tables row by row, cells joined by `` | ``; a table's header row is one inside ``<thead>``
  or, without one, a first row made only of ``<th>`` cells: it comes first, with a markdown
  rule (``--- | ---``) under it that says it is the header, and the chunker repeats both when
  the table spans several chunks. A table without such a row (Sphinx writes none for its
  two-column API lists) has no header: its first row is a row like the others and nothing
  is repeated;
- list items start with ``- `` (``1. `` in an ordered list).

Inline markup adds no spaces (``<code>lru_cache</code>()`` reads ``lru_cache()``), as the page
shows it. The parser keeps a stack of open elements and closes those HTML lets a page leave
open (``<p>``, ``<li>``, ``<dt>``, ``<td>``...) looking a bounded depth down, so its time grows
with the length of the page.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path

from ragloop.kb.readers.blocks import Block, ParsedDocument, table_header, title_from_name

_VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())
# elements whose whole content is dropped
_SKIPPED = frozenset(
    "script style noscript template svg iframe canvas object embed audio video button select "
    "textarea form nav footer dialog".split()
)
# dropped only when the page marks no main content: then they are the site's, not the text's
_SKIPPED_OUTSIDE_CONTENT = frozenset({"header", "aside"})
_SKIPPED_ROLES = frozenset(
    "navigation banner contentinfo search complementary menu menubar toolbar".split()
)
# page furniture that documentation generators put inside the content
_SKIPPED_CLASSES = frozenset(
    "headerlink sphinxsidebar related breadcrumb breadcrumbs md-sidebar md-header md-footer "
    "md-nav skip-link view-source-button viewcode-link anchorjs-link header-anchor "
    "heading-anchor".split()
)
_PERMALINK_SIGNS = frozenset({"", "¶", "#", "§", "🔗"})
_BLOCKS = frozenset(
    "p div section article main header aside blockquote figure figcaption ul ol li dl dt dd "
    "address details summary hr center fieldset legend body html h1 h2 h3 h4 h5 h6 pre table "
    "caption thead tbody tfoot tr td th".split()
)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}
_CELLS = frozenset({"td", "th"})
_TABLE_SECTIONS = frozenset({"thead", "tbody", "tfoot"})
# a start tag closes these open elements, looking no deeper than its boundary tags
_CLOSES: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "li": (frozenset({"li"}), frozenset({"ul", "ol", "menu"})),
    "dt": (frozenset({"dt", "dd"}), frozenset({"dl"})),
    "dd": (frozenset({"dt", "dd"}), frozenset({"dl"})),
    "tr": (frozenset({"tr", "td", "th"}), frozenset({"table"}) | _TABLE_SECTIONS),
    "td": (_CELLS, frozenset({"tr", "table"})),
    "th": (_CELLS, frozenset({"tr", "table"})),
    **dict.fromkeys(_TABLE_SECTIONS, (_TABLE_SECTIONS | {"tr", "td", "th"}, frozenset({"table"}))),
}
_OPEN_P = (frozenset({"p"}), _BLOCKS)  # any block start closes an open paragraph
_SCAN_LIMIT = 12  # how deep an implied close looks: bounded, so no page makes it quadratic
_SPACES = re.compile(r"[^\S\n]+")
_INVISIBLE = str.maketrans("", "", "\u00ad\u200b\u200c\u200d\ufeff")
_HIDDEN_STYLE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
_MAIN_ROLE = re.compile(r"<[a-z][^>]*\srole\s*=\s*[\"']?main\b", re.IGNORECASE)
_MAIN_TAG = re.compile(r"<main[\s>]", re.IGNORECASE)
_ARTICLE_TAG = re.compile(r"<article[\s>]", re.IGNORECASE)


@dataclass
class _Open:
    """An open element, and what closing it must undo."""

    tag: str
    level: int  # the heading level in force when it opened
    skip: bool = False
    content: bool = False  # the page's main content
    signature: bool = False  # an API signature: its text becomes a heading
    section_level: int = 0  # the level of the signature heading it holds, ended with it
    link_mark: tuple[int, int] | None = None  # (flushes, buffer length) at a same-page anchor
    items: int = 0  # an ordered list's items so far


@dataclass
class _Table:
    rows: list[list[str]] = field(default_factory=list)
    all_th: list[bool] = field(default_factory=list)  # per row: only <th> cells
    header: list[str] | None = None
    caption: str = ""
    in_head: bool = False
    cell: list[str] | None = None


class _PageParser(HTMLParser):
    def __init__(self, content_rule: str) -> None:
        super().__init__(convert_charrefs=True)
        self.content_rule = content_rule  # "role", "main", "article" or "all"
        self.stack: list[_Open] = []
        self.open_counts: dict[str, int] = {}
        self.skipping = 0
        self.in_content = 1 if content_rule == "all" else 0
        self.blocks: list[Block] = []
        self.levels: list[int] = []  # heading levels in force
        self.buffer: list[str] = []  # inline text of the paragraph (or heading) being read
        self.flushes = 0
        self.prefix = ""  # a list item's marker, for its first paragraph
        self.pre = 0
        self.pre_text: list[str] = []
        self.table: _Table | None = None
        self.table_depth = 0
        self.heading = 0
        self.signatures: list[str] = []  # signatures read, waiting for their description
        self.signature_level = 0
        self.title: list[str] = []
        self.title_state = "before"  # "before", "in", "done"

    # -- the element stack ---------------------------------------------------------------------
    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title":
            if self.title_state == "before" and not self.skipping:
                self.title_state = "in"
            return
        if tag in _CLOSES:
            self._close_implied(*_CLOSES[tag])
        elif tag in _BLOCKS and not self.pre:
            self._close_implied(*_OPEN_P)
        active = not self.skipping and self.in_content
        if active and tag in _BLOCKS and tag != "dt" and not self.pre:
            self._emit_signatures()  # the description starts: its signature is its heading
        if tag in _VOID:
            if active:
                self._void(tag)
            return
        attributes = {name: value or "" for name, value in attrs}
        entry = _Open(tag, self.levels[-1] if self.levels else 0)
        entry.content = self._is_content(tag, attributes)
        entry.skip = not entry.content and self._is_skipped(tag, attributes)
        self.stack.append(entry)
        self.open_counts[tag] = self.open_counts.get(tag, 0) + 1
        self.in_content += entry.content
        self.skipping += entry.skip
        if not self.skipping and self.in_content:
            self._open(entry, attributes)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.handle_starttag(tag, attrs)
        if tag not in _VOID:
            self.handle_endtag(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title":
            if self.title_state == "in":
                self.title_state = "done"
            return
        if not self.open_counts.get(tag):
            return  # a stray end tag
        while self.stack and self._pop().tag != tag:
            pass

    def _close_implied(self, closed: frozenset[str], boundary: frozenset[str]) -> None:
        for depth in range(1, min(len(self.stack), _SCAN_LIMIT) + 1):
            tag = self.stack[-depth].tag
            if tag in closed:
                for _ in range(depth):
                    self._pop()
                return
            if tag in boundary:
                return

    def _pop(self) -> _Open:
        entry = self.stack.pop()
        self.open_counts[entry.tag] -= 1
        if not self.skipping and self.in_content:
            self._close(entry)
        self.skipping -= entry.skip
        self.in_content -= entry.content
        return entry

    def _is_content(self, tag: str, attributes: dict[str, str]) -> bool:
        if self.content_rule == "role":
            return attributes.get("role", "").lower() == "main"
        return tag == self.content_rule

    def _is_skipped(self, tag: str, attributes: dict[str, str]) -> bool:
        if tag in _SKIPPED or (tag in _SKIPPED_OUTSIDE_CONTENT and self.content_rule == "all"):
            return True
        if "hidden" in attributes or attributes.get("aria-hidden", "").lower() == "true":
            return True
        if attributes.get("role", "").lower() in _SKIPPED_ROLES:
            return True
        if _HIDDEN_STYLE.search(attributes.get("style", "")):
            return True
        classes = attributes.get("class", "").split()
        if any(c in _SKIPPED_CLASSES for c in classes):
            return True
        # pdoc: a function's source, shown only on demand, sits right in the function's section
        return "pdoc-code" in classes and bool(self.stack) and self.stack[-1].tag == "section"

    # -- opening and closing elements ----------------------------------------------------------
    def _open(self, entry: _Open, attributes: dict[str, str]) -> None:
        tag = entry.tag
        if tag == "a" and attributes.get("href", "").startswith("#"):
            entry.link_mark = (self.flushes, len(self.buffer))
        if self.pre:
            return
        if self.table is not None:
            self._open_in_table(tag)
            return
        if tag in _BLOCKS:
            self._flush()
        parent = self.stack[-2] if len(self.stack) > 1 else None
        if tag in _HEADINGS:
            self.heading = _HEADINGS[tag]
        elif tag == "pre":
            self.pre = 1
        elif tag == "table":
            self.table = _Table()
            self.table_depth = 1
        elif tag == "ol":
            start = attributes.get("start", "1")
            entry.items = int(start) - 1 if start.isdigit() else 0
        elif tag == "li":
            if parent is not None and parent.tag == "ol":
                parent.items += 1
                self.prefix = f"{parent.items}. "
            else:
                self.prefix = "- "
        elif _is_signature(tag, attributes) and parent is not None:
            entry.signature = True
            parent.section_level = parent.level + 1
            self.signature_level = parent.section_level

    def _close(self, entry: _Open) -> None:
        tag = entry.tag
        if entry.link_mark is not None and entry.link_mark[0] == self.flushes:
            mark = entry.link_mark[1]
            if "".join(self.buffer[mark:]).strip() in _PERMALINK_SIGNS:
                del self.buffer[mark:]
        if self.pre:
            if tag == "pre":
                self.pre = 0
                self._emit_code()
            return
        if self.table is not None:
            self._close_in_table(tag)
            return
        if entry.signature:
            text = self._take().replace("\n", " ")
            if text:
                self.signatures.append(text)
        elif tag in _HEADINGS and self.heading:
            self._emit_heading()
        elif tag in _BLOCKS:
            self._flush()
        if tag == "li":
            self.prefix = ""
        if entry.section_level:
            self._emit_signatures()
            self._end_section(entry.section_level)

    def _void(self, tag: str) -> None:
        if tag == "br":
            if self.pre:
                self.pre_text.append("\n")
            elif self.table is not None:
                if self.table.cell is not None:
                    self.table.cell.append(" ")
            else:
                self.buffer.append("\n")
        elif tag == "hr" and not self.pre and self.table is None:
            self._flush()

    # -- text --------------------------------------------------------------------------------
    def handle_data(self, data: str) -> None:
        if self.title_state == "in":
            self.title.append(data)
        elif self.skipping or not self.in_content:
            return
        elif self.pre:
            self.pre_text.append(data)
        elif self.table is not None:
            if self.table.cell is not None:  # text between rows is only layout
                self.table.cell.append(data)
        else:
            self.buffer.append(data.replace("\n", " "))

    def _take(self) -> str:
        text = _inline("".join(self.buffer))
        self.buffer.clear()
        self.flushes += 1
        return text

    def _flush(self) -> None:
        text = self._take()
        if text:
            self._emit_signatures()
            self.blocks.append(Block("text", self.prefix + text))
            self.prefix = ""

    def _emit_heading(self) -> None:
        level, self.heading = self.heading, 0
        text = self._take().replace("\n", " ").rstrip(" ¶")
        if text:
            self._emit_signatures()
            self._push_heading(level, text)

    def _push_heading(self, level: int, text: str) -> None:
        while self.levels and self.levels[-1] >= level:
            self.levels.pop()
        self.levels.append(level)
        self.blocks.append(Block("heading", text, level))

    def _emit_signatures(self) -> None:
        if self.signatures:
            self._push_heading(self.signature_level, "; ".join(self.signatures))
            self.signatures = []

    def _end_section(self, level: int) -> None:
        if self.levels and self.levels[-1] >= level:
            while self.levels and self.levels[-1] >= level:
                self.levels.pop()
            self.blocks.append(Block("end", "", level))

    def _emit_code(self) -> None:
        code = "".join(self.pre_text).translate(_INVISIBLE).replace("\r", "")
        self.pre_text.clear()
        lines = [line.rstrip() for line in code.split("\n")]
        while lines and not lines[0]:
            lines.pop(0)
        while lines and not lines[-1]:
            lines.pop()
        if lines:
            self._emit_signatures()
            self.blocks.append(Block("text", "\n".join(lines), meta={"code": True}))
            self.prefix = ""

    # -- tables --------------------------------------------------------------------------------
    def _open_in_table(self, tag: str) -> None:
        table = self.table
        assert table is not None
        if tag == "table":
            self.table_depth += 1
        if self.table_depth > 1 or tag not in ("tr", "caption", *_CELLS, *_TABLE_SECTIONS):
            if table.cell is not None and tag in _BLOCKS:  # a block (or table) in a cell
                table.cell.append(" ")
        elif tag in _TABLE_SECTIONS:
            table.in_head = tag == "thead"
        elif tag == "tr":
            table.rows.append([])
            table.all_th.append(True)
        elif tag == "caption":
            table.cell = []
        else:
            if not table.rows:
                table.rows.append([])
                table.all_th.append(True)
            table.all_th[-1] = table.all_th[-1] and tag == "th"
            table.cell = []

    def _close_in_table(self, tag: str) -> None:
        table = self.table
        assert table is not None
        if tag == "table":
            self.table_depth -= 1
            if not self.table_depth:
                self._emit_table(table)
        elif self.table_depth > 1 or tag not in ("tr", "caption", *_CELLS):
            if table.cell is not None and tag in _BLOCKS:
                table.cell.append(" ")
        elif tag == "tr":
            if table.in_head and table.header is None and table.rows:
                table.header = table.rows.pop()
                table.all_th.pop()
        elif table.cell is not None:
            text = _inline("".join(table.cell)).replace("\n", " ")
            table.cell = None
            if tag == "caption":
                table.caption = text
            else:
                table.rows[-1].append(text)

    def _emit_table(self, table: _Table) -> None:
        self.table = None
        if table.header is None and table.rows and table.all_th[0] and len(table.rows) > 1:
            table.header = table.rows.pop(0)
        if table.caption:
            self.blocks.append(Block("text", table.caption))
        lines = [" | ".join(row) for row in table.rows if any(row)]
        header = ""
        if table.header and any(table.header):
            header = table_header(table.header)
        if lines or header:
            self._emit_signatures()
            text = "\n".join([header, *lines] if header else lines)
            self.blocks.append(Block("text", text, meta={"table": header}))

    def close(self) -> None:
        super().close()
        while self.stack:
            self._pop()
        self._flush()
        self._emit_signatures()


def _is_signature(tag: str, attributes: dict[str, str]) -> bool:
    classes = attributes.get("class", "").split()
    if tag == "dt":
        return "sig" in classes or bool(attributes.get("id"))
    return tag == "div" and "attr" in classes  # pdoc


def _inline(text: str) -> str:
    """Runs of spaces collapsed (the line breaks of ``<br>`` kept), invisible characters gone."""
    text = _SPACES.sub(" ", text.translate(_INVISIBLE))
    if "\n" in text:
        text = "\n".join(line.strip() for line in text.split("\n") if line.strip())
    return text.strip()


def read_html(text: str, path: Path) -> ParsedDocument:
    """The page's title (its first ``<h1>``, else ``<title>``, else the file name) and the
    blocks of its main content; the module docstring says what is kept."""
    if _MAIN_ROLE.search(text):
        rule = "role"
    elif _MAIN_TAG.search(text):
        rule = "main"
    elif _ARTICLE_TAG.search(text):
        rule = "article"
    else:
        rule = "all"
    parser = _PageParser(rule)
    parser.feed(text)
    parser.close()
    blocks = parser.blocks
    first_h1 = next((b.text for b in blocks if b.kind == "heading" and b.level == 1), None)
    page_title = " ".join("".join(parser.title).split())
    return ParsedDocument(first_h1 or page_title or title_from_name(path), blocks)
