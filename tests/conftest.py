import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture
def shared_data() -> Path:
    """The public benchmark files beside the checkout (tests that need them skip without it)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"benchmark data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def postgres_server():
    """A throw-away Postgres server for the session (tests/postgres_server.py: the system's
    postgres, else the pgserver package). Skips with the reason where none can start; fails
    instead under ``AGORA_REQUIRE_POSTGRES=1`` (CI)."""
    import postgres_server as pg

    try:
        server = pg.start()
    except pg.NoPostgres as exc:
        if os.environ.get("AGORA_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"no Postgres server could start: {exc}")
        pytest.skip(f"no Postgres server could start: {exc}")
    yield server
    server.stop()


@pytest.fixture(params=["sqlite", "postgres"])
def trace_db(request, tmp_path) -> str:
    """A new, empty trace database on each backend: a SQLite file path, or a ``postgresql://`` URL
    of a new database on the session's server (the store tests run on both)."""
    if request.param == "sqlite":
        return str(tmp_path / "t.db")
    return request.getfixturevalue("postgres_server").database()


@pytest.fixture
def duel_pairs_db(tmp_path) -> Path:
    """A SQLite file holding one duel preference pair and nothing else: run ``duel-1``, duel ``d1``,
    iteration 0, member ``a``'s "4" chosen over member ``b``'s "5" on "2+2?" (judge scores 8 and 6)."""
    import json

    import sqlite_utils

    db = tmp_path / "duel.db"
    sqlite_utils.Database(db)["preference_pairs"].insert(
        {"pair_id": "p1", "run_id": "duel-1", "duel_id": "d1", "iteration": 0, "prompt": "2+2?",
         "prompt_messages": json.dumps([{"role": "user", "content": "2+2?"}]), "chosen": "4", "rejected": "5",
         "chosen_model": "a", "rejected_model": "b", "chosen_score": 8.0, "rejected_score": 6.0, "margin": 2.0,
         "judge_scores": "{}", "reputations": "{}", "gold": None, "kind": None, "created_at": "t"}, pk="pair_id")
    return db


@pytest.fixture(scope="module")
def sandbox():
    """One program-of-thought sandbox worker for a test module's programs (the probe-round tests)."""
    from agora.models.recipes.sandbox import Sandbox

    box = Sandbox(workers=1)
    yield box
    box.close()
