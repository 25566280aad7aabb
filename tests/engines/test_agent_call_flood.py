"""An AgentLoop model that sends far more tool calls in a turn than the per-turn cap (issue 31,
item 16): only the first `max_tool_calls_per_turn` run, only they (their calls and results) go
back into the conversation, with one short note of how many were ignored, so every request
stays small however many calls the model sends."""

from __future__ import annotations

import itertools

from ragloop import AgentLoop
from ragloop.testing import FunctionModel
from tests.helpers import CollectionSearch, search_call, turn

CALLS_PER_TURN = 2000
TURNS = 10
CAP = 8  # the default max_tool_calls_per_turn


def test_a_flood_of_tool_calls_keeps_the_conversation_bounded():
    counter = itertools.count()
    requests: list[int] = []
    carried: list[int] = []

    def flood(messages, tools):
        requests.append(len(messages))
        carried.append(sum(len(m.tool_calls or []) for m in messages))
        return turn(*(search_call(f"tents {next(counter)}") for _ in range(CALLS_PER_TURN)))

    search = CollectionSearch({"docs": [f"tent {i} weighs {i} kg" for i in range(50)]})
    loop = AgentLoop(FunctionModel(flood), search, max_iterations=TURNS)
    assert loop.max_tool_calls_per_turn == CAP
    result = loop.run("How heavy is tent 3?")
    # TURNS controller turns, then one closing request (the run hit max_iterations)
    assert len(requests) == TURNS + 1
    # system + question, then per turn: the assistant's kept calls, their results, one note
    tenth = requests[TURNS - 1]
    assert tenth == 2 + (TURNS - 1) * (1 + CAP + 1)
    assert tenth < 100  # was 18,011 when every call went back
    assert requests[-1] <= 2 + TURNS * (1 + CAP + 1) + 1
    assert carried[TURNS - 1] == (TURNS - 1) * CAP
    assert len(search.calls) == TURNS * CAP  # the calls over the cap never ran
    notes = [m.content for m in result.messages if m.role == "user"][1:]
    assert (
        notes == [f"{CALLS_PER_TURN - CAP} tool calls over the cap of {CAP} were ignored."] * TURNS
    )
    assert len(result.tool_history) == TURNS * CAP  # nor do they fill the history
