"""The one rule for an LLM given to a component: a callable is a function of the prompt, only a
non-callable object (or an explicit ``model=``) is a chat model (core.calls.resolve_llm)."""

from __future__ import annotations

import json
from unittest.mock import MagicMock

import pytest

from ragloop import (
    AgentLoop,
    Chunk,
    ConfigError,
    EvaluationResult,
    LLMEvaluator,
    LLMGenerator,
    LLMJudgeGrounder,
    LLMReformulator,
    LLMUnderstander,
    LoopIteration,
    ModelResponse,
    ToolCall,
)
from ragloop.testing import InMemoryRetriever, ScriptedModel

Q = "What is the refund policy?"
CHUNK = Chunk(content="Refunds are paid within 30 days.", source="returns.md", score=0.9)
VERDICT = json.dumps({"is_grounded": True, "is_complete": True, "score": 0.9, "reason": "ok"})
REWRITE = json.dumps({"strategy": "expand", "queries": ["refund money back"], "reasoning": "r"})


def history():
    return [
        LoopIteration(
            iteration=1,
            query=Q,
            chunks=[CHUNK],
            answer="a",
            confidence=0.5,
            evaluation=EvaluationResult(
                is_grounded=False, is_complete=False, score=0.2, reason="too broad"
            ),
        )
    ]


# Each component, the reply its generate_fn gives, and a check of what the component made of it.
CASES = {
    "evaluator": (
        LLMEvaluator,
        VERDICT,
        lambda c: c.evaluate(Q, [CHUNK], "30 days").score == 0.9,
    ),
    "reformulator": (
        LLMReformulator,
        REWRITE,
        lambda c: c.reformulate(Q, history()).queries == ["refund money back"],
    ),
    "generator": (
        LLMGenerator,
        '{"answer": "Within 30 days [1].", "confidence": 0.7}',
        lambda c: c.generate(Q, [CHUNK]).confidence == 0.7,
    ),
    "understander": (
        LLMUnderstander,
        '{"rewritten": "refund policy", "sub_queries": [], "shape": "keyword"}',
        lambda c: c.understand(Q).rewritten == "refund policy",
    ),
    "grounder": (
        LLMJudgeGrounder,
        '{"claims": [{"text": "30 days", "verdict": "supported", "chunk_indices": [1]}]}',
        lambda c: c.ground("30 days", [CHUNK]).score == 1.0,
    ),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_magicmock_generate_fn_is_called_as_a_function_of_the_prompt(name):
    # ragsnag's own test idiom: a MagicMock also has a .complete attribute, but it is callable,
    # so it is a function of the prompt (this raised ComponentError before).
    component_class, reply, check = CASES[name]
    generate_fn = MagicMock(return_value=reply)
    component = component_class(generate_fn=generate_fn)
    assert check(component)
    generate_fn.assert_called_once()
    (prompt,), kwargs = generate_fn.call_args
    assert isinstance(prompt, str)
    assert kwargs == {}
    generate_fn.complete.assert_not_called()


class CallableChatModel:
    """A chat model that is also callable (with some other meaning)."""

    def __init__(self, reply: str) -> None:
        self.reply = reply
        self.completions = 0

    def __call__(self, *args, **kwargs):
        raise AssertionError("a model given as model= must not be called as a function")

    def complete(self, messages, tools=None):
        self.completions += 1
        return ModelResponse(text=self.reply)


@pytest.mark.parametrize("name", sorted(CASES))
def test_model_keyword_is_a_chat_model_even_when_callable(name):
    component_class, reply, check = CASES[name]
    model = CallableChatModel(reply)
    assert check(component_class(model=model))
    assert model.completions == 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_non_callable_object_with_complete_is_a_chat_model(name):
    component_class, reply, check = CASES[name]
    model = ScriptedModel([reply])
    assert check(component_class(model))
    assert len(model.calls) == 1


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_llm_is_given_exactly_once(name):
    component_class = CASES[name][0]
    with pytest.raises(ConfigError, match="exactly one"):
        component_class()
    with pytest.raises(ConfigError, match="exactly one"):
        component_class(lambda prompt: "", model=ScriptedModel([]))
    with pytest.raises(ConfigError, match=r"model: .*complete"):
        component_class(model=lambda prompt: "")
    with pytest.raises(ConfigError, match=r"generate_fn: .*function of the prompt"):
        component_class("not a model")


def test_a_controller_that_is_callable_is_a_function_of_messages_and_tools():
    calls = []

    class Controller:
        def __call__(self, messages, tools):
            calls.append(len(tools))
            return ModelResponse(tool_calls=[ToolCall(name="answer", arguments={"text": "42"})])

        def complete(self, messages, tools=None):
            raise AssertionError("a callable controller is called as a function")

    retriever = InMemoryRetriever(["refunds are paid within 30 days"])
    result = AgentLoop(Controller(), retriever).run(Q)
    assert result.answer == "42"
    assert calls == [3]
