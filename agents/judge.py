"""Peer judges of a duel: a 1–10 score per answer, replied as ``{"score": s}``.

Source: Sparta (Jiang et al., arXiv 2506.04721) and ``shared/docs/protocols.md`` §2: every model
not in the duel scores each answer greedily (max 64 tokens); a reply that does not parse, or
parses outside 1–10, scores 5.0 and is flagged as a parse failure. Sparta shows one answer per
prompt (``presentation="single"``, the default).

Agora additions, each a setting:

* ``shots`` worked exemplars (a wrong answer scored 2, a right one 9) before the real prompt.
  The 135M/270M embedded models rarely reply in the format without them (measured: the base
  Gemma model repeats the prompt); ``shots=0`` is Sparta's prompt alone.
* ``presentation="pair"`` shows both answers (A, B, in duel order) and asks for the score of one;
  ``"both_orders"`` also asks with the order reversed, scores each answer by the mean of its two
  positions, and so measures position bias (:func:`position_bias`).
"""

from __future__ import annotations

import json
import math
import re
from typing import Annotated, Any, Literal, Sequence

from pydantic import model_validator
from typing_extensions import TypedDict

from agora.tasks.errors import InputError
from agora.agents._checks import MaxTokens, Temperature
from agora.models.pool import ModelCallError, ModelPool, SamplingParams
from agora.models.validation import Choice, Count, Number, check_all, settings

Presentation = Literal["single", "pair", "both_orders"]

JUDGE_SYSTEM = ("You are a strict, fair judge. Rate how well the response answers the question, from 1 "
                "(wrong or useless) to 10 (correct and clear). Reply with only a JSON object: {\"score\": s}")
_REPLY_FORMAT = "Reply with only {\"score\": s}, s from 1 to 10."

#: Worked exemplars: (question, good answer, bad answer).
_EXEMPLARS: tuple[tuple[str, str, str], ...] = (
    ("What is 7 + 5?", "7 + 5 = 12. The answer is 12.", "7 + 5 = 13. The answer is 13."),
    ("Name the capital of France.", "The capital of France is Paris.", "France is a large country in Europe."),
)


@settings
class JudgeConfig:
    """Judging settings; defaults from protocols.md §2 (shots and presentation: see module doc).

    Raises:
        ValueError: a bad value (a wrong type, ``True`` for a count, NaN, out of range); the message
            names the field and the value.
    """

    max_tokens: MaxTokens = 64
    """Upper bound on the judge's reply, in tokens."""
    temperature: Temperature = 0.0
    """0 = greedy (a pool member's own ``temperature`` still overrides it)."""
    s_min: Annotated[float, Number()] = 1.0
    s_max: Annotated[float, Number()] = 10.0
    fallback: Annotated[float, Number()] = 5.0
    """Score given for a reply that does not parse (or parses outside ``[s_min, s_max]``)."""
    shots: Annotated[int, Count(0, len(_EXEMPLARS))] = 2
    """Worked judge exemplars before the real prompt (0, 1 or 2)."""
    presentation: Annotated[Presentation, Choice("single", "pair", "both_orders")] = "single"
    """``single``: one answer per prompt (Sparta); ``pair``: both answers, one scored; ``both_orders``:
    ``pair`` in both orders, averaged, to measure position bias."""

    @model_validator(mode="after")
    def _scale(self) -> JudgeConfig:
        if not self.s_min < self.s_max:
            raise InputError(f"JudgeConfig.s_min must be < s_max, got {self.s_min} and {self.s_max}")
        check_all([("fallback", Number(self.s_min, self.s_max), self.fallback)], "JudgeConfig")
        return self


class Judgement(TypedDict):
    """One judge's score of one answer in one presentation."""

    judge: str
    target: str
    """The follower whose answer was scored."""
    slot: int
    """The scored answer's place in the duel (0: first follower, 1: second)."""
    position: int | None
    """Where the scored answer was shown: 0 first, 1 second; ``None`` for ``single``."""
    score: float
    parsed: bool
    """False when the reply did not parse and ``score`` is the fallback."""
    reply: str
    call_id: str


_NUMBER = r"-?\d+(?:\.\d+)?"
_JSON_OBJECT = re.compile(r"\{[^{}]*\}")
_SCORE_FIELD = re.compile(rf"[\"']?score[\"']?\s*(?:[:=]|is)\s*[\"']?({_NUMBER})", re.IGNORECASE)
_BARE = re.compile(rf"^\s*({_NUMBER})\s*(?:/\s*10)?\s*\.?\s*$")


def _number(value: Any) -> float | None:
    """``value`` as a finite float (a JSON number, or a string holding one); ``None`` for anything
    else: a bool, ``NaN``, or a number past a float's range (a runaway ``999…``)."""
    if isinstance(value, bool):
        return None
    try:
        if isinstance(value, (int, float)):
            number = float(value)
        elif isinstance(value, str) and re.fullmatch(_NUMBER, value.strip()):
            number = float(value.strip())
        else:
            return None
    except OverflowError:  # an int beyond a float's range
        return None
    return number if math.isfinite(number) else None


def parse_score(reply: str, cfg: JudgeConfig = JudgeConfig()) -> tuple[float, bool]:
    """A judge reply → ``(score, parsed)``.

    Tried in order: the first JSON object with a numeric ``score``; a ``score: s`` / ``"score": s``
    fragment (e.g. an unclosed object); a reply that is only a number (``7``, ``7/10``). A score
    outside ``[s_min, s_max]`` or no score at all gives ``(fallback, False)``.

    >>> parse_score('{"score": 8}')
    (8.0, True)
    >>> parse_score("I liked it")
    (5.0, False)
    """
    value: float | None = None
    for match in _JSON_OBJECT.finditer(reply):
        try:
            obj = json.loads(match.group(0))
        except ValueError:  # not JSON, or an integer longer than json reads (sys.get_int_max_str_digits())
            continue
        if isinstance(obj, dict) and "score" in obj and (value := _number(obj["score"])) is not None:
            break
    if value is None and (m := _SCORE_FIELD.search(reply)):
        value = float(m.group(1))
    if value is None and (m := _BARE.match(reply)):
        value = float(m.group(1))
    if value is None or not cfg.s_min <= value <= cfg.s_max:
        return cfg.fallback, False
    return value, True


def _single(question: str, answer: str) -> str:
    return f"Question: {question}\n\nResponse to be evaluated: {answer}\n\n{_REPLY_FORMAT}"


def _pair(question: str, first: str, second: str, rate: int) -> str:
    return (f"Question: {question}\n\nResponse A: {first}\n\nResponse B: {second}\n\n"
            f"Rate Response {'AB'[rate]} only. {_REPLY_FORMAT}")


def judge_messages(question: str, shown: Sequence[str], rate: int, cfg: JudgeConfig = JudgeConfig()) -> list[dict]:
    """Chat messages asking for the score of ``shown[rate]``.

    Args:
        question: the instruction.
        shown: one answer (``single``) or two answers in presentation order (``pair``).
        rate: index in ``shown`` of the answer to score.
    """
    messages = [{"role": "system", "content": JUDGE_SYSTEM}]
    for i, (q, good, bad) in enumerate(_EXEMPLARS[: cfg.shots]):
        # exemplar 0 scores a wrong answer 2, exemplar 1 a right answer 9
        if len(shown) == 1:
            user = _single(q, bad if i == 0 else good)
        else:
            user = _pair(q, bad, good, rate=i)
        messages += [{"role": "user", "content": user}, {"role": "assistant", "content": '{"score": %d}' % (2, 9)[i]}]
    user = _single(question, shown[0]) if len(shown) == 1 else _pair(question, shown[0], shown[1], rate)
    return messages + [{"role": "user", "content": user}]


class Judge:
    """A pool member judging duels.

    Args:
        pool: the model pool; name: the judging member; config: settings.
    """

    def __init__(self, pool: ModelPool, name: str, config: JudgeConfig = JudgeConfig()):
        pool[name]  # KeyError naming the pool when absent
        self.pool, self.name, self.config = pool, name, config

    def score(self, question: str, answers: Sequence[tuple[str, str]], *,
              context: dict[str, Any] | None = None) -> tuple[list[Judgement], list[dict[str, Any]]]:
        """Score both answers of a duel.

        Args:
            question: the instruction.
            answers: ``(model, text)`` of the two followers, in duel order.
            context: fields copied into each trace record (question_id, node, ...).

        Returns:
            ``(judgements, records)``: one judgement per answer and presentation order, and the
            trace records (``role="judge"``, ``partner`` = the model(s) whose answers were shown).

        Raises:
            ModelCallError: the judge gave no reply after the pool's retries.
        """
        cfg = self.config
        params = SamplingParams(n=1, temperature=cfg.temperature, top_p=1.0, max_tokens=cfg.max_tokens, seed=0)
        orders: list[tuple[int, ...]] = {"single": [], "pair": [(0, 1)], "both_orders": [(0, 1), (1, 0)]}[
            cfg.presentation]
        judgements: list[Judgement] = []
        records: list[dict[str, Any]] = []
        for slot, (target, _text) in enumerate(answers):
            views = [((slot,), None)] if not orders else [(order, order.index(slot)) for order in orders]
            for order, position in views:
                shown = [answers[s][1] for s in order]
                partner = ",".join(answers[s][0] for s in order)
                samples, recs = self.pool.sample(
                    self.name, judge_messages(question, shown, 0 if position is None else position, cfg), params,
                    context={**(context or {}), "role": "judge", "partner": partner})
                records += recs
                if not samples:
                    raise ModelCallError(f"judge {self.name} gave no reply after retries", records)
                score, parsed = parse_score(samples[0].text, cfg)
                judgements.append(Judgement(judge=self.name, target=target, slot=slot, position=position,
                                            score=score, parsed=parsed, reply=samples[0].text,
                                            call_id=samples[0].call_id))
        return judgements, records


def judge_means(judgements: Sequence[Judgement]) -> list[dict[str, float]]:
    """Per answer slot (0, 1): judge → mean of its scores over presentation orders."""
    sums: list[dict[str, list[float]]] = [{}, {}]
    for j in judgements:
        sums[j["slot"]].setdefault(j["judge"], []).append(j["score"])
    return [{judge: sum(v) / len(v) for judge, v in slot.items()} for slot in sums]


def position_bias(judgements: Sequence[Judgement]) -> float | None:
    """Mean of (score shown first − score shown second) over judge×answer pairs scored in both
    orders; ``None`` when no answer was (``single`` or ``pair`` presentation)."""
    seen: dict[tuple[str, int], dict[int, float]] = {}
    for j in judgements:
        if j["position"] is not None:
            seen.setdefault((j["judge"], j["slot"]), {})[j["position"]] = j["score"]
    diffs = [v[0] - v[1] for v in seen.values() if len(v) == 2]
    return sum(diffs) / len(diffs) if diffs else None
