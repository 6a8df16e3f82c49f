"""A throw-away Postgres server for the tests: its own data folder, a unix socket, no TCP port.

Found in this order: ``initdb``/``pg_ctl`` on ``PATH`` (or in ``/usr/lib/postgresql/*/bin``: Debian's
``postgresql`` package), then the ``pgserver`` package (PyPI: it bundles the server binaries).
Postgres refuses to run as root, so as root the system binaries run as the ``postgres`` user
(``runuser``), in a folder that user owns. :func:`start` waits on ``pg_ctl -w`` (readiness, not a
sleep) and returns the server; :meth:`PostgresServer.database` creates an empty database and gives
its ``postgresql://`` URL.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote


class NoPostgres(RuntimeError):
    """No Postgres server can be started here (the message says why)."""


@dataclass
class PostgresServer:
    socket_dir: str
    user: str
    stop_cmd: list[str] | None = None
    pg: object | None = None  # a pgserver instance
    root: str = ""

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://{self.user}@/{dbname}?host={quote(self.socket_dir, safe='')}"

    def database(self, prefix: str = "t") -> str:
        """A new, empty database; its URL."""
        import psycopg

        name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return self.url(name)

    def stop(self) -> None:
        if self.stop_cmd:
            subprocess.run(self.stop_cmd, capture_output=True, timeout=120, check=False)
        if self.pg is not None:
            try:
                self.pg.cleanup()  # type: ignore[attr-defined]
            except Exception:  # noqa: BLE001 - a test teardown
                pass
        if self.root:
            shutil.rmtree(self.root, ignore_errors=True)


def _system_bin() -> str | None:
    found = shutil.which("pg_ctl")
    if found and shutil.which("initdb"):
        return str(Path(found).resolve().parent)
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(folder, "pg_ctl").exists() and Path(folder, "initdb").exists():
            return folder
    return None


def _start_system(bin_dir: str) -> PostgresServer:
    root = tempfile.mkdtemp(prefix="agora-pg-")
    data, sock = Path(root, "data"), Path(root, "sock")
    sock.mkdir()
    as_user: list[str] = []
    user = pwd.getpwuid(os.getuid()).pw_name
    if os.geteuid() == 0:  # postgres will not run as root: run it as the postgres user, in its own folder
        try:
            entry = pwd.getpwnam("postgres")
        except KeyError:
            raise NoPostgres("running as root and there is no `postgres` user to run the server as") from None
        runuser = shutil.which("runuser")
        if runuser is None:
            raise NoPostgres("running as root without `runuser` to run the server as the postgres user")
        os.chmod(root, 0o755)
        os.chown(root, entry.pw_uid, entry.pw_gid)
        os.chown(sock, entry.pw_uid, entry.pw_gid)
        as_user, user = [runuser, "-u", "postgres", "--"], "postgres"
    init = subprocess.run([*as_user, f"{bin_dir}/initdb", "-D", str(data), "-U", user, "--auth=trust", "-E", "UTF8",
                           "--no-sync"], capture_output=True, text=True, timeout=300, check=False)
    if init.returncode:
        shutil.rmtree(root, ignore_errors=True)
        raise NoPostgres(f"initdb failed: {init.stderr.strip()[-300:]}")
    opts = f"-k {sock} -c listen_addresses='' -c fsync=off -c max_connections=200 -c shared_buffers=32MB"
    start = subprocess.run([*as_user, f"{bin_dir}/pg_ctl", "-D", str(data), "-o", opts, "-l", f"{root}/log", "-w",
                            "-t", "300", "start"], capture_output=True, text=True, timeout=360, check=False)
    if start.returncode:  # -t 300: a server starting on a busy shared machine can be minutes slow
        log = Path(root, "log").read_text(errors="replace")[-2000:] if Path(root, "log").exists() else ""
        shutil.rmtree(root, ignore_errors=True)
        raise NoPostgres(f"pg_ctl start failed: {start.stderr.strip()[-300:]} {log}")
    return PostgresServer(socket_dir=str(sock), user=user, root=root,
                          stop_cmd=[*as_user, f"{bin_dir}/pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop"])


def _start_pgserver() -> PostgresServer:
    try:
        import pgserver
    except ImportError:
        raise NoPostgres("no postgres on PATH and the pgserver package is not installed "
                         "(pip install -e '.[postgres]')") from None
    root = tempfile.mkdtemp(prefix="agora-pgserver-")
    try:
        srv = pgserver.get_server(root, cleanup_mode="stop")
    except Exception as exc:  # noqa: BLE001 - any reason it cannot start is a skip reason
        shutil.rmtree(root, ignore_errors=True)
        raise NoPostgres(f"pgserver could not start: {exc}") from None
    uri = srv.get_uri()  # postgresql://<user>:@/<db>?host=<socket dir>
    from urllib.parse import parse_qs, unquote, urlparse

    parsed = urlparse(uri)
    host = unquote(parse_qs(parsed.query)["host"][0])
    return PostgresServer(socket_dir=host, user=parsed.username or "postgres", pg=srv, root=root)


def start() -> PostgresServer:
    """Start a server (see the module docstring).

    Raises:
        NoPostgres: none can start here; the message says why.
    """
    try:
        import psycopg  # noqa: F401 - the store's driver
    except ImportError:
        raise NoPostgres("psycopg is not installed (pip install -e '.[postgres]')") from None
    reasons = []
    bin_dir = _system_bin()
    if bin_dir is not None:
        try:
            return _start_system(bin_dir)
        except NoPostgres as exc:
            reasons.append(str(exc))
    try:
        return _start_pgserver()
    except NoPostgres as exc:
        reasons.append(str(exc))
    raise NoPostgres("; ".join(reasons))
