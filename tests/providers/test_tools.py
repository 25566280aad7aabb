"""The JSON-in-text tool protocol, on its own."""

from __future__ import annotations

import pytest

from ragloop import Message, Tool, ToolCall
from ragloop.providers.tools import parse_text_tool_calls, to_text_protocol, tools_prompt

SEARCH = Tool(name="search", description="Search.", parameters={"type": "object"})


@pytest.mark.parametrize(
    ("reply", "calls"),
    [
        ('{"tool_calls": [{"name": "search", "arguments": {"q": 1}}]}', [("search", {"q": 1})]),
        (
            '{"toolCalls": [{"Name": "search", "arguments": "{\\"q\\": 2}"}]}',
            [("search", {"q": 2})],
        ),
        ('{"name": "search", "arguments": {"q": 3}}', [("search", {"q": 3})]),
        ('{"tool_calls": [{"name": "delete_all", "arguments": {}}]}', []),  # unknown tool
        ('{"is_grounded": true, "score": 0.9}', []),  # JSON that is not a call
        ("The answer is 42.", []),
    ],
)
def test_replies_are_read_as_calls_to_known_tools_or_as_text(reply, calls):
    response = parse_text_tool_calls(reply, [SEARCH])
    assert [(c.name, c.arguments) for c in response.tool_calls] == calls
    assert response.text == ("" if calls else reply)


def test_the_tools_join_an_existing_system_message():
    messages = to_text_protocol(
        [Message(role="system", content="Be brief."), Message(role="user", content="q")], [SEARCH]
    )
    assert [m.role for m in messages] == ["system", "user"]
    assert messages[0].content.startswith("Be brief.\n\n")
    assert tools_prompt([SEARCH]) in messages[0].content


def test_a_tool_result_names_its_call():
    call = ToolCall(id="c1", name="search", arguments={})
    messages = to_text_protocol(
        [
            Message(role="assistant", tool_calls=[call]),
            Message(role="tool", content="r", tool_call_id="c1"),
        ],
        [SEARCH],
    )
    assert messages[2].content == '<tool_result call_id="c1" name="search">r</tool_result>'
