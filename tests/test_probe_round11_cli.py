"""Probes of the CLI, round 11: a refused value is named by where it came from, as recorded when the
settings were built (the option typed, or the ``--config`` file, its table, key and line), not guessed
from the value; SLM-MUX's dev run named in a ``--config`` file; no private name imported across
modules. No model is asked: the pool's members are a server that is not there."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from cli_runs import agora, one_error_line


def _pool(tmp_path):
    """A pool file of two members, m1 and m2, of a server that is not there (nothing is asked)."""
    pool = tmp_path / "pool.toml"
    pool.write_text("".join(f'[[models]]\nname = "{m}"\nbackend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
                            f'model = "{m}"\n' for m in ("m1", "m2")))
    return pool


def _run(tmp_path, command, text, *extra):
    config = tmp_path / "run.toml"
    config.write_text(text)
    code, output = agora("run", command, "--format", "synthetic", "--pool", _pool(tmp_path), "--config", config,
                         "--db", tmp_path / "t.db", *extra)
    assert code == 2, output
    assert not (tmp_path / "t.db").exists()
    return config, one_error_line(output)


# ----------------------------------------------------------------------------- the line of a --config value


@pytest.mark.parametrize("command, text, line, message", [
    # refused by the settings themselves
    ("debate", "# my debate\n\n[debate]\nagents = 2\nrounds = 100000\n", 5,
     "[debate] DebateConfig.rounds must be at most 10 (each question costs agents × rounds model calls), got 100000"),
    # refused by the pool, after the settings were built; another table before it
    ("moa", '[debate]\nrounds = 2\n\n[moa]\naggregator = "m1"\nproposers = [\n  "zz",\n  "m1",\n]\n', 6,
     "[moa] MoAConfig.proposers: 'zz' is not in the pool (m1, m2)"),
    # a key written dotted at the top level, and a quoted key
    ("council", 'council.chair = "zz"\n', 1, "[council] CouncilConfig.chair: 'zz' is not in the pool (m1, m2)"),
    ("council", '[council]\n"chair" = "zz"\n', 2, "[council] CouncilConfig.chair: 'zz' is not in the pool (m1, m2)"),
    # a field the settings do not have
    ("moa", "# run settings\n[moa]\nrounds = 3\n", 3, "[moa] MoAConfig: unknown field(s) rounds"),
    # a nested table's key: its own table named
    ("comed", '[comed]\nanchor = "m1"\n\n[comed.thresholds]\ntau_hi = 0.5\ntau_lo = 0.9\n', 6,
     "[comed.thresholds] EscalationThresholds.tau_lo (0.9) must be <= tau_hi (0.5)"),
])
def test_a_refused_config_file_value_names_its_line(tmp_path, command, text, line, message):
    """The file and table were named, not the line (tomllib keeps no positions)."""
    config, error = _run(tmp_path, command, text)
    assert error == f"error: --config {config}:{line}: {message}"


def test_a_typed_option_beside_a_config_file_is_named_not_the_file(tmp_path):
    """``--rounds 100000`` typed beside ``--config`` was refused as the file's (``--config run.toml:
    [debate] DebateConfig.rounds ...``), though the file does not set rounds."""
    _, error = _run(tmp_path, "debate", "[debate]\nagents = 2\n", "--rounds", "100000")
    assert error == ("error: --rounds: DebateConfig.rounds must be at most 10 (each question costs agents × rounds "
                     "model calls), got 100000")


def test_a_file_value_the_command_line_overrides_is_not_named(tmp_path):
    """The file's ``proposers`` lost to ``--proposers`` typed: the option is named, not the file."""
    _, error = _run(tmp_path, "moa", '[moa]\nproposers = ["m1"]\n', "--proposers", "m2,zz")
    assert error == "error: --proposers: MoAConfig.proposers: 'zz' is not in the pool (m1, m2)"


# ----------------------------------------------------------------------------- SLM-MUX's dev run in a --config file


def test_slm_mux_dev_db_of_a_config_file_is_named_by_the_file(tmp_path, monkeypatch):
    """``dev_run``/``dev_db`` given in ``--config`` were refused as ``dev run 'R0': trace database
    missing.db not found``: neither the file nor the key was named."""
    monkeypatch.chdir(tmp_path)
    config, error = _run(tmp_path, "slm-mux", '[slm-mux]\ndev_run = "R0"\ndev_db = "missing.db"\n')
    assert error == (f"error: --config {config}:3: [slm-mux] SLMMuxConfig.dev_db: dev run 'R0': trace database "
                     "missing.db not found")


def test_slm_mux_dev_run_of_a_config_file_missing_from_its_db_is_named_by_the_file(tmp_path, monkeypatch):
    from agora.traces.store import TraceStore

    monkeypatch.chdir(tmp_path)
    dev = tmp_path / "dev.db"
    TraceStore(dev).close()
    config, error = _run(tmp_path, "slm-mux", f'[slm-mux]\ndev_db = "{dev}"\n\ndev_run = "R0"\n')
    assert error == f"error: --config {config}:4: [slm-mux] SLMMuxConfig.dev_run: dev run 'R0': no such run in {dev}"


def test_slm_mux_typed_dev_db_is_named_by_its_option(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _, error = _run(tmp_path, "slm-mux", '[slm-mux]\ndev_run = "R0"\n', "--dev-db", "missing.db")
    assert error == "error: --dev-db: SLMMuxConfig.dev_db: dev run 'R0': trace database missing.db not found"


# ----------------------------------------------------------------------------- the key-line scan itself


@pytest.mark.parametrize("text, path, line", [
    ("[moa]\nseed = 1\n", ("moa", "seed"), 2),
    ("[moa]\nseed = 1\n", ("moa",), 1),
    ("[ moa ]  # the MoA table\n  seed=1\n", ("moa", "seed"), 2),
    ('["slm-mux"]\nseed = 1\n', ("slm-mux", "seed"), 2),
    ("[a]\nseed = 1\n[moa]\nseed = 2\n", ("moa", "seed"), 4),
    ('[moa]\nnote = """\nseed = 9\n"""\nseed = 2\n', ("moa", "seed"), 5),  # not the line inside a string
    ("[comed]\nthresholds.tau_lo = 0.2\n", ("comed", "thresholds", "tau_lo"), 2),
    ("[comed]\nthresholds = {tau_lo = 0.2}\n", ("comed", "thresholds", "tau_lo"), 2),  # inline: its line
    ("[comed.thresholds]\ntau_lo = 0.2\n", ("comed", "thresholds"), 1),
    ("[moa]\nseed = 1\n", ("moa", "shots"), None),
    ("[[moa]]\nseed = 1\n", ("moa", "seed"), None),  # an array of tables is not the settings table
])
def test_the_line_of_a_key_is_read_off_the_text(text, path, line):
    from agora.cli._run import toml_key_line

    assert toml_key_line(text, path) == line


# ----------------------------------------------------------------------------- no private import across modules


def test_no_cli_module_imports_a_private_name_of_another_module():
    """``cli/_run.py`` imported ``_SETTING_REFUSED`` from ``cli/_shared.py``, and two commands
    ``safe_file_name`` from the private module ``agora.models._files``. The CLI's own helper
    modules (``agora.cli._shared``, ``_run``...) are the CLI's; their names a module imports are public."""
    found = []
    for path in sorted((Path(__file__).resolve().parents[1] / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.module:
                private_module = any(p.startswith("_") for p in node.module.split(".")[2:]) and not \
                    node.module.startswith("agora.cli.")
                names = [a.name for a in node.names if a.name.startswith("_")]
                if private_module or (names and node.module != "agora.cli"):
                    found.append(f"{path.name}: from {node.module} import {', '.join(a.name for a in node.names)}")
    assert found == []


# ----------------------------------------------------------------------------- options that set nested settings


@pytest.mark.parametrize("args, tau_hi", [(["--tau-hi", "0.5", "--tau-lo", "0.9"], "0.5"), (["--tau-lo", "0.9"], "0.67")])
def test_comed_thresholds_typed_are_named_by_their_option(tmp_path, args, tau_hi):
    """``EscalationThresholds.tau_lo (0.9) must be ...`` named no option: the refusal's form (the
    value in brackets after the field) was not read as a settings refusal."""
    code, output = agora("run", "comed", "--format", "synthetic", "--pool", _pool(tmp_path), *args,
                         "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output) == f"error: --tau-lo: EscalationThresholds.tau_lo (0.9) must be <= tau_hi ({tau_hi})"
    assert not (tmp_path / "t.db").exists()
