"""Probes of bad input, round 8: a refused setting named by the option the user typed, a member
named twice in --models, a relative pool path that is a folder, control characters in --json
output, a bundle whose data lines were altered, unknown pool-file fields."""

from __future__ import annotations

from cli_runs import agora, one_error_line


def test_a_refused_setting_names_the_option_that_was_typed(tmp_path):
    """It named only the settings field (DelegationConfig.n_agents), not -n/--agents."""
    code, output = agora("run", "align", "-n", "100", "--format", "synthetic", "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output) == ("error: -n/--agents: DelegationConfig.n_agents must be at most 64 (each agent is "
                                      "a branch of every question), got 100")
    assert not (tmp_path / "t.db").exists()


def test_a_refused_setting_of_a_generated_command_names_its_option(tmp_path):
    """Commands made from a settings class (agora run debate) name the option too."""
    code, output = agora("run", "debate", "--rounds", "100000", "--format", "synthetic", "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output) == ("error: --rounds: DebateConfig.rounds must be at most 10 (each question costs "
                                      "agents × rounds model calls), got 100000")
