from ragloop import GeneratorOutput, LLMEvaluator, LLMReformulator, LoopConfig, RAGLoop
from ragloop.testing import InMemoryRetriever, ScriptedModel

# 1. A retriever: anything with retrieve(query, top_k) -> list[Chunk]. BM25 over three docs here.
retriever = InMemoryRetriever(
    {
        "returns.md": "Cross-border purchases qualify for a full reimbursement within 30 days.",
        "shipping.md": "International orders ship within 5 business days.",
        "billing.md": "Invoices are issued monthly; late payments cost 2% per month.",
    }
)


# 2. A generator answers the original question from the chunks (your LLM call goes here).
class FirstChunkGenerator:
    def generate(self, query, chunks):
        if not chunks:
            return GeneratorOutput(answer="I don't know.", confidence=0.0)
        return GeneratorOutput(answer=chunks[0].content, confidence=chunks[0].score)


# 3. Your LLM, as a function of the prompt or a chat model. A scripted stand-in here, so this
#    runs offline: it replies to the evaluator, then the reformulator, then the evaluator.
my_llm = ScriptedModel(
    [
        """{"is_grounded": true, "is_complete": false, "score": 0.3,
            "reason": "no chunk mentions refunds; the documents may use other terminology"}""",
        """```json
        {"strategy": "perspective_shift", "queries": ["cross-border reimbursement"],
         "reasoning": "the documents say reimbursement, not refund"}
        ```""",
        """{"is_grounded": true, "is_complete": true, "score": 0.9, "reason": "30 days"}""",
    ]
)

loop = RAGLoop(
    retriever=retriever,
    generator=FirstChunkGenerator(),
    evaluator=LLMEvaluator(generate_fn=my_llm),
    reformulator=LLMReformulator(generate_fn=my_llm),
    config=LoopConfig(max_iterations=3, confidence_threshold=0.85),
)
result = loop.run("What is the refund policy for international orders?")

print(result.answer)  # the best answer found
print(result.stop_reason)  # converged
print(result.iterations)  # 2
for it in result.trace:  # why: every iteration, with the strategy behind its query
    print(f"[{it.iteration}] {it.strategy} {it.queries} -> {it.evaluation.score:.2f}")
