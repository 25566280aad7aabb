from __future__ import annotations

import pytest

from ragloop import Chunk, Message, ModelResponse, StopReason, Tool, ToolCall, Usage
from ragloop.core.records import chunk_id


def test_chunk_id_is_stable_and_depends_on_source_and_content():
    a = Chunk(content="text", source="a.md", score=0.5)
    assert a.id == chunk_id("a.md", "text")
    assert a.id == Chunk(content="text", source="a.md", score=0.9).id  # score is not identity
    assert a.id != Chunk(content="text", source="b.md", score=0.5).id
    assert a.id != Chunk(content="text!", source="a.md", score=0.5).id
    assert Chunk(content="text", source="a.md", score=0.5, id="mine").id == "mine"


@pytest.mark.parametrize("score", [-0.01, 1.01, float("nan"), float("inf")])
def test_chunk_score_outside_unit_range_is_rejected_with_a_hint(score):
    with pytest.raises(ValueError, match="normalise"):
        Chunk(content="x", source="s", score=score)


def test_chunk_round_trips_through_json():
    c = Chunk(content="x", source="s", score=0.25, metadata={"page": 3, "tags": ["a"]})
    assert Chunk.model_validate_json(c.model_dump_json()) == c


def test_usage_addition_and_unknown_costs():
    a = Usage(input_tokens=10, output_tokens=2)
    b = Usage(input_tokens=5, output_tokens=1, cost_usd=0.5)
    assert (a + a).cost_usd is None
    total = a + b
    assert (total.input_tokens, total.output_tokens, total.cost_usd) == (15, 3, 0.5)
    assert total.total_tokens == 18
    with pytest.raises(ValueError, match="greater than or equal"):
        Usage(input_tokens=-1)


def test_stop_reason_values_are_the_documented_lower_case_strings():
    assert [r.value for r in StopReason] == [
        "converged",
        "max_iterations",
        "human_approved",
        "error",
        "answered",
        "gave_up",
        "diminishing_returns",
        "no_improvement",
        "caller_stop",
        "cancelled",
        "no_new_queries",
        "budget_tokens",
        "budget_dollars",
        "budget_wall_ms",
        "budget_iter",
    ]
    assert StopReason("budget_iter").is_budget
    assert not StopReason.CONVERGED.is_budget
    assert str(StopReason.ANSWERED) == "answered"


def test_every_stop_reason_has_an_outcome_of_its_kind():
    outcomes = {reason: reason.outcome for reason in StopReason}
    assert set(outcomes.values()) == {
        "success",
        "settled",
        "limit",
        "budget",
        "caller",
        "gave_up",
        "error",
    }
    assert outcomes[StopReason.NO_NEW_QUERIES] == "settled" != outcomes[StopReason.CALLER_STOP]
    assert {outcomes[r] for r in StopReason if r.is_budget} == {"budget"}


def test_message_tool_call_and_response_defaults():
    call = ToolCall(name="search", arguments={"query": "x"})
    assert call.id.startswith("call_")
    assert ToolCall(name="search").id != ToolCall(name="search").id
    message = Message(role="assistant", tool_calls=[call])
    assert message.content == ""
    assert message.tool_call_id is None
    assert ModelResponse() == ModelResponse(text="", tool_calls=[], usage=None)
    with pytest.raises(ValueError, match="role"):
        Message(role="robot", content="hi")  # type: ignore[arg-type]


def test_tool_callback_is_not_serialised():
    tool = Tool(name="lookup", description="Look up", callback=lambda args: "ok")
    data = tool.model_dump()
    assert "callback" not in data
    assert data["parameters"] == {"type": "object", "properties": {}}
