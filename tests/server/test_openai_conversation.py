"""The OpenAI route reads a conversation (issue 31, item 22): a follow-up is rewritten into a
standalone question from the history (heuristic offline, the model when the server has one),
shown in the response and the trace; ``usage`` counts tokens (the model's when it reports
them, a tokenizer's otherwise); a request picks its collection within the key's."""

from __future__ import annotations

import httpx
import pytest

from ragloop.core.records import ModelResponse, Usage
from ragloop.observability.settings import set_trace_content
from ragloop.server.conversation import heuristic
from ragloop.server.openai_compat import count_tokens
from ragloop.testing import FunctionModel
from tests.server.conftest import KEYS, auth

openai = pytest.importorskip("openai", reason="the OpenAI client is a dev dependency")

CONVERSATION = [
    {"role": "user", "content": "Tell me about the Skylark 2."},
    {"role": "assistant", "content": "The Skylark 2 is a two-person tent."},
    {"role": "user", "content": "And what does it weigh?"},
]


def client(url: str, key: str = "root"):
    return openai.OpenAI(base_url=f"{url}/v1", api_key=KEYS[key], max_retries=0)


@pytest.fixture
def content_on():
    set_trace_content(True)  # the trace keeps the user's words
    yield
    set_trace_content(None)


def test_a_follow_up_is_read_with_the_conversation(server, content_on):
    url, _ = server
    with client(url) as chat:  # root reads both collections: "it weighs" alone is ambiguous
        completion = chat.chat.completions.create(model="ragloop-rag", messages=CONVERSATION)
    run = completion.model_extra["ragloop"]
    assert run["question"] == "What does the Skylark 2 weigh?"
    assert run["followup"] == "And what does it weigh?"
    assert run["rewritten_by"] == "heuristic"
    answer = completion.choices[0].message.content
    assert "2.1 kg" in answer
    assert "900 grams" not in answer  # not the Nimbus, another tent that "weighs"
    trace = httpx.get(url + run["trace_url"], headers=auth("root")).json()
    assert trace["question"] == "What does the Skylark 2 weigh?"
    assert trace["meta"]["followup"] == "And what does it weigh?"
    assert trace["meta"]["rewritten_by"] == "heuristic"


def test_a_first_question_is_asked_as_it_is(server):
    url, _ = server
    with client(url) as chat:
        completion = chat.chat.completions.create(
            model="ragloop", messages=[{"role": "user", "content": "How much is tent hire?"}]
        )
    run = completion.model_extra["ragloop"]
    assert run["question"] == "How much is tent hire?"
    assert run["followup"] is None


def test_the_stream_shows_the_rewritten_question_too(server):
    url, _ = server
    with client(url) as chat:
        chunks = list(
            chat.chat.completions.create(model="ragloop-rag", messages=CONVERSATION, stream=True)
        )
    last = next(c for c in chunks if c.choices and c.choices[0].finish_reason == "stop")
    assert last.model_extra["ragloop"]["question"] == "What does the Skylark 2 weigh?"


@pytest.mark.parametrize(
    ("earlier", "followup", "standalone"),
    [
        (["Can I hire a tent?"], "And what does it cost for a weekend?",
         "What does the tent cost for a weekend?"),
        (["Tell me about the Skylark 2."], "What about the warranty?",
         "The warranty of the Skylark 2?"),
        (["Tell me about the Skylark 2.", "And its price?"], "What does it weigh?",
         "What does the Skylark 2 weigh?"),
        (["Tell me about the Skylark 2."], "How heavy is the Nimbus tent?",
         "How heavy is the Nimbus tent?"),  # names its own subject: left alone
        (["What is the return policy?"], "How long does it take?",
         "How long does the return policy take?"),
        (["How much is tent hire?"], "What is the return policy?",
         "What is the return policy?"),  # a new question, not a follow-up
        (["How much is tent hire?"], "Is it possible to return a tent?",
         "Is it possible to return a tent?"),  # an "it" that stands for nothing
        (["How do I remove common leading whitespace from every line?"],
         "And how do I add a prefix to each line?",
         "And how do I add a prefix to each line?"),  # a whole question of its own
        (["Tell me about the Skylark 2."], "And how long is the warranty?",
         "How long is the warranty of the Skylark 2?"),  # "the warranty": the Skylark's
    ],
)  # fmt: skip
def test_the_offline_rewrite_carries_the_subject(earlier, followup, standalone):
    assert heuristic(earlier, followup) == standalone


def test_offline_usage_counts_the_words_instead_of_zeros(server):
    url, _ = server
    with client(url) as chat:
        completion = chat.chat.completions.create(model="ragloop-rag", messages=CONVERSATION)
    usage = completion.usage
    prompt = "\n".join(m["content"] for m in CONVERSATION)
    assert usage.prompt_tokens == count_tokens(prompt) > 0
    answer = completion.choices[0].message.content
    assert usage.completion_tokens == count_tokens(answer) > 0
    assert usage.total_tokens == usage.prompt_tokens + usage.completion_tokens
    assert completion.model_extra["ragloop"]["usage_counted_by"] == "tokenizer"


def test_with_a_model_the_model_rewrites_and_its_usage_is_reported(server):
    url, service = server

    def reply(messages, tools):
        prompt = messages[-1].content
        if "standalone question" in prompt:
            assert "Tell me about the Skylark 2." in prompt  # the history is in the prompt
            return '{"question": "How much does the Skylark 2 weigh?"}'
        return ModelResponse(text="The Skylark 2 weighs 2.1 kg packed.")

    model = FunctionModel(reply, usage=Usage(input_tokens=40, output_tokens=6))
    service.model = model
    with client(url) as chat:
        completion = chat.chat.completions.create(model="ragloop-agent", messages=CONVERSATION)
    run = completion.model_extra["ragloop"]
    assert run["question"] == "How much does the Skylark 2 weigh?"
    assert run["rewritten_by"] == "model"
    assert run["usage_counted_by"] == "model"
    calls = len(model.calls)  # the rewrite, then the agent's turns
    assert calls >= 2
    assert completion.usage.prompt_tokens == 40 * calls
    assert completion.usage.completion_tokens == 6 * calls


def test_a_request_picks_its_collection_within_the_keys(server):
    url, _ = server
    question = [{"role": "user", "content": "What does the Nimbus tent weigh?"}]
    with client(url) as chat:
        public = chat.chat.completions.create(
            model="ragloop-rag", messages=question, extra_body={"collection": "public"}
        )
        secret = chat.chat.completions.create(
            model="ragloop-rag", messages=question, extra_body={"collection": "secret"}
        )
    assert "900 grams" not in public.choices[0].message.content
    assert "900 grams" in secret.choices[0].message.content
    assert {s["source"] for s in secret.model_extra["sources"]} <= {"launch.md", "margins.md"}
    with client(url, "alice") as chat, pytest.raises(openai.PermissionDeniedError) as refused:
        chat.chat.completions.create(
            model="ragloop-rag", messages=question, extra_body={"collection": "secret"}
        )
    assert "may not read collection 'secret'" in refused.value.message


def test_a_short_follow_up_after_a_long_message_stays_within_the_limit(server):
    """The rewrite carries the subject of a long earlier message over, not the whole of it
    (issue 58, item 14): the follow-up is a question the server takes."""
    url, _ = server
    long_phrase = "sturdy green waterproof lightweight family " * 85 + "tent"
    first = f"Tell me everything about the {long_phrase}."
    assert 3500 < len(first) <= 4000  # the server takes it (max_question_chars 4000)
    messages = [
        {"role": "user", "content": first},
        {"role": "assistant", "content": "It is a tent."},
        {"role": "user", "content": "And what does it cost?"},
    ]
    with client(url) as chat:
        completion = chat.chat.completions.create(model="ragloop-rag", messages=messages)
    run = completion.model_extra["ragloop"]
    assert len(run["question"]) < 200
    assert run["question"].endswith("family tent cost?")


def test_a_rewrite_over_the_limit_is_the_users_own_words():
    import asyncio

    from ragloop.server.conversation import Turn, standalone

    turns = [Turn("user", "Tell me about the Skylark 2."), Turn("user", "And its weight?")]
    short = asyncio.run(standalone(turns, None, max_chars=20))
    assert short.question == "And its weight?"
    assert asyncio.run(standalone(turns, None)).question == "The Skylark 2's weight?"


def test_v1_ask_reads_a_follow_up_with_its_history_as_the_page_sends_it(server, content_on):
    url, _ = server
    history = [{"role": m["role"], "content": m["content"]} for m in CONVERSATION[:2]]
    body = {"question": "And what does it weigh?", "history": history}
    answered = httpx.post(f"{url}/v1/ask", json=body, headers=auth("root"), timeout=120)
    assert answered.status_code == 200, answered.text
    result = answered.json()
    assert result["question"] == "What does the Skylark 2 weigh?"  # what ran
    assert result["followup"] == "And what does it weigh?"  # what was asked
    assert result["rewritten_by"] == "heuristic"
    assert "2.1 kg" in result["answer"]
    trace = httpx.get(url + result["trace_url"], headers=auth("root")).json()
    assert trace["meta"]["followup"] == "And what does it weigh?"
    alone = httpx.post(
        f"{url}/v1/ask", json={"question": "How much is tent hire?"}, headers=auth("root")
    ).json()
    assert (alone["followup"], alone["rewritten_by"]) == (None, None)
    bad = httpx.post(
        f"{url}/v1/ask",
        json={"question": "And its price?", "history": [{"role": "system", "content": "x"}]},
        headers=auth("root"),
    )
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["body", "history", 0, "role"]
