"""Traces you can trust from inside an app (round 13 probes): a recorder given no ``pool=`` is refused
before any model is asked, question ids that differ only by white space or by Unicode compatibility
forms (NFKC) are refused as one id, a late branch's samples are written once; and the training
commands' refusals of ``--seed`` and of GRPO's group size name their options. Models are the user's own
``ChatOpenAI`` clients on the loopback OpenAI stub (tests/openai_stub.py); nothing real is loaded."""

import json

import pytest
from typer.testing import CliRunner

from agora.cli.main import app
from test_cli_training_options import fake_pool, lines

# ------------------------------------------------------------------ --seed and GRPO's group size


def _evolve(tmp_path, monkeypatch, *flags):
    import agora.cli.evolve as evolve_cli

    monkeypatch.setattr(evolve_cli, "require_train_extra", lambda: None, raising=False)  # as with the extra installed
    instructions = tmp_path / "i.jsonl"
    instructions.write_text(json.dumps({"id": "i1", "prompt": "2+3?"}) + "\n")
    return CliRunner().invoke(app, ["evolve", "--instructions", str(instructions), "--pool", str(fake_pool(tmp_path)),
                                    "--db", str(tmp_path / "t.db"), "--out", str(tmp_path / "o"), *flags])


def _train_grpo(tmp_path, *flags):
    return CliRunner().invoke(app, ["train", "grpo", "--model", "a", "--pool", str(fake_pool(tmp_path)), "--data",
                                    "synthetic", "--data-only", "--out", str(tmp_path / "o"), *flags])


SEED_REFUSED = ("error: --seed: {cls}.seed must be an integer in [0, 4294967295] (numpy's and torch's seeds are "
                "32-bit), got 4294967296")


def test_an_evolve_seed_beyond_32_bits_is_refused_before_any_duel(tmp_path, monkeypatch):
    """Before: the duels were played and recorded, then training's ``set_seed`` failed inside numpy
    (``Seed must be between 0 and 2**32 - 1``)."""
    result = _evolve(tmp_path, monkeypatch, "--seed", str(2**32))
    assert result.exit_code == 2, result.output
    assert lines(result) == [SEED_REFUSED.format(cls="DPOSettings")]
    assert not (tmp_path / "t.db").exists() and not (tmp_path / "o").exists()


def test_a_train_seed_beyond_32_bits_is_the_same_one_line_refusal(tmp_path):
    """Before: Typer's usage box (``Input should be less than or equal to 4294967295``), unlike evolve's."""
    result = _train_grpo(tmp_path, "--seed", str(2**32))
    assert result.exit_code == 2, result.output
    assert lines(result) == [SEED_REFUSED.format(cls="GRPOSettings")]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("seed", [-1, 2**32, 2**64])
def test_training_settings_refuse_a_seed_numpy_cannot_take(seed):
    from agora.training.config import DPOSettings, GRPOSettings, SFTSettings

    for cls in (DPOSettings, GRPOSettings, SFTSettings):
        with pytest.raises(ValueError, match=rf"^seed must be an integer in \[0, 4294967295\] .*, got {seed}$"):
            cls(seed=seed)
    assert DPOSettings(seed=2**32 - 1).seed == 2**32 - 1


def test_the_seeds_of_run_and_bench_protocols_take_any_integer():
    """``agora run`` and ``agora bench`` mix their ``--seed`` into each call's seed modulo 2**31 - 1
    (:func:`agora.agents.seeds.item_seed`): a seed beyond 32 bits is a seed, not refused."""
    from agora.agents.delegation import DelegationConfig
    from agora.agents.seeds import SEED_MODULUS, item_seed

    assert DelegationConfig(seed=2**64).seed == 2**64
    assert 0 <= item_seed(2**64, "q1") < SEED_MODULUS and 0 <= item_seed(-(2**64), "q1") < SEED_MODULUS


GROUPS_REFUSED = ("error: --batch-size, --grad-accum, --num-generations: GRPOSettings: batch_size × grad_accum "
                  "(3 × 1) must be divisible by num_generations ({g})")


@pytest.mark.parametrize("flags, g", [(("--batch-size", "3", "--num-generations", "2"), 2), (("--batch-size", "3"), 4)])
def test_grpos_group_size_refusal_names_the_options(tmp_path, flags, g):
    """Before: ``error: batch_size × grad_accum (3 × 1) must be divisible by num_generations (2)``,
    naming no option, while single-field refusals do (``--lr: ...``)."""
    result = _train_grpo(tmp_path, *flags)
    assert result.exit_code == 2, result.output
    assert lines(result) == [GROUPS_REFUSED.format(g=g)]
    assert not (tmp_path / "o").exists()


def test_evolves_grpo_group_size_refusal_names_the_options(tmp_path, monkeypatch):
    result = _evolve(tmp_path, monkeypatch, "--algo", "grpo", "--batch-size", "3")
    assert result.exit_code == 2, result.output
    assert lines(result) == [GROUPS_REFUSED.format(g=4)]
    assert not (tmp_path / "t.db").exists()
