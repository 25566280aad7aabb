"""Every rule of seed 001 (Arcana.Loop) that AgentLoop keeps, with scripted controllers."""

from __future__ import annotations

import pytest

from ragloop import (
    AgentLoop,
    Chunk,
    ConfigError,
    Message,
    ModelResponse,
    StopReason,
    Tool,
    ToolCall,
)
from ragloop.testing import FunctionModel, InMemoryRetriever, ScriptedModel
from tests.helpers import (
    CollectionSearch,
    answer_call,
    give_up_call,
    raising,
    search_call,
    turn,
)

Q = "When are refunds issued?"
DOCS = {
    "returns.md": "Refunds are issued within 30 days of purchase.",
    "shipping.md": "International orders ship within 10 days.",
    "faq.md": "Refunds for international orders take longer.",
}


def kb() -> InMemoryRetriever:
    return InMemoryRetriever(DOCS)


def agent(replies, search=None, **options) -> tuple[AgentLoop, ScriptedModel]:
    controller = ScriptedModel(replies)
    return AgentLoop(controller, search if search is not None else kb(), **options), controller


def tool_results(result) -> list[str]:
    return [m.content for m in result.messages if m.role == "tool"]


# -- terminations ------------------------------------------------------------------------------


def test_the_answer_tool_ends_the_run_answered():
    loop, controller = agent([turn(search_call("refunds")), turn(answer_call("Within 30 days."))])
    result = loop.run(Q)
    assert result.stop_reason == StopReason.ANSWERED
    assert result.terminated_by is result.stop_reason
    assert result.answer == "Within 30 days."
    assert result.iterations == 2
    assert result.error is None
    assert result.tool_history[-1].tool == "answer"
    assert result.tool_history[-1].summary == "Answered."
    assert len(controller.calls) == 2


def test_a_text_reply_without_tool_calls_is_the_answer():
    loop, _ = agent([turn(search_call("refunds")), ModelResponse(text="Thirty days.")])
    result = loop.run(Q)
    assert result.stop_reason == StopReason.ANSWERED
    assert result.answer == "Thirty days."
    assert result.iterations == 2


def test_give_up_ends_the_run_with_could_not_answer():
    loop, _ = agent([turn(search_call("warranty")), turn(give_up_call("no warranty docs"))])
    result = loop.run("What is the warranty?")
    assert result.stop_reason == StopReason.GAVE_UP
    assert result.answer == "Could not answer: no warranty docs"
    assert result.tool_history[-1].summary == "Gave up: Could not answer: no warranty docs"


def test_max_iterations_then_one_toolless_synthesis_recorded_in_the_history():
    replies = [turn(search_call("refunds")), turn(search_call("purchase")), "Synthesized answer."]
    loop, controller = agent(replies, max_iterations=2)
    result = loop.run(Q)
    assert result.stop_reason == StopReason.MAX_ITERATIONS
    assert result.iterations == 2
    assert result.answer == "Synthesized answer."
    synthesis = controller.calls[-1]
    assert synthesis.tools is None
    assert "search budget is used up" in synthesis.messages[-1].content
    entry = result.tool_history[-1]
    assert entry.tool == "synthesis"
    assert entry.args == {"text": "Synthesized answer."}
    assert entry.summary == f"Synthesized from {len(result.shown_chunks)} chunks"
    assert result.messages[-1] == Message(role="assistant", content="Synthesized answer.")


def test_no_synthesis_without_chunks_or_when_disabled():
    loop, controller = agent([turn(search_call("zebra"))], max_iterations=1)
    result = loop.run(Q)
    assert result.stop_reason == StopReason.MAX_ITERATIONS
    assert result.answer is None
    assert len(controller.calls) == 1

    loop, controller = agent(
        [turn(search_call("refunds"))], max_iterations=1, fallback_synthesis=False
    )
    result = loop.run(Q)
    assert result.chunks
    assert result.answer is None
    assert len(controller.calls) == 1


def test_the_synthesizer_overrides_the_synthesis_call():
    seen = []

    def synthesizer(messages):
        seen.append(messages)
        return "from the synthesizer"

    answerer = ScriptedModel([])
    loop, controller = agent(
        [turn(search_call("refunds"))], max_iterations=1, synthesizer=synthesizer, answerer=answerer
    )
    result = loop.run(Q)
    assert result.answer == "from the synthesizer"
    assert len(controller.calls) == 1
    assert answerer.calls == []
    assert seen[0][0].role == "system"
    assert "search budget is used up" in seen[0][-1].content


def test_a_failed_synthesis_leaves_no_answer_and_says_why():
    loop, _ = agent([turn(search_call("refunds")), RuntimeError("provider down")], max_iterations=1)
    result = loop.run(Q)
    assert result.stop_reason == StopReason.MAX_ITERATIONS
    assert result.answer is None
    assert result.error == "fallback synthesis failed: RuntimeError: provider down"
    assert [e.tool for e in result.tool_history] == ["search"]


def test_a_failing_controller_ends_with_error_recorded_not_raised():
    loop, _ = agent([turn(search_call("refunds")), TimeoutError("model timed out")])
    result = loop.run(Q)
    assert result.stop_reason == StopReason.ERROR
    assert result.error == "controller failed in turn 1: TimeoutError: model timed out"
    assert result.iterations == 2
    assert result.answer is None  # no synthesis by the controller that just failed


def test_an_empty_controller_reply_is_an_error():
    loop, _ = agent([ModelResponse()])
    result = loop.run(Q)
    assert result.stop_reason == StopReason.ERROR
    assert "neither text nor tool calls" in result.error


# -- the search tool ---------------------------------------------------------------------------


def test_search_shows_full_text_of_top_five_with_ids():
    chunks = [Chunk(content=f"text {i} <b>", source=f"s{i}", score=0.5) for i in range(7)]

    def search(query, *, limit):
        return chunks[:limit]

    loop, _ = agent([turn(search_call("x", limit=7)), turn(answer_call("a"))], search=search)
    result = loop.run(Q)
    text = tool_results(result)[0]
    lines = text.split("\n\n")
    assert lines[0] == "Found 7 chunks. Top 5:"
    assert lines[1] == f"1. [{chunks[0].id}] (score 0.500)\n<chunk>text 0 &lt;b&gt;</chunk>"
    assert len(lines) == 6
    assert result.tool_history[0].summary == text
    assert result.tool_history[0].returned_chunk_ids == [c.id for c in chunks]


def test_search_without_results_says_no_results():
    loop, _ = agent([turn(search_call("zebra")), turn(give_up_call("none"))])
    assert tool_results(loop.run(Q))[0] == "No results."


@pytest.mark.parametrize(("limit", "expected"), [(None, 5), (0, 1), (-3, 1), (500, 100), ("7", 7)])
def test_limit_defaults_to_five_and_is_clamped(limit, expected):
    search = CollectionSearch({"docs": ["refunds"]})
    args = {} if limit is None else {"limit": limit}
    loop, _ = agent([turn(search_call("refunds", **args)), turn(answer_call("a"))], search=search)
    loop.run(Q)
    assert search.calls[0]["limit"] == expected


def test_a_retriever_gets_the_limit_as_top_k():
    retriever = kb()
    loop, _ = agent([turn(search_call("refunds", limit=2)), turn(answer_call("a"))], retriever)
    loop.run(Q)
    assert retriever.calls == [("refunds", 2)]


@pytest.mark.parametrize(
    ("arguments", "summary"),
    [
        ({}, "search error: missing query argument"),
        ({"query": "   "}, "search error: the query is empty"),
        ({"query": 42}, "search error: bad arguments (query: Input should be a valid string)"),
        ({"query": "x", "limit": "many"}, "search error: bad arguments (limit: "),
    ],
)
def test_bad_search_arguments_are_tool_errors_and_the_loop_goes_on(arguments, summary):
    search = CollectionSearch({"docs": ["refunds"]})
    bad = ToolCall(name="search", arguments=arguments)
    loop, controller = agent([turn(bad), turn(answer_call("a"))], search=search)
    result = loop.run(Q)
    assert result.stop_reason == StopReason.ANSWERED
    assert result.tool_history[0].summary.startswith(summary)
    assert search.calls == []
    assert controller.calls[1].messages[-1].content == result.tool_history[0].summary


def test_a_search_that_raises_is_a_tool_error():
    search = raising(RuntimeError("index offline"))
    loop, _ = agent([turn(search_call("refunds")), turn(give_up_call("down"))], search=search)
    result = loop.run(Q)
    assert result.stop_reason == StopReason.GAVE_UP
    assert result.tool_history[0].summary == "search error: RuntimeError: index offline"


def test_a_search_returning_no_chunks_list_is_a_tool_error():
    loop, _ = agent(
        [turn(search_call("x")), turn(answer_call("a"))], search=lambda q, *, limit: "x"
    )
    summary = loop.run(Q).tool_history[0].summary
    assert summary.startswith("search error: ComponentError: search returned str")


def test_an_unknown_tool_is_reported_to_the_controller():
    loop, _ = agent([turn(ToolCall(name="web", arguments={})), turn(answer_call("a"))])
    result = loop.run(Q)
    assert result.tool_history[0].summary == "Unknown tool: web"
    assert result.stop_reason == StopReason.ANSWERED


def test_answer_without_text_is_a_tool_error_not_an_answer():
    loop, _ = agent([turn(ToolCall(name="answer", arguments={})), turn(answer_call("ok"))])
    result = loop.run(Q)
    assert result.tool_history[0].summary == "answer error: missing text argument"
    assert result.answer == "ok"
    assert result.iterations == 2


# -- custom tools ------------------------------------------------------------------------------


def test_custom_tools_run_their_callback_and_continue_the_loop():
    received = []

    def lookup(arguments):
        received.append(arguments)
        return "order 7 shipped"

    async def clock(arguments):
        return "it is noon"

    tools = [
        Tool(name="lookup", description="Look up an order.", callback=lookup),
        Tool(name="clock", description="The time.", callback=clock),
    ]
    calls = [ToolCall(name="lookup", arguments={"order": 7}), ToolCall(name="clock")]
    loop, controller = agent([turn(*calls), turn(answer_call("shipped"))], tools=tools)
    result = loop.run(Q)
    assert [t.name for t in loop.tools] == ["search", "answer", "give_up", "lookup", "clock"]
    assert controller.calls[0].tools == loop.tools
    assert received == [{"order": 7}]
    assert [e.summary for e in result.tool_history[:2]] == ["order 7 shipped", "it is noon"]
    assert result.stop_reason == StopReason.ANSWERED


def test_custom_tool_failures_become_tool_results():
    tools = [
        Tool(name="broken", description="d", callback=raising(ValueError("bad input"))),
        Tool(name="odd", description="d", callback=lambda arguments: 42),
    ]
    calls = [ToolCall(name="broken"), ToolCall(name="odd")]
    loop, _ = agent([turn(*calls), turn(answer_call("a"))], tools=tools)
    result = loop.run(Q)
    assert result.tool_history[0].summary == "Tool error: ValueError: bad input"
    assert result.tool_history[1].summary == "Tool returned unexpected value: 42"


def test_custom_tools_are_checked_at_construction():
    controller = ScriptedModel([])
    with pytest.raises(ConfigError, match="built in and takes no callback"):
        AgentLoop(controller, kb(), tools=[Tool(name="search", description="d", callback=str)])
    with pytest.raises(ConfigError, match="already taken"):
        AgentLoop(controller, kb(), tools=[Tool(name="t", description="d", callback=str)] * 2)
    with pytest.raises(ConfigError, match="no callback"):
        AgentLoop(controller, kb(), tools=[Tool(name="t", description="d")])


# -- history and conversation ------------------------------------------------------------------


def test_history_and_messages_record_every_call_in_order():
    first = search_call("refunds")
    loop, _ = agent([turn(first, search_call("international")), turn(answer_call("done"))])
    result = loop.run(Q)
    assert [(e.tool, e.iteration) for e in result.tool_history] == [
        ("search", 0),
        ("search", 0),
        ("answer", 1),
    ]
    assert result.tool_history[0].args == {"query": "refunds"}
    assert result.tool_history[0].call_id == first.id
    roles = [m.role for m in result.messages]
    assert roles == ["system", "user", "assistant", "tool", "tool", "assistant", "tool"]
    assert result.messages[1].content == Q
    assert result.messages[3].tool_call_id == first.id


def test_a_plain_function_can_be_the_controller():
    def controller(messages, tools):
        if messages[-1].role == "user":
            return turn(search_call("refunds"))
        return turn(answer_call(f"saw {len(tools)} tools"))

    result = AgentLoop(controller, kb()).run(Q)
    assert result.answer == "saw 3 tools"


def test_chunks_are_deduplicated_by_id_across_searches():
    loop, _ = agent(
        [turn(search_call("refunds"), search_call("international")), turn(answer_call("a"))]
    )
    result = loop.run(Q)
    ids = [c.id for c in result.chunks]
    assert len(ids) == len(set(ids)) == 3


# -- collections -------------------------------------------------------------------------------

CORPUS = {
    "docs": ["refunds take 30 days"],
    "wiki": ["refunds wiki page"],
    "secret": ["refunds code 1234"],
}


def search_params(loop: AgentLoop) -> dict:
    return loop.tools[0].parameters["properties"]


@pytest.mark.parametrize("collections", ["docs", ["docs"]])
def test_one_collection_locks_every_search_to_it(collections):
    search = CollectionSearch(CORPUS)
    loop, _ = agent(
        [turn(search_call("refunds", collection="secret")), turn(answer_call("a"))],
        search=search,
        collections=collections,
    )
    result = loop.run(Q)
    assert "collection" not in search_params(loop)
    assert search.calls[0]["collection"] == "docs"
    assert search.calls[0]["collections"] is None
    assert "1234" not in tool_results(result)[0]
    assert "# Collections" not in loop.system_prompt


def test_several_collections_let_the_controller_pick_or_search_all():
    search = CollectionSearch(CORPUS)
    calls = [search_call("refunds", collection="wiki"), search_call("refunds")]
    loop, _ = agent(
        [turn(*calls), turn(answer_call("a"))], search=search, collections=["docs", "wiki"]
    )
    loop.run(Q)
    assert search_params(loop)["collection"]["enum"] == ["docs", "wiki"]
    assert "Available collections: docs, wiki" in loop.tools[0].description
    assert "# Collections" in loop.system_prompt
    assert search.calls == [
        {"query": "refunds", "limit": 5, "collection": "wiki", "collections": None},
        {"query": "refunds", "limit": 5, "collection": None, "collections": ["docs", "wiki"]},
    ]


def test_a_collection_outside_the_list_is_an_error_that_never_reaches_the_search():
    search = CollectionSearch(CORPUS)
    loop, _ = agent(
        [turn(search_call("refunds", collection="secret")), turn(answer_call("a"))],
        search=search,
        collections=["docs", "wiki"],
    )
    result = loop.run(Q)
    assert search.calls == []
    assert result.tool_history[0].summary.startswith(
        'search error: collection "secret" is not in the allowed list (docs, wiki)'
    )


def test_no_collections_means_unrestricted():
    search = CollectionSearch(CORPUS)
    loop, _ = agent(
        [turn(search_call("refunds", collection="x")), turn(answer_call("a"))], search=search
    )
    loop.run(Q)
    assert "collection" not in search_params(loop)
    assert search.calls[0]["collection"] is None
    assert search.calls[0]["collections"] is None


def test_an_empty_collection_list_matches_nothing_and_never_searches():
    search = CollectionSearch(CORPUS)
    loop, _ = agent(
        [turn(search_call("refunds")), turn(give_up_call("nothing"))], search=search, collections=[]
    )
    result = loop.run(Q)
    assert search.calls == []
    assert "collection" not in search_params(loop)
    assert tool_results(result)[0] == "No results."
    assert result.chunks == []


# -- controller / answerer split ---------------------------------------------------------------


def test_the_answerer_rewrites_the_answer_tool_text():
    answerer = ScriptedModel(["A polished answer."])
    loop, _ = agent([turn(search_call("refunds")), turn(answer_call("draft"))], answerer=answerer)
    result = loop.run(Q)
    assert result.answer == "A polished answer."
    assert result.tool_history[-1].args == {"text": "draft"}
    call = answerer.calls[0]
    assert call.tools is None
    assert "research is complete" in call.messages[-1].content
    assert any(c.arguments == {"text": "draft"} for m in call.messages for c in m.tool_calls)
    assert result.messages[-1] == Message(role="assistant", content="A polished answer.")


@pytest.mark.parametrize("reply", [RuntimeError("answerer down"), ""])
def test_the_draft_stands_when_the_answerer_fails(reply):
    answerer = ScriptedModel([reply])
    loop, _ = agent([turn(answer_call("draft"))], answerer=answerer)
    result = loop.run(Q)
    assert result.stop_reason == StopReason.ANSWERED
    assert result.answer == "draft"
    assert result.error is None


def test_give_up_and_text_replies_are_never_rewritten():
    answerer = ScriptedModel(["rewritten"])
    loop, _ = agent([turn(give_up_call("nothing"))], answerer=answerer)
    assert loop.run(Q).answer == "Could not answer: nothing"
    loop, _ = agent([ModelResponse(text="plain")], answerer=answerer)
    assert loop.run(Q).answer == "plain"
    assert answerer.calls == []


def test_the_answerer_writes_the_fallback_synthesis_unless_a_synthesizer_is_given():
    answerer = ScriptedModel(["answerer synthesis"])
    loop, controller = agent([turn(search_call("refunds"))], max_iterations=1, answerer=answerer)
    assert loop.run(Q).answer == "answerer synthesis"
    assert len(controller.calls) == 1
    assert answerer.calls[0].tools is None


# -- the system prompt -------------------------------------------------------------------------


def test_the_default_system_prompt_has_the_seed_sections():
    loop, _ = agent([turn(answer_call("a"))], max_iterations=4)
    prompt = loop.system_prompt
    for section in (
        "# Available tools",
        "# Workflow",
        "# When not to call tools",
        "# Constraints",
        "# Output",
    ):
        assert section in prompt
    assert "4 turns" in prompt
    assert "`give_up`" in prompt
    result = loop.run(Q)
    assert result.messages[0] == Message(role="system", content=prompt)


def test_system_prompt_replaces_the_default():
    model = FunctionModel(lambda messages, tools: turn(answer_call(messages[0].content)))
    loop = AgentLoop(model, kb(), system_prompt="Be brief.")
    assert loop.run(Q).answer == "Be brief."
