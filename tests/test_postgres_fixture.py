"""The tests' throw-away Postgres (tests/postgres_server.py) cleans up after a killed pytest: the
next start stops and removes the servers whose owner process is gone, and leaves the others."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from waiting import wait_until

import postgres_server as pg

HERE = Path(__file__).resolve().parent


@pytest.fixture
def bin_dir() -> str:
    found = pg._system_bin()
    if found is None:
        pytest.skip("no system postgres (initdb, pg_ctl) here")
    try:
        pg._as_postgres()
    except pg.NoPostgres as exc:
        pytest.skip(str(exc))
    return found


@pytest.fixture
def tmp() -> Path:
    """A temp folder the postgres user can reach (pytest's tmp_path is private to this user)."""
    folder = Path(tempfile.mkdtemp(prefix="agora-sweep-test-"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: int) -> bool:
    return pg._started_at(pid) is not None


def test_a_server_whose_starter_was_killed_is_stopped_and_removed_by_the_next_start(bin_dir, tmp):
    starter = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; import postgres_server as pg; "
         f"s = pg._start_system({bin_dir!r}); print(s.root, flush=True); time.sleep(600)"],
        cwd=HERE, stdout=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(HERE)})
    try:
        root = Path(starter.stdout.readline().strip())
    finally:
        starter.send_signal(signal.SIGKILL)  # no teardown, no atexit: the server is left running
        starter.wait(60)
    server = pg._postmaster(root)
    assert root.parent == tmp and server is not None and _alive(server)
    assert pg._owner_alive(root) is False

    mine = tmp / "agora-pg-live"  # a live owner (this process): kept
    mine.mkdir()
    (mine / pg.OWNER).write_text(f"{os.getpid()} {pg._started_at(os.getpid())}\n")
    old, new = tmp / "agora-pg-old", tmp / "agora-pg-new"  # no owner file, no server: removed once old
    old.mkdir()
    new.mkdir()
    os.utime(old, (time.time() - pg.OWNERLESS_AGE_S - 60,) * 2)

    assert pg.sweep_stale(bin_dir, str(tmp)) == sorted([str(root), str(old)])  # in name order; root's name is random
    wait_until(lambda: not _alive(server), f"the swept server (pid {server}) to exit")
    assert not root.exists() and not old.exists()
    assert mine.exists() and new.exists()


@pytest.fixture
def pgserver_ok() -> None:
    pytest.importorskip("pgserver")


def test_a_pgserver_server_is_removed_when_stopped_and_when_its_starter_was_killed(pgserver_ok, tmp):
    """The pgserver fallback keeps the same rules: its folder goes with ``stop()``, and a server left
    running by a killed starter is stopped and removed by the next sweep."""
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONPATH": str(HERE)}
    stopped = subprocess.run(
        [sys.executable, "-c", "import postgres_server as pg, psycopg; s = pg._start_pgserver(); "
         "psycopg.connect(s.database()).close(); pid = s.pg.get_pid(); s.stop(); print(s.root, pid)"],
        cwd=HERE, capture_output=True, text=True, env=env, timeout=300)
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    root, pid = stopped.stdout.split()
    assert Path(root).parent == tmp and not Path(root).exists()
    wait_until(lambda: not _alive(int(pid)), f"the stopped pgserver server (pid {pid}) to exit")

    starter = subprocess.Popen(
        [sys.executable, "-c", "import time; import postgres_server as pg; "
         "s = pg._start_pgserver(); print(s.root, flush=True); time.sleep(600)"],
        cwd=HERE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        root = Path(starter.stdout.readline().strip())
    finally:
        starter.send_signal(signal.SIGKILL)  # no teardown, no atexit: the server is left running
        starter.wait(60)
    server = pg._postmaster(root)
    assert root.parent == tmp and server is not None and _alive(server)
    assert pg._owner_alive(root) is False
    assert pg.sweep_stale(None, str(tmp)) == [str(root)]
    wait_until(lambda: not _alive(server), f"the swept pgserver server (pid {server}, SIGQUIT) to exit")
    assert not root.exists()
