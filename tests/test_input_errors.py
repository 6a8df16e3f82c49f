"""Bad input told apart from Agora's own bugs, settings checked by rule, replay of shared SLM-MUX
samples, and tables that fold long ids in a narrow terminal."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize("kwargs, message", [
    ({"lam": "x"}, "BenchConfig.lam must be a finite number >= 0, got 'x'"),
    ({"lam": -0.5}, "BenchConfig.lam must be a finite number >= 0, got -0.5"),
    ({"lam": float("inf")}, "BenchConfig.lam must be a finite number >= 0, got inf"),
    ({"max_calls": True}, "BenchConfig.max_calls must be a finite number >= 0 or None, got True"),
    ({"max_calls": "3"}, "BenchConfig.max_calls must be a finite number >= 0 or None, got '3'"),
    ({"router_k": "5"}, "BenchConfig.router_k must be an integer >= 1, got '5'"),
    ({"router_k": 0}, "BenchConfig.router_k must be an integer >= 1, got 0"),
    ({"router_k": 2.0}, "BenchConfig.router_k must be an integer >= 1, got 2.0"),
    ({"embedding": "bert"}, "BenchConfig.embedding must be one of 'auto', 'minilm', 'tfidf', got 'bert'"),
    ({"embedding": None}, "BenchConfig.embedding must be one of 'auto', 'minilm', 'tfidf', got None"),
    ({"durability": "fast"}, "BenchConfig.durability must be one of 'async', 'sync', 'exit', got 'fast'"),
    ({"shared": 1}, "BenchConfig.shared must be True or False, got 1"),
    ({"matched_single": "yes"}, "BenchConfig.matched_single must be True or False, got 'yes'"),
    ({"thresholds_source": 3}, "BenchConfig.thresholds_source must be a non-empty string, got 3"),
    ({"align": {}}, "BenchConfig.align must be a DelegationConfig, got {}"),
    ({"comed": None}, "BenchConfig.comed must be an EscalationConfig, got None"),
])
def test_bench_config_fields_are_checked_by_rule(kwargs, message):
    """These fields took anything from Python (a string λ reached the calibration's arithmetic)."""
    from agora.runs.bench_plan import BenchConfig

    with pytest.raises(ValueError) as err:
        BenchConfig(**kwargs)
    assert str(err.value) == message


def test_bench_config_accepts_good_values():
    from agora.agents.delegation import DelegationConfig
    from agora.runs.bench_plan import BenchConfig

    c = BenchConfig(lam=0, max_calls=2.5, router_k=3, embedding="tfidf", durability="sync", shared=True,
                    align=DelegationConfig(n_agents=3))
    assert (c.lam, c.max_calls, c.router_k, c.embedding, c.durability, c.shared, c.align.n_agents) == (
        0, 2.5, 3, "tfidf", "sync", True, 3)
    assert BenchConfig().lam == 0.01 and BenchConfig().max_calls is None
