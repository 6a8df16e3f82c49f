"""Panel analysis: Δ_m, distances, agreement, panel search against brute force, persona members."""

import itertools
import math

import numpy as np
import pytest

from agora.agents.panel import DiversityConfig, analyse, answer_agreement, partner_shift
from agora.agents.panel_choice import behavioural_distance, family_distance, optimal_panels, panel_total
from agora.agents.personas import converse_default_specs, persona_specs
from agora.models.pool import ModelSpec


def test_partner_shift_hand_computed():
    assert partner_shift({"b": 2.0, "c": 2.36}) == pytest.approx(0.18)  # the paper's 18%
    assert partner_shift({"b": 4.0, "c": 5.0, "d": 6.0}) == pytest.approx(0.5)
    assert partner_shift({"b": 4.0, "c": math.nan, "d": 5.0}) == pytest.approx(0.25)
    assert math.isnan(partner_shift({"b": 3.0}))
    assert math.isnan(partner_shift({"b": 0.0, "c": 0.0}))
    assert partner_shift({"b": 0.0, "c": 1.0}) == math.inf


def row(speaker, partner, text, question="q1", answer=None, role="speaker"):
    return {"speaker": speaker, "partner": partner, "text": text, "question_key": question, "answer": answer,
            "role": role}


def test_delta_m_on_a_constructed_table():
    rows = (
        [row("a", "b", "maybe it is 4")] * 5            # 1 hedge / 4 tokens = 25 per 100
        + [row("a", "c", "maybe it is 4 now")] * 5      # 1 hedge / 5 tokens = 20 per 100
        + [row("a", "d", "maybe maybe")] * 2            # 100 per 100, but only 2 turns: not used
        + [row("a", None, "it is 4")] * 3               # no partner: not a partner condition
        + [row("b", "a", "It is 4.")] * 6
        + [row("c", "a", "I think I disagree.")] * 6
        + [row("c", "b", '{"score": 7}', role="judge")] * 9  # judges are left out
    )
    report = analyse(rows, {"a": "x", "b": "x", "c": "y"}, DiversityConfig(min_turns=5, resamples=200))
    cells = {(c.speaker, c.partner): c for c in report.cells}
    assert ("c", "b") not in cells
    ab, ad = cells[("a", "b")], cells[("a", "d")]
    assert (ab.turns, ab.enough, ab.mean_tokens) == (5, True, 4.0)
    assert (ab.cues["hedging"].mean, ab.cues["hedging"].low, ab.cues["hedging"].high) == (25.0, 25.0, 25.0)
    assert (ad.turns, ad.enough, ad.cues["hedging"].mean) == (2, False, 100.0)
    assert cells[("c", "a")].cues["hedging"].mean == pytest.approx(25.0)   # i think / 4 tokens
    assert cells[("c", "a")].cues["challenge"].mean == pytest.approx(25.0)  # i disagree
    shift = next(s for s in report.shifts if s.speaker == "a" and s.cue == "hedging")
    assert (shift.partners, shift.low_partner, shift.low, shift.high_partner, shift.high) == (2, "c", 20.0, "b", 25.0)
    assert shift.shift == pytest.approx(0.25)
    only_one = next(s for s in report.shifts if s.speaker == "b" and s.cue == "hedging")
    assert only_one.partners == 1 and math.isnan(only_one.shift)
    # per-model features over all of a model's responses: a has 5×25 + 5×20 + 2×100 + 3×0 over 15
    assert report.features["a"]["hedging"] == pytest.approx((125 + 100 + 200) / 15)
    assert report.features["a"]["turns"] == 15


def test_bootstrap_interval_is_the_percentile_interval_of_resampled_means():
    rows = [row("a", "b", t) for t in ["maybe it is 4", "it is 4 ok", "maybe it is 4", "it is 4 ok", "it is 4 ok"]]
    cell = analyse(rows, config=DiversityConfig(min_turns=1, resamples=500)).cells[0]
    est = cell.cues["hedging"]
    assert est.mean == pytest.approx(10.0)  # (25 + 25 + 0 + 0 + 0) / 5
    assert 0.0 <= est.low < 10.0 < est.high <= 25.0


def test_empty_responses_have_no_rate():
    rows = [row("a", "b", ""), row("a", "b", "maybe it is 4")]
    cell = analyse(rows, config=DiversityConfig(min_turns=1, resamples=50)).cells[0]
    assert (cell.turns, cell.empty, cell.mean_tokens, cell.cues["hedging"].mean) == (2, 1, 2.0, 25.0)


def test_answer_agreement_uses_each_models_plurality_answer():
    rows = [
        row("a", None, "", "q1", "4"), row("a", "b", "", "q1", "5"), row("a", "b", "", "q1", "4"),
        row("b", "a", "", "q1", "4"),
        row("a", None, "", "q2", "7"), row("b", None, "", "q2", "8"), row("c", None, "", "q2", "8"),
        row("c", None, "", "q3", None),
    ]
    rates, counts = answer_agreement(rows, ["a", "b", "c"])
    assert counts.tolist() == [[2, 2, 1], [2, 2, 1], [1, 1, 1]]
    assert rates[0, 1] == pytest.approx(0.5)  # q1 agree (4 = 4), q2 disagree
    assert rates[1, 2] == 1.0 and rates[0, 2] == 0.0
    assert np.allclose(np.diag(rates), 1.0)
    lonely, n = answer_agreement([row("x", None, "", "q9", None)], ["x"])
    assert n[0, 0] == 0 and math.isnan(lonely[0, 0])


def test_behavioural_distance_hand_computed():
    features = np.array([[0.0, 10.0, 5.0], [1.0, 10.0, 5.0], [2.0, 30.0, 5.0]])  # last column constant: left out
    agreement = np.array([[1.0, 0.5, np.nan], [0.5, 1.0, 1.0], [np.nan, 1.0, 1.0]])
    d = behavioural_distance(features, agreement)
    assert d[0, 1] == pytest.approx(math.sqrt((0.5**2 + 0 + 0.5**2) / 3))
    assert d[0, 2] == pytest.approx(math.sqrt((1 + 1) / 2))  # no agreement term
    assert d[1, 2] == pytest.approx(math.sqrt((0.5**2 + 1 + 0) / 3))
    assert np.allclose(d, d.T) and np.allclose(np.diag(d), 0)
    with_nan = behavioural_distance(np.array([[1.0], [np.nan], [3.0]]), np.full((3, 3), np.nan))
    assert with_nan[0, 2] == pytest.approx(1.0) and math.isnan(with_nan[0, 1])
    with pytest.raises(ValueError, match="3x3"):
        behavioural_distance(features, np.zeros((2, 2)))


def brute_force(d, size):
    best, arg = -1.0, []
    for combo in itertools.combinations(range(len(d)), size):
        total = sum(d[i][j] for i in combo for j in combo if i < j)
        if total > best + 1e-9:
            best, arg = total, [combo]
        elif abs(total - best) <= 1e-9:
            arg.append(combo)
    return best, arg


@pytest.mark.parametrize("seed,m,size", [(0, 6, 2), (1, 7, 3), (2, 8, 4), (3, 5, 5)])
def test_exact_panel_equals_brute_force(seed, m, size):
    rng = np.random.default_rng(seed)
    x = rng.random((m, m))
    d = (x + x.T) / 2
    np.fill_diagonal(d, 0)
    panels, exact = optimal_panels(d, size)
    best, arg = brute_force(d.tolist(), size)
    assert exact and panels == arg
    assert panel_total(d, panels[0]) == pytest.approx(best)


def test_ties_are_all_returned_in_order_and_local_search_finds_a_planted_panel():
    d = 1 - np.eye(4)  # every panel ties
    panels, exact = optimal_panels(d, 2)
    assert exact and panels == [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
    planted = np.full((9, 9), 0.1)
    for i, j in itertools.combinations([1, 4, 7], 2):
        planted[i, j] = planted[j, i] = 1.0
    np.fill_diagonal(planted, 0)
    panels, exact = optimal_panels(planted, 3, max_exact=10)
    assert not exact and panels == [(1, 4, 7)]
    with pytest.raises(ValueError, match="panel size"):
        optimal_panels(d, 5)


def test_family_only_choice_ignores_behaviour():
    names = ["a", "a-cautious", "b", "b-cautious"]
    fam = family_distance(names, {"a": "x", "a-cautious": "x", "b": "y", "b-cautious": "y"})
    assert fam.tolist() == [[0, 0, 1, 1], [0, 0, 1, 1], [1, 1, 0, 0], [1, 1, 0, 0]]
    assert family_distance(["p", "q"], {})[0, 1] == 1.0  # unknown family: its own
    panels, _ = optimal_panels(fam, 2)
    assert panels == [(0, 2), (0, 3), (1, 2), (1, 3)]


def test_analyse_suggests_the_behaviourally_distant_panel_beside_the_family_one():
    # a and a-cautious share a family but behave differently; b behaves like a.
    rows = []
    for q in range(6):
        rows += [row("a", "b", "the answer is 4", f"q{q}", "4"),
                 row("a-cautious", "b", "maybe perhaps it might be 4 i think", f"q{q}", "5"),
                 row("b", "a", "the answer is 4", f"q{q}", "4")]
    report = analyse(rows, {"a": "x", "a-cautious": "x", "b": "y"}, DiversityConfig(panel_size=2, resamples=50),
                     model_order=["a", "a-cautious", "b"])
    assert report.models == ["a", "a-cautious", "b"]
    assert report.distance[0, 2] == pytest.approx(0.0)
    p = report.panel
    assert p.exact and set(p.members) in ({"a", "a-cautious"}, {"a-cautious", "b"})
    assert p.family_members == ("a", "b") and p.family_total == pytest.approx(0.0)
    assert p.family_ties == 2 and p.family_total_range[0] == pytest.approx(0.0)
    assert p.total > 0.9
    small = analyse(rows, {}, DiversityConfig(panel_size=5, resamples=10))
    assert small.panel.size == 3 and any("only 3 models" in n for n in small.notes)
    assert any("no family label" in n for n in small.notes)


def test_analyse_without_partners_or_rows():
    report = analyse([row("a", None, "hi", answer="1"), row("b", None, "maybe", answer="2")],
                     config=DiversityConfig(resamples=10))
    assert all(c.partner is None for c in report.cells)
    assert any("no response saw another model" in n for n in report.notes)
    assert report.as_dict()["panel"]["members"] == ["a", "b"]
    empty = analyse([], config=DiversityConfig(resamples=10))
    assert empty.models == [] and empty.panel is None and empty.distance.shape == (0, 0)


@pytest.mark.parametrize("kwargs", [{"min_turns": 0}, {"panel_size": 1}, {"level": 1.0}, {"resamples": 0},
                                    {"max_exact": 0}])
def test_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        DiversityConfig(**kwargs)


def test_persona_variants_share_weights_and_family():
    base = ModelSpec(name="m", backend="llamacpp", path="builtin:smollm2", system_prompt="Be brief.")
    (v,) = persona_specs([base], {"blunt": "Say it plainly."})
    assert (v.name, v.path, v.family, v.system_prompt) == ("m-blunt", base.path, "m", "Be brief.\n\nSay it plainly.")
    specs = converse_default_specs("tiny")
    assert [s.name for s in specs] == ["smollm2-135m", "gemma3-270m", "smollm2-135m-cautious", "gemma3-270m-cautious"]
    assert [s.family for s in specs] == ["smollm2", "gemma3", "smollm2", "gemma3"]
    assert specs[2].path == specs[0].path and specs[2].system_prompt and not specs[0].system_prompt
