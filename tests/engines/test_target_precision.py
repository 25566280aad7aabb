"""A target precision: the loops stand by an answer only when its calibrated chance of being right
reaches it; otherwise they return their best attempt, not confident, with the evidence gaps."""

from __future__ import annotations

import pytest

from ragloop import AgentLoop, ConfigError, LoopConfig, RAGLoop, StopReason
from ragloop.components.calibration import Calibration
from ragloop.core.records import ModelResponse, ToolCall
from ragloop.core.records.gaps import EvidenceGaps, GapPart
from tests.helpers import EchoGenerator, ListReformulator, ScoreEvaluator, TableRetriever, chunk

Q = "How heavy is the tent?"
TABLE = {
    Q: [chunk("The tent weighs 2 kg.", 0.9, "tent.md")],
    "q2": [chunk("The stove weighs 300 g.", 0.4, "stove.md")],
}
# a judge whose 0.6 means right four times in five
GENEROUS = Calibration(method="isotonic", thresholds=[0.0, 0.55], values=[0.1, 0.8])


def rag(scores, **config) -> RAGLoop:
    return RAGLoop(
        TableRetriever(TABLE),
        EchoGenerator(),
        ScoreEvaluator(scores),
        ListReformulator([["q2"]]),
        LoopConfig(**config),
    )


def test_the_run_converges_when_the_chance_reaches_the_target():
    result = rag([0.6], target_precision=0.6).run(Q)
    assert result.stop_reason is StopReason.CONVERGED
    assert result.confident
    assert result.probability == 0.6
    assert result.target_precision == 0.6
    assert result.gaps is None or not result.trace[0].evaluation.is_complete


def test_below_the_target_the_best_attempt_comes_back_not_confident_with_its_gaps():
    result = rag([0.6, 0.5], target_precision=0.7, max_iterations=2).run(Q)
    assert result.stop_reason is StopReason.MAX_ITERATIONS
    assert not result.confident
    assert result.answer == "The tent weighs 2 kg."  # the best attempt, not the last
    gaps = result.gaps
    assert isinstance(gaps, EvidenceGaps)
    assert gaps.probability == 0.6
    assert gaps.target == 0.7
    assert gaps.searches == [Q, "q2"]  # every search, in order
    assert [n.source for n in gaps.nearest] == ["tent.md", "stove.md"]
    assert gaps.parts == [GapPart(part=Q, found=False)]  # the judge never called it complete
    assert "not found" in gaps.line().lower()


def test_the_calibration_decides_what_a_score_means():
    """The same 0.6 converges at a target of 0.75 once the calibration says 0.6 is right four
    times in five, and the threshold the run records is the score that target amounts to."""
    plain = rag([0.6], target_precision=0.75, max_iterations=1).run(Q)
    assert plain.stop_reason is StopReason.MAX_ITERATIONS
    calibrated = rag([0.6], target_precision=0.75, calibration=GENEROUS).run(Q)
    assert calibrated.stop_reason is StopReason.CONVERGED
    assert calibrated.probability == 0.8
    config = LoopConfig(target_precision=0.75, calibration=GENEROUS)
    assert config.score_threshold == 0.55


def test_a_calibration_file_is_read_by_path(tmp_path):
    path = GENEROUS.save(tmp_path / "calibration.json")
    assert LoopConfig(target_precision=0.7, calibration=str(path)).calibration == GENEROUS
    with pytest.raises(ConfigError, match="calibration"):
        LoopConfig(calibration=str(tmp_path / "missing.json"))


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), True, "0.9"])
def test_a_target_outside_zero_to_one_is_a_config_error(bad):
    with pytest.raises(ConfigError, match="target_precision"):
        LoopConfig(target_precision=bad)


def test_without_a_target_the_threshold_still_decides():
    result = rag([0.6], confidence_threshold=0.5).run(Q)
    assert result.stop_reason is StopReason.CONVERGED
    assert result.probability == 0.6  # the identity: the score is the chance
    assert result.target_precision is None


def test_a_decomposition_names_each_sub_question_found_or_not():
    """Without a judge that splits the question, the parts are the decomposition's sub-queries,
    each found when the answer cites a chunk its search returned."""
    table = {
        "part one": [chunk("The tent weighs 2 kg.", 0.9, "tent.md")],
        "part two": [chunk("Unrelated text.", 0.3, "other.md")],
    }

    class CitingGenerator:
        def generate(self, query, chunks):
            from ragloop.core.records.rag import GeneratorOutput

            return GeneratorOutput(
                answer="The tent weighs 2 kg. [1]\n\nSources: [1] tent.md", confidence=0.5
            )

    loop = RAGLoop(
        TableRetriever(table),
        CitingGenerator(),
        ScoreEvaluator([0.2, 0.3]),
        ListReformulator([["part one", "part two"]]),
        LoopConfig(max_iterations=2, target_precision=0.9),
    )
    gaps = loop.run("part one and part two").gaps
    assert gaps is not None
    assert [(p.part, p.found, p.source) for p in gaps.parts] == [
        ("part one", True, "tent.md"),
        ("part two", False, None),
    ]


# -- AgentLoop ---------------------------------------------------------------------------------


def answering_controller(messages, tools=None):
    if not any(m.role == "tool" for m in messages):
        return ModelResponse(tool_calls=[ToolCall(name="search", arguments={"query": Q})])
    return ModelResponse(tool_calls=[ToolCall(name="answer", arguments={"text": "2 kg"})])


def test_an_agent_answer_below_the_target_is_not_confident():
    loop = AgentLoop(
        answering_controller,
        TableRetriever(TABLE),
        evaluator=ScoreEvaluator([0.4]),
        target_precision=0.5,
    )
    result = loop.run(Q)
    assert result.stop_reason is StopReason.ANSWERED
    assert result.probability == 0.4
    assert not result.confident
    assert result.gaps is not None
    assert result.gaps.searches == [Q]


def test_an_agent_answer_at_the_target_is_confident_and_carries_no_gaps():
    loop = AgentLoop(
        answering_controller,
        TableRetriever(TABLE),
        evaluator=ScoreEvaluator([0.9]),  # complete at 0.8 and above
        target_precision=0.5,
    )
    result = loop.run(Q)
    assert result.confident
    assert result.probability == 0.9
    assert result.gaps is None


def test_an_agent_without_an_evaluator_stands_by_its_answer():
    result = AgentLoop(answering_controller, TableRetriever(TABLE)).run(Q)
    assert result.confident
    assert result.probability is None
    assert result.gaps is None


def test_an_agent_evaluator_must_evaluate():
    with pytest.raises(ConfigError, match="evaluator"):
        AgentLoop(answering_controller, TableRetriever(TABLE), evaluator=object())


def test_a_failing_judge_of_the_agent_answer_loses_nothing(caplog):
    class Failing:
        def evaluate(self, query, chunks, answer):
            raise RuntimeError("judge down")

    result = AgentLoop(answering_controller, TableRetriever(TABLE), evaluator=Failing()).run(Q)
    assert result.stop_reason is StopReason.ANSWERED
    assert result.answer == "2 kg"
    assert result.probability is None
    assert result.confident
    assert "judge down" in caplog.text


def test_a_failing_gap_report_falls_back_to_the_runs_own(caplog):
    class Splitting(ScoreEvaluator):
        def evidence_gaps(self, query, chunks, answer):
            raise RuntimeError("cannot split")

    loop = RAGLoop(
        TableRetriever(TABLE),
        EchoGenerator(),
        Splitting([0.2]),
        ListReformulator([["q2"]]),
        LoopConfig(max_iterations=1, target_precision=0.5),
    )
    gaps = loop.run(Q).gaps
    assert gaps is not None
    assert gaps.parts == [GapPart(part=Q, found=False)]
    assert "cannot split" in caplog.text


def giving_up_controller(closest):
    def controller(messages, tools=None):
        if not any(m.role == "tool" for m in messages):
            return ModelResponse(tool_calls=[ToolCall(name="search", arguments={"query": Q})])
        arguments = {"reason": "no weight for the tent itself", "closest": closest}
        return ModelResponse(tool_calls=[ToolCall(name="give_up", arguments=arguments)])

    return controller


def test_a_give_up_is_judged_by_the_closest_answer_it_offers():
    """A give_up's chance is that of the nearest answer it puts before the user (as a loop's
    best attempt's is), not of the "Could not answer" around it."""
    judge = ScoreEvaluator([0.45])
    loop = AgentLoop(
        giving_up_controller("The tent weighs 2 kg [1]."),
        TableRetriever(TABLE),
        evaluator=judge,
        target_precision=0.5,
    )
    result = loop.run(Q)
    assert result.stop_reason is StopReason.GAVE_UP
    assert result.answer == (
        "Could not answer: no weight for the tent itself. The closest they come: "
        "The tent weighs 2 kg [1]."
    )
    assert [answer for _, _, answer in judge.calls] == ["The tent weighs 2 kg [1]."]
    assert result.probability == 0.45
    assert not result.confident  # a give_up never stands by an answer
    assert result.gaps is not None


def test_a_give_up_without_a_closest_answer_is_judged_as_it_reads():
    judge = ScoreEvaluator([0.1])
    loop = AgentLoop(giving_up_controller("  "), TableRetriever(TABLE), evaluator=judge)
    result = loop.run(Q)
    assert result.answer == "Could not answer: no weight for the tent itself"
    assert [answer for _, _, answer in judge.calls] == [result.answer]


def test_the_offline_loops_stand_by_answers_at_0_8_read_through_the_shipped_calibration():
    from ragloop import KnowledgeBase
    from ragloop.components.heuristics.confidence import offline_calibration
    from ragloop.offline import OFFLINE_TARGET_PRECISION, answered_retrieval_loop

    shipped = offline_calibration()
    assert OFFLINE_TARGET_PRECISION == 0.8
    assert shipped.method == "selective"
    assert shipped.evaluator == "heuristic"
    assert len(shipped.fitted_on.split(", ")) >= 3  # several corpora, none alone decides
    assert shipped.values == sorted(shipped.values)  # a higher score never reads lower
    assert shipped.probability(shipped.score_for(0.8)) >= 0.8
    kb = KnowledgeBase.in_memory(embedder=None)
    for loop in (RAGLoop.offline(kb), answered_retrieval_loop(kb)):
        assert loop.config.target_precision == 0.8
        assert loop.config.calibration == shipped
    assert AgentLoop.offline(kb).calibration == shipped
    own = RAGLoop.offline(kb, calibration=GENEROUS)  # the user's fit replaces it
    assert own.config.calibration == GENEROUS
    assert own.config.target_precision == 0.8
    raw = RAGLoop.offline(kb, confidence_threshold=0.5)  # a threshold: the score as it is
    assert raw.config.calibration is None
