"""Bad input, round 6: a member named twice in a council's or a MoA's member list, a refused value
of a ``--config`` file named by the file and its key, and a bundle whose header was edited after
export."""

from __future__ import annotations

import gzip
import hashlib
import json

import pytest

from cli_runs import agora, one_error_line

# ----------------------------------------------------------------------------- a member named twice


def _pool(tmp_path):
    """A pool file of two members, m1 and m2, of a server that is not there (nothing is asked)."""
    pool = tmp_path / "pool.toml"
    pool.write_text("".join(f'[[models]]\nname = "{m}"\nbackend = "openai"\nbase_url = "http://127.0.0.1:9/v1"\n'
                            f'model = "{m}"\n' for m in ("m1", "m2")))
    return pool


@pytest.mark.parametrize("command, option", [("council", "--members"), ("moa", "--proposers")])
def test_a_member_named_twice_in_a_member_list_is_refused_naming_the_option(tmp_path, command, option):
    """``--proposers a,a`` ran (the aggregator read one model's proposal twice, proposal_vote counted
    it twice); ``--members a,a`` was refused by the settings with the whole tuple, not the name."""
    code, output = agora("run", command, "--format", "synthetic", "--pool", _pool(tmp_path), option, "m1, m2,m1",
                         "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output) == f"error: {option} m1, m2,m1: 'm1' named more than once; name each member once"
    assert not (tmp_path / "t.db").exists()


@pytest.mark.parametrize("module, cls, given, message", [
    ("moa", "MoAConfig", {"proposers": ("a", "b", "a")},
     "MoAConfig.proposers: 'a' named more than once (each proposer answers once and its answer is read once)"),
    ("council", "CouncilConfig", {"members": ["b", "a", "b", "a"]},
     "CouncilConfig.members: 'b', 'a' named more than once (each member answers once and casts one ballot)"),
    ("escalation", "EscalationConfig", {"moa_proposers": ("a", "a")},
     "EscalationConfig.moa_proposers: 'a' named more than once (each proposer answers once and its answer is read "
     "once)"),
])
def test_a_member_named_twice_is_refused_by_the_settings_themselves(module, cls, given, message):
    """From Python, Studio or the API (the settings a graph's context builds): MoAConfig took a
    repeated proposer silently (COMED's moa_proposers too), as SLMMuxConfig refuses a repeated member."""
    import importlib

    from agora.graphs.context import settings_from

    settings = getattr(importlib.import_module(f"agora.agents.{module}"), cls)
    with pytest.raises(ValueError) as err:
        settings(**given)
    assert str(err.value) == message
    with pytest.raises(ValueError) as err:  # as Studio's form and the HTTP API send it: JSON
        settings_from({k: list(v) for k, v in given.items()}, settings)
    assert str(err.value) == message


def test_a_member_list_of_distinct_names_is_kept_as_given():
    from agora.agents.council import CouncilConfig
    from agora.agents.moa import MoAConfig

    assert MoAConfig(proposers=["a", "b"]).proposers == ["a", "b"]
    assert CouncilConfig(members=("b", "a")).members == ("b", "a")
    with pytest.raises(ValueError, match=r"^CouncilConfig\.members: a council needs at least two members"):
        CouncilConfig(members=("a",))


# ----------------------------------------------------------------------------- a --config file's value refused


@pytest.mark.parametrize("command, table, message", [
    ("moa", 'proposers = ["zz", "m1"]', "MoAConfig.proposers: 'zz' is not in the pool (m1, m2)"),
    ("moa", 'aggregator = "zz"', "MoAConfig.aggregator: 'zz' is not in the pool (m1, m2)"),
    ("council", 'chair = "zz"', "CouncilConfig.chair: 'zz' is not in the pool (m1, m2)"),
    ("debate", 'models = ["m1", "zz"]', "DebateConfig.models: 'zz' is not in the pool (m1, m2)"),
    ("slm-mux", 'models = ["zz"]', "SLMMuxConfig.models: 'zz' is not in the pool (m1, m2)"),
])
def test_a_config_file_value_the_pool_refuses_names_the_file_and_its_table(tmp_path, command, table, message):
    """A value the settings accept but the pool refuses named only ``Class.field``, not the file it
    came from (the same value typed as an option names the option)."""
    config = tmp_path / "run.toml"
    config.write_text(f"[{command}]\n{table}\n")
    code, output = agora("run", command, "--format", "synthetic", "--pool", _pool(tmp_path), "--config", config,
                         "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output) == f"error: --config {config}:2: [{command}] {message}"
    assert not (tmp_path / "t.db").exists()


def test_a_typed_option_the_pool_refuses_still_names_the_option_with_a_config_file(tmp_path):
    config = tmp_path / "run.toml"
    config.write_text('[moa]\naggregator = "m1"\n')
    code, output = agora("run", "moa", "--format", "synthetic", "--pool", _pool(tmp_path), "--config", config,
                         "--proposers", "zz", "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output) == "error: --proposers: MoAConfig.proposers: 'zz' is not in the pool (m1, m2)"


@pytest.mark.parametrize("table, message", [
    ('anchor = "zz"', "EscalationConfig.anchor: 'zz' is not in the pool (m1, m2)"),
    ('peers = ["m2", "zz"]', "EscalationConfig.peers: 'zz' is not in the pool (m1, m2)"),
])
def test_a_comed_config_file_value_the_pool_refuses_names_the_file(tmp_path, table, message):
    config = tmp_path / "comed.toml"
    config.write_text(f"[comed]\n{table}\n")
    code, output = agora("run", "comed", "--format", "synthetic", "--pool", _pool(tmp_path), "--config", config,
                         "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output) == f"error: --config {config}:2: [comed] {message}"


def test_a_refused_setting_is_named_by_the_option_that_sets_it_not_by_a_likely_name(tmp_path):
    """COMED's ``-N/--samples 0`` (EscalationConfig.n_anchor) was pinned on ``--anchor``, typed
    beside it, as the field's last word."""
    code, output = agora("run", "comed", "--format", "synthetic", "--pool", _pool(tmp_path), "--anchor", "m1",
                         "--samples", "0", "--db", tmp_path / "t.db")
    assert code == 2, output
    assert one_error_line(output) == "error: -N/--samples: EscalationConfig.n_anchor must be an integer >= 1, got 0"


# ----------------------------------------------------------------------------- a bundle's header edited


def _bundle(tmp_path):
    """A one-question ALIGN run ``r`` (members ``a``, ``b`` scripted to answer 4) exported to a bundle;
    returns the bundle's path and its lines (bytes, without their newlines; the last is empty)."""
    from agora.agents.delegation import DelegationConfig
    from agora.graphs.delegation import DelegationContext
    from agora.graphs.runner import run_protocol
    from agora.models.pool import ModelPool
    from agora.models.testing import ScriptedChatModel
    from agora.tasks.problem import Problem
    from agora.traces.bundle_export import export_bundle
    from agora.traces.store import TraceStore

    pool = ModelPool.from_chat_models({m: ScriptedChatModel(respond=lambda chat, i: "The answer is 4.") for m in "ab"})
    config = DelegationConfig(n_agents=2, k_samples=1, tau=0.5)
    store = TraceStore(tmp_path / "t.db")
    run_protocol("align", [Problem(id="q1", question="What is 2 + 2?", gold="4", kind="math")], store=store,
                 run_id="r", context=DelegationContext(pool, config), config=config,
                 pool_description=pool.describe(), dataset={"path": "q", "format": "jsonl"})
    bundle = tmp_path / "r.agora.jsonl.gz"
    export_bundle(store, bundle, ["r"])
    return bundle, gzip.open(bundle, "rb").read().split(b"\n")


def _write(path, lines):
    path.write_bytes(gzip.compress(b"\n".join(lines)))
    return path


def test_the_footer_carries_the_sha256_of_the_header_line(tmp_path):
    _, lines = _bundle(tmp_path)
    footer = json.loads(lines[-2])
    assert footer["header_sha256"] == hashlib.sha256(lines[0] + b"\n").hexdigest()
    assert footer["sha256"] == hashlib.sha256(b"".join(line + b"\n" for line in lines[1:-2])).hexdigest()


@pytest.mark.parametrize("edit", [
    {"code_revision": "0" * 40},
    {"runs": ["r", "r-extra"]},
    {"created_at": "1999-01-01T00:00:00+00:00"},
])
def test_a_bundle_whose_header_was_edited_after_export_is_refused(tmp_path, edit):
    """The checksum covered the rows only: a header edited after export (its runs, its revision)
    imported unchecked."""
    bundle, lines = _bundle(tmp_path)
    edited = _write(tmp_path / "edited.agora.jsonl.gz",
                    [json.dumps({**json.loads(lines[0]), **edit}, ensure_ascii=False).encode(), *lines[1:]])
    code, output = agora("import", edited, "--db", tmp_path / "into.db")
    assert code == 2, output
    assert one_error_line(output) == (f"error: {edited}:1: the header does not match the footer's checksum "
                                      "(header_sha256): it was altered or damaged after export; nothing was imported")
    assert not (tmp_path / "into.db").exists()
    code, output = agora("import", bundle, "--db", tmp_path / "good.db")
    assert code == 0 and "rows added" in output, output


def test_a_bundle_without_the_header_checksum_imports_as_before(tmp_path):
    """A bundle written before footers carried ``header_sha256`` (its rows' ``sha256`` alone, or no
    checksum at all) imports as it did, its header unchecked; its rows are still checked."""
    from agora.traces.bundle_reading import check_bundle

    _, lines = _bundle(tmp_path)
    head = {**json.loads(lines[0]), "code_revision": "an older tree"}
    footer = json.loads(lines[-2])
    del footer["header_sha256"]
    rows_only = _write(tmp_path / "rows-only.agora.jsonl.gz",
                       [json.dumps(head).encode(), *lines[1:-2], json.dumps(footer).encode(), b""])
    del footer["sha256"]
    unchecked = _write(tmp_path / "none.agora.jsonl.gz",
                       [json.dumps(head).encode(), *lines[1:-2], json.dumps(footer).encode(), b""])
    for older in (rows_only, unchecked):
        assert check_bundle(older)["code_revision"] == "an older tree"
        code, output = agora("import", older, "--db", tmp_path / f"{older.name}.db")
        assert code == 0 and "rows added" in output, output
    at = next(i for i, line in enumerate(lines) if line.startswith(b"{\"t\": \"model_calls\"") and b"is 4." in line)
    altered = list(lines)
    altered[0] = json.dumps(head).encode()
    altered[at] = lines[at].replace(b"is 4.", b"is 5.", 1)
    altered[-2] = json.dumps({k: v for k, v in json.loads(lines[-2]).items() if k != "header_sha256"}).encode()
    code, output = agora("import", _write(tmp_path / "altered.agora.jsonl.gz", altered), "--db", tmp_path / "a.db")
    assert code == 2 and "do not match the footer's checksum (sha256)" in one_error_line(output), output


def test_a_footer_whose_header_checksum_is_not_a_digest_is_refused(tmp_path):
    from agora.traces.bundle_reading import BundleError, check_bundle

    _, lines = _bundle(tmp_path)
    footer = {**json.loads(lines[-2]), "header_sha256": 12}
    bad = _write(tmp_path / "bad.agora.jsonl.gz", [*lines[:-2], json.dumps(footer).encode(), b""])
    with pytest.raises(BundleError) as err:
        check_bundle(bad)
    assert str(err.value) == (f"{bad}:{len(lines) - 1}: footer.header_sha256: 12 is not a SHA-256 digest (64 "
                              "hexadecimal digits); nothing was imported")

