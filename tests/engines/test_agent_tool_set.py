"""Arcana's tool options on AgentLoop (issue 18, item 4): ``tools`` replaces or removes the
built-ins ("replace to customise"), ``system_prompt`` may be a function of the options, and
``search_opts`` reach every search."""

from __future__ import annotations

import pytest

from ragloop import AgentLoop, Budget, Chunk, ConfigError, StopReason, Tool, ToolCall
from ragloop.testing import InMemoryRetriever, ScriptedModel
from tests.helpers import answer_call, give_up_call, search_call, turn

Q = "When are refunds issued?"
DOCS = {"returns.md": "Refunds are issued within 30 days of purchase."}


def clock(arguments):
    return "It is noon."


CLOCK = Tool(name="clock", description="The time.", callback=clock)


def names(loop):
    return [t.name for t in loop.tools]


def test_a_list_naming_a_built_in_is_the_whole_set_as_in_arcana():
    retriever = InMemoryRetriever(DOCS)
    defaults = AgentLoop.default_tools()
    assert [t.name for t in defaults] == ["search", "answer", "give_up"]
    loop = AgentLoop(ScriptedModel([]), retriever, tools=[*defaults, CLOCK])
    assert names(loop) == ["search", "answer", "give_up", "clock"]
    no_give_up = AgentLoop(ScriptedModel([]), retriever, tools=["search", "answer", CLOCK])
    assert names(no_give_up) == ["search", "answer", "clock"]
    assert "give_up" not in no_give_up.system_prompt
    # custom tools alone are added to the built-ins, as before
    assert names(AgentLoop(ScriptedModel([]), retriever, tools=[CLOCK])) == [
        "search",
        "answer",
        "give_up",
        "clock",
    ]


def test_a_removed_built_in_is_an_unknown_tool_to_the_controller():
    controller = ScriptedModel([turn(give_up_call("nothing")), turn(answer_call("30 days"))])
    loop = AgentLoop(controller, InMemoryRetriever(DOCS), tools=["search", "answer"])
    result = loop.run(Q)
    assert result.tool_history[0].summary == "Unknown tool: give_up"
    assert (result.stop_reason, result.answer) == (StopReason.ANSWERED, "30 days")
    assert [t.name for t in controller.calls[0].tools] == ["search", "answer"]


def test_a_built_in_given_as_a_tool_keeps_its_schema_with_the_description_given():
    def search(query, *, limit, collection=None, collections=None):
        return []

    mine = Tool(name="search", description="Search the shop handbook.", parameters={})
    loop = AgentLoop(ScriptedModel([]), search, tools=[mine, "answer"], collections=["a", "b"])
    search = loop.tools[0]
    assert search.description == "Search the shop handbook."
    assert search.parameters["properties"]["collection"]["enum"] == ["a", "b"]


def test_only_a_set_with_no_way_to_finish_is_refused():
    retriever = InMemoryRetriever(DOCS)
    with pytest.raises(ConfigError, match="neither answer nor give_up"):
        AgentLoop(ScriptedModel([]), retriever, tools=["search", CLOCK])
    assert names(AgentLoop(ScriptedModel([]), retriever, tools=[])) == names(
        AgentLoop(ScriptedModel([]), retriever)
    )  # no tools to add
    with pytest.raises(ConfigError, match="not a built-in tool"):
        AgentLoop(ScriptedModel([]), retriever, tools=["answer", "lookup"])
    with pytest.raises(ConfigError, match="already taken"):
        AgentLoop(ScriptedModel([]), retriever, tools=["answer", "answer"])
    # a loop without search still finishes: the controller answers or gives up
    loop = AgentLoop(ScriptedModel([turn(give_up_call("no search"))]), retriever, tools=["give_up"])
    assert loop.run(Q).stop_reason == StopReason.GAVE_UP


def test_system_prompt_may_be_a_function_of_the_options():
    seen = []

    def prompt(options):
        seen.append(options)
        return f"Answer {options['query']!r} in {options['max_iterations']} turns. " + (
            AgentLoop.default_system_prompt(options)
        )

    controller = ScriptedModel([turn(answer_call("30 days"))])
    loop = AgentLoop(controller, InMemoryRetriever(DOCS), system_prompt=prompt, max_iterations=6)
    loop.run(Q, budget=Budget(max_iter=4))
    system = controller.calls[0].messages[0]
    assert system.role == "system"
    assert system.content.startswith(f"Answer {Q!r} in 4 turns. You are a research agent.")
    options = seen[-1]
    assert options["query"] == Q
    assert options["budget"] == Budget(max_iter=4)
    assert [t.name for t in options["tools"]] == ["search", "answer", "give_up"]
    assert (options["collections"], options["max_tool_calls_per_turn"], options["chunk_cap"]) == (
        None,
        8,
        30,
    )
    with pytest.raises(ConfigError, match="system_prompt"):
        AgentLoop(controller, InMemoryRetriever(DOCS), system_prompt=42)


def test_the_default_prompt_follows_a_runs_own_budget():
    controller = ScriptedModel([turn(answer_call("a")), turn(answer_call("b"))])
    loop = AgentLoop(controller, InMemoryRetriever(DOCS), max_iterations=9)
    loop.run(Q)
    loop.run(Q, budget=Budget(max_iter=3))
    first, second = (call.messages[0].content for call in controller.calls)
    assert "9 turns at most" in first
    assert "3 turns at most" in second


def test_search_opts_reach_every_search_but_never_the_collections():
    calls = []

    def search(query, *, limit, mode="hybrid", collection=None, collections=None):
        calls.append((query, limit, mode, collection))
        return [Chunk(content="Refunds are issued within 30 days.", source="r.md", score=0.9)]

    controller = ScriptedModel([turn(search_call("refunds")), turn(answer_call("30 days"))])
    loop = AgentLoop(controller, search, search_opts={"mode": "bm25"}, collections="shop")
    loop.run(Q)
    assert calls == [("refunds", 5, "bm25", "shop")]
    with pytest.raises(ConfigError, match="collections="):
        AgentLoop(controller, search, search_opts={"collection": "other"})
    with pytest.raises(ConfigError, match="takes no colour= argument"):
        AgentLoop(controller, search, search_opts={"colour": "red"})


def test_search_opts_may_set_the_limit_as_in_arcana():
    retriever = InMemoryRetriever(DOCS)
    controller = ScriptedModel([turn(ToolCall(name="search", arguments={"query": "refunds"}))])
    controller.push(turn(answer_call("30 days")))
    AgentLoop(controller, retriever, search_opts={"top_k": 2}).run(Q)
    assert retriever.calls == [("refunds", 2)]
