"""What the CLI prints of recorded text, the run settings it refuses as input, the next command it
prints, how a stopped worker leaves a shared run, and misspelt graph input keys."""

from __future__ import annotations

import pytest
import typer


# ---------------------------------------------------------------------------- run settings are input

@pytest.mark.parametrize("call, said", [
    (lambda: __import__("agora.graphs.runner", fromlist=["run_problems"]).run_problems(
        None, [], store=None, run_id="r", protocol="p", context=None, config=None, pool_description=None,
        dataset={}, concurrency=0), "concurrency must be an integer >= 1, got 0"),
    (lambda: __import__("agora.graphs.runner", fromlist=["run_problems"]).run_problems(
        None, [], store=None, run_id="r", protocol="p", context=None, config=None, pool_description=None,
        dataset={}, durability="fast"), "durability must be one of sync, async, exit, got 'fast'"),
    (lambda: __import__("agora.graphs.runner", fromlist=["run_protocol"]).run_protocol("duel", []),
     "protocol 'duel' is a "),
    (lambda: __import__("agora.traces.claims", fromlist=["lease_s"]).lease_s(),
     "AGORA_LEASE_S='soon': a lease is a number of seconds"),
])
def test_run_settings_refused_as_input_not_as_a_bug(monkeypatch, capsys, call, said):
    """These refusals were plain ValueErrors, which the CLI prints as an 'internal error' with a
    traceback (exit 1); they are input: one 'error:' line, exit 2."""
    from agora.cli._shared import user_errors

    monkeypatch.setenv("AGORA_LEASE_S", "soon")
    monkeypatch.setenv("COLUMNS", "400")
    with pytest.raises(typer.Exit) as stopped:
        with user_errors():
            call()
    assert stopped.value.exit_code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("error: " + said) and "internal error" not in err, err
