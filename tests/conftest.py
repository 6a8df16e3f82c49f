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
