from ragloop import RAGLoop
from ragloop.demo import demo_knowledge_base

# 1. A knowledge base: the handbook of a made-up outdoor shop (34 short documents), built into
#    the user cache on first use. Yours: KnowledgeBase("kb.sqlite").ingest("docs/").
kb = demo_knowledge_base()

# 2. A loop that needs no LLM: it quotes the chunks (ExtractiveGenerator), judges the answer
#    (HeuristicEvaluator) and rewrites the query (HeuristicReformulator), all three consulting
#    the knowledge base itself. Each retrieval is a search and its hop along the link graph.
loop = RAGLoop.offline(kb)
result = loop.run("What warranty does the tent Priya Shah takes wild camping come with?")

print(result.answer)  # quoted sentences, [n] citations, and their sources
print(result.stop_reason, result.iterations, result.confident, f"{result.probability:.2f}")
for it in result.trace:  # why: every iteration, with the strategy behind its queries
    print(f"[{it.iteration}] {it.strategy} {it.queries} -> {it.evaluation.score:.2f}")
    print(f"    {it.evaluation.reason}")
