"""The quick start's loop with an Anthropic model in place of the offline components.

    ANTHROPIC_API_KEY=sk-ant-... python examples/with_anthropic.py

ANTHROPIC_BASE_URL names another endpoint of the Messages API, and RAGLOOP_EXAMPLE_MODEL
another Claude model. Nothing here needs a vendor SDK.
"""

import os

from ragloop import (
    Budget,
    LLMEvaluator,
    LLMGenerator,
    LLMReformulator,
    LoopConfig,
    RAGLoop,
    get_model,
)
from ragloop.demo import demo_knowledge_base

# 1. The model: every LLM component below takes it as it is (a chat model).
model = get_model(f"anthropic:{os.environ.get('RAGLOOP_EXAMPLE_MODEL', 'claude-haiku-4-5')}")

# 2. The knowledge base of the quick start: the made-up outdoor shop's handbook.
kb = demo_knowledge_base()

# 3. The loop: the model answers (with [n] citations), judges and rewrites. The budget caps
#    what one run may spend; prices of common Anthropic models are known to ragloop.
loop = RAGLoop(
    retriever=kb.retriever(),
    generator=LLMGenerator(model),
    evaluator=LLMEvaluator(generate_fn=model),
    reformulator=LLMReformulator(generate_fn=model, corpus=kb),
    config=LoopConfig(max_iterations=3, confidence_threshold=0.85, budget=Budget(max_dollars=0.05)),
)
result = loop.run("What warranty does the tent Priya Shah takes wild camping come with?")

print(result.answer)
print(result.stop_reason, result.iterations, result.usage)
for it in result.trace:  # why: every iteration, with the strategy behind its queries
    print(f"[{it.iteration}] {it.strategy} {it.queries} -> {it.evaluation.score:.2f}")
    print(f"    {it.evaluation.reason}")
kb.close()
