"""A run's recorded settings are decoded in one place (``TraceReader.run_config``): what each reader
of them gets back, and the one-line refusal naming the run when the column is not JSON."""

import sqlite3
from types import SimpleNamespace

import pytest

from agora.runs.shared import SHARED_KEY, check_edition
from agora.traces.errors import TraceStoreError
from agora.traces.matched_single import MATCHED_RUN, read_matched
from agora.traces.run_trace import load_run
from agora.traces.store import TraceStore


def store_with(tmp_path, config):
    """A store holding run ``r1`` whose ``config`` column is ``config`` exactly as written (text or NULL)."""
    db = tmp_path / "t.db"
    store = TraceStore(db)
    store.start_run("r1", "align", config={}, pool=[], dataset={})
    with sqlite3.connect(db) as con:
        con.execute("update runs set config = ? where run_id = 'r1'", [config])
    return store


@pytest.mark.parametrize("written, read", [
    ('{"member": "m", "n_agents": 3}', {"member": "m", "n_agents": 3}),
    ("{}", {}),
    (None, {}),
    ("[1, 2]", {}),  # a JSON value that is not an object holds no settings
])
def test_run_config_decodes_the_column(tmp_path, written, read):
    store = store_with(tmp_path, written)
    assert store.run_config("r1") == read
    assert store.run_config("no such run") is None
    assert load_run(store, "r1").config == read


def test_readers_of_a_run_config_use_it(tmp_path):
    store = store_with(tmp_path, '{"member": "m", "shared_candidates": "b:t:candidates"}')
    check_edition(store, ["r1", "missing"], shared=True)  # made with shared candidates: resumable as such
    with pytest.raises(ValueError, match="was run with shared candidates: its run r1 took them"):
        check_edition(store, ["r1"], shared=False)
    task = SimpleNamespace(runs={MATCHED_RUN: "r1", "candidates": "c"}, question_ids=[])
    assert read_matched(store, task).member == "m"


def test_a_config_that_is_not_json_is_refused_naming_the_run(tmp_path):
    store = store_with(tmp_path, '{"member": "m"')
    said = f"{store.path}: runs row 'r1', column config: not valid JSON"
    task = SimpleNamespace(runs={MATCHED_RUN: "r1", "candidates": "c"}, question_ids=[])
    for read in (lambda: store.run_config("r1"), lambda: load_run(store, "r1"),
                 lambda: check_edition(store, ["r1"], shared=True), lambda: read_matched(store, task)):
        with pytest.raises(TraceStoreError) as err:
            read()
        assert str(err.value).startswith(said) and "\n" not in str(err.value)
