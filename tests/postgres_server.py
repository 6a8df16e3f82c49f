"""A throw-away Postgres server for the tests: its own data folder, a unix socket, no TCP port.

Found in this order: ``initdb``/``pg_ctl`` on ``PATH`` (or in ``/usr/lib/postgresql/*/bin``: Debian's
``postgresql`` package), then the ``pgserver`` package (PyPI: it bundles the server binaries).
Postgres refuses to run as root, so as root the system binaries run as the ``postgres`` user
(``runuser``), in a folder that user owns. :func:`start` waits on ``pg_ctl -w`` (readiness, not a
sleep) and returns the server; :meth:`PostgresServer.database` creates an empty database and gives
its ``postgresql://`` URL.

Leaks: a server, system or pgserver, lives in ``$TMPDIR/agora-pg-*`` (its data in ``data/``) with an
``owner`` file (the pid and start time of the process that started it). :func:`start` first stops (``pg_ctl stop -m immediate``) and
removes the servers whose owner is gone (a pytest killed before its teardown: ``kill -9``, a
``timeout``), and the folders of older servers without an owner file once no server runs in them;
a live server without an owner file is left alone (whose it is cannot be told). The server is also
stopped at the starting process's normal exit (``atexit``), teardown or not.
"""

from __future__ import annotations

import atexit
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
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
        """Stop the server and remove its folder (again: nothing)."""
        if self.root and not Path(self.root).exists():
            return
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


PREFIX = "agora-pg-"
OWNER = "owner"  # in a server's folder: "<pid> <start time>" of the process that started it
#: An ownerless folder (a server started before owner files, or one whose start is under way) with no
#: live server in it is removed once this old (seconds): a start takes at most initdb + 300 s.
OWNERLESS_AGE_S = 1800.0


def _started_at(pid: int) -> str | None:
    """A process's start time (clock ticks since boot, ``/proc/<pid>/stat``), ``"?"`` where there is
    no ``/proc`` and the pid exists; ``None`` when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2:].split()[19]  # field 22: starttime
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None
    except (OSError, ValueError, IndexError):
        return None
    try:  # no /proc (macOS): the pid alone
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except OSError:
        pass
    return "?"


def _owner_alive(root: Path) -> bool | None:
    """Whether the process that started the server in ``root`` still runs; ``None``: no owner file."""
    try:
        pid, started = Path(root, OWNER).read_text().split()
    except (OSError, ValueError):
        return None
    now = _started_at(int(pid))
    return now is not None and (now == started or "?" in (now, started))


def _postmaster(root: Path) -> int | None:
    """The pid of the server running in ``root`` (its ``postmaster.pid``, checked alive and, where
    there is ``/proc``, running on that folder: not a later process given the same pid), else ``None``."""
    try:
        pid = int(Path(root, "data", "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if _started_at(pid) is None:
        return None
    try:
        return pid if str(root) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace") else None
    except FileNotFoundError:
        return None if Path("/proc/self/stat").exists() else pid
    except OSError:
        return None


def _as_postgres() -> list[str]:
    """The command prefix that runs a program as the ``postgres`` user when this process is root
    (Postgres refuses to run as root), else nothing.

    Raises:
        NoPostgres: root without a ``postgres`` user or ``runuser``."""
    if os.geteuid() != 0:
        return []
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        raise NoPostgres("running as root and there is no `postgres` user to run the server as") from None
    runuser = shutil.which("runuser")
    if runuser is None:
        raise NoPostgres("running as root without `runuser` to run the server as the postgres user")
    return [runuser, "-u", "postgres", "--"]


def sweep_stale(bin_dir: str | None, tmp: str | None = None) -> list[str]:
    """Stop and remove the throw-away servers left in ``tmp`` (default: the temp folder) by processes
    that are gone (see the module docstring), system or pgserver ones; the folders removed. A
    server is stopped with ``bin_dir``'s ``pg_ctl`` (``None``: none here), else with ``SIGQUIT``."""
    removed = []
    for root in sorted(Path(tmp or tempfile.gettempdir()).glob(f"{PREFIX}*")):
        if not root.is_dir():
            continue
        owner, server = _owner_alive(root), _postmaster(root)
        if owner is None:  # no owner file: only a dead server's folder, old enough not to be starting
            try:
                age = time.time() - root.stat().st_mtime
            except OSError:
                continue
            if server is not None or age < OWNERLESS_AGE_S:
                continue
        elif owner:
            continue
        if server is not None:
            try:
                if bin_dir is None:
                    raise NoPostgres("no pg_ctl")
                stop = subprocess.run([*_as_postgres(), f"{bin_dir}/pg_ctl", "-D", str(root / "data"), "-m", "immediate",
                                       "-w", "stop"], capture_output=True, timeout=120, check=False)
                stopped = stop.returncode == 0
            except (NoPostgres, OSError, subprocess.TimeoutExpired):
                stopped = False
            if not stopped:  # SIGQUIT: the postmaster's own immediate shutdown
                try:
                    os.kill(server, signal.SIGQUIT)
                except OSError:
                    pass
        shutil.rmtree(root, ignore_errors=True)
        removed.append(str(root))
    return removed


def _new_root() -> str:
    """A new server folder in the temp folder, with this process's owner file."""
    root = tempfile.mkdtemp(prefix=PREFIX)
    me = os.getpid()
    Path(root, OWNER).write_text(f"{me} {_started_at(me)}\n")
    return root


def _start_system(bin_dir: str) -> PostgresServer:
    sweep_stale(bin_dir)
    root = _new_root()
    data, sock = Path(root, "data"), Path(root, "sock")
    sock.mkdir()
    as_user: list[str] = []
    user = pwd.getpwuid(os.getuid()).pw_name
    if os.geteuid() == 0:  # postgres will not run as root: run it as the postgres user, in its own folder
        try:
            as_user = _as_postgres()
        except NoPostgres:
            shutil.rmtree(root, ignore_errors=True)
            raise
        entry = pwd.getpwnam("postgres")
        os.chmod(root, 0o755)
        os.chown(root, entry.pw_uid, entry.pw_gid)
        os.chown(sock, entry.pw_uid, entry.pw_gid)
        user = "postgres"
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
    server = PostgresServer(socket_dir=str(sock), user=user, root=root,
                            stop_cmd=[*as_user, f"{bin_dir}/pg_ctl", "-D", str(data), "-m", "immediate", "-w", "stop"])
    atexit.register(server.stop)  # (an exit without the teardown; a killed process: sweep_stale, next start)
    return server


def _start_pgserver() -> PostgresServer:
    try:
        import pgserver
    except ImportError:
        raise NoPostgres("no postgres on PATH and the pgserver package is not installed "
                         "(pip install -e '.[postgres]')") from None
    sweep_stale(_system_bin())
    root = _new_root()  # the system server's layout: <root>/owner, <root>/data (pgserver's PGDATA and socket)
    try:
        srv = pgserver.get_server(Path(root, "data"), cleanup_mode="stop")
    except Exception as exc:  # noqa: BLE001 - any reason it cannot start is a skip reason
        shutil.rmtree(root, ignore_errors=True)
        raise NoPostgres(f"pgserver could not start: {exc}") from None
    uri = srv.get_uri()  # postgresql://<user>:@/<db>?host=<socket dir>
    from urllib.parse import parse_qs, unquote, urlparse

    parsed = urlparse(uri)
    host = unquote(parse_qs(parsed.query)["host"][0])
    server = PostgresServer(socket_dir=host, user=parsed.username or "postgres", pg=srv, root=root)
    atexit.register(server.stop)  # (before pgserver's own exit handler, which stops it but keeps its folder)
    return server


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
