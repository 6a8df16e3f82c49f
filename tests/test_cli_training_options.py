"""A bad value given to ``agora train dpo|grpo`` or ``agora evolve`` is refused in one line led by
the option the user typed (the commands record which option sets each settings field), before any
model is loaded, run recorded or output written. No model is loaded: ``--data-only`` and a pool of
fake chat models."""

import json

import pytest
from typer.testing import CliRunner

from agora.cli.main import app

FAKE = "langchain_core.language_models.fake_chat_models:FakeListChatModel"


def fake_pool(tmp_path, names=("a", "b", "c")):
    path = tmp_path / "pool.toml"
    path.write_text("".join(f'[[models]]\nname = "{m}"\nbackend = "langchain"\nclass = "{FAKE}"\n'
                            f'kwargs = {{responses = ["The answer is 4."]}}\n\n' for m in names))
    return path


def lines(result) -> list[str]:
    return [line for line in result.output.splitlines() if line.strip()]


@pytest.mark.parametrize("flags, message", [
    (("--lr", "0"), "error: --lr: DPOSettings.learning_rate must be > 0, got 0.0"),
    (("--beta", "-1"), "error: --beta: DPOSettings.beta must be > 0, got -1.0"),
    (("--epochs", "0"), "error: --epochs: DPOSettings.epochs must be > 0 unless max_steps is set"),
])
def test_train_dpo_names_the_option_of_a_bad_setting(tmp_path, duel_pairs_db, flags, message):
    result = CliRunner().invoke(app, ["train", "dpo", "--model", "a", "--data-only", "--db", str(duel_pairs_db),
                                      "--out", str(tmp_path / "o"), *flags])
    assert result.exit_code == 2, result.output
    assert lines(result) == [message]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("flags, message", [
    (("--lr", "0"), "error: --lr: GRPOSettings.learning_rate must be > 0, got 0.0"),
    # nan is refused as the option is parsed, before any setting is built
    (("--epochs", "nan"), "error: --epochs: must be a finite number, got nan"),
])
def test_train_grpo_names_the_option_of_a_bad_setting(tmp_path, flags, message):
    result = CliRunner().invoke(app, ["train", "grpo", "--model", "a", "--pool", str(fake_pool(tmp_path)),
                                      "--data", "synthetic", "--data-only", "--out", str(tmp_path / "o"), *flags])
    assert result.exit_code == 2, result.output
    assert lines(result) == [message]
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("flags, message", [
    (("--algo", "ppo"), "error: --algo: EvolveConfig.algorithm must be 'dpo', 'grpo' or 'sft', got 'ppo'"),
    (("--algo", "grpo", "--reward", "bleu"), "error: --reward: EvolveConfig.rewards must name judge, correctness or stored, "
                           "got ('bleu',)"),
    (("--lr", "0"), "error: --lr: DPOSettings.learning_rate must be > 0, got 0.0"),
])
def test_evolve_names_the_option_of_a_bad_setting(tmp_path, monkeypatch, flags, message):
    import agora.cli.evolve as evolve_cli

    monkeypatch.setattr(evolve_cli, "require_train_extra", lambda: None, raising=False)  # as with the extra installed
    instructions = tmp_path / "i.jsonl"
    instructions.write_text(json.dumps({"id": "i1", "prompt": "2+3?"}) + "\n")
    db = tmp_path / "t.db"
    result = CliRunner().invoke(app, ["evolve", "--instructions", str(instructions), "--pool", str(fake_pool(tmp_path)),
                                      "--db", str(db), "--out", str(tmp_path / "o"), *flags])
    assert result.exit_code == 2, result.output
    assert lines(result) == [message]
    assert not db.exists() and not (tmp_path / "o").exists()
