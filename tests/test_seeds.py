"""Every seed from one place (agents/seeds.py, issue 17 item 3): the values each node drew before the
move, by hand, so no run's samples changed."""

import zlib

import pytest

from agora.agents.escalation import EscalationConfig
from agora.agents.seeds import NODES, SeedNode, call_seed, item_seed, sampling
from agora.graphs.question import question_seed


def by_hand(base, qid):
    return (base * 1_000_003 + zlib.crc32(qid.encode())) % (2**31 - 1)


def test_item_seed_is_the_crc_formula_and_question_seed_is_it():
    assert item_seed(0, "q1") == zlib.crc32(b"q1") % (2**31 - 1)
    assert item_seed(7, "gsm8k-12") == by_hand(7, "gsm8k-12") == question_seed(7, "gsm8k-12")


@pytest.mark.parametrize("node, agent, step, offset", [
    ("align.agent", 2, 0, 2000),          # + 1000 · agent
    ("comed.anchor", 0, 0, 0),
    ("comed.probe", 0, 0, 101),
    ("comed.peer", 1, 0, 202),            # + 201 + i
    ("moa.proposer", 2, 0, 303),          # + 301 + i
    ("moa.aggregator", 0, 0, 401),
    ("debate.round", 10, 1, 560),         # + 500 + 50 · round + offset
    ("conversation.turn", 0, 3, 3),       # + turn
    ("duel.respond", 1, 0, 1),            # + slot
    ("cupid.answer", 0, 0, 0),
])
def test_each_node_draws_the_seed_it_drew_before(node, agent, step, offset):
    assert call_seed(3, "q9", node, agent=agent, step=step) == by_hand(3, "q9") + offset


def test_unknown_node_is_named_and_an_own_node_is_accepted():
    with pytest.raises(KeyError, match="unknown seed node 'moa.nope'; known: align.agent"):
        call_seed(0, "q", "moa.nope")
    assert call_seed(0, "q", SeedNode(900, agent_stride=5), agent=2) == by_hand(0, "q") + 910
    # the nodes one COMED question runs (anchor, probe, peers, MoA, debate) start 100 apart: no shared stream
    comed = [NODES[n].offset for n in ("comed.anchor", "comed.probe", "comed.peer", "moa.proposer",
                                       "moa.aggregator", "debate.round")]
    assert comed == [0, 101, 201, 301, 401, 500]


def test_sampling_takes_the_settings_and_overrides():
    cfg = EscalationConfig(temperature=0.5, top_p=0.9, max_tokens=77)
    p = sampling(cfg, n=3, seed=11)
    assert (p.n, p.temperature, p.top_p, p.max_tokens, p.seed) == (3, 0.5, 0.9, 77, 11)
    probe = sampling(cfg, seed=1, temperature=0.0, top_p=1.0, max_tokens=5)
    assert (probe.temperature, probe.top_p, probe.max_tokens) == (0.0, 1.0, 5)

    class NoTopP:  # CUPID's settings have no top_p: SamplingParams' default stays
        temperature, max_tokens = 0.3, 9
    assert sampling(NoTopP(), seed=0).top_p == 0.95
