"""Probe round 9: what a fresh user and an attacker found still wrong, each with its fix."""

from __future__ import annotations

from agora.models.recipes.sandbox import SandboxLimits, run_program

LIMITS = SandboxLimits(cpu_s=2, wall_s=6, memory_mb=256, output_bytes=4096)


def test_sympys_plot_interval_string_is_evaluated_restricted():
    """``sympy.plotting.pygletplot.plot_interval.PlotInterval("...")`` (importable without pyglet)
    ``eval``s its string with the interpreter's built-ins: ``__import__('os').getpid()`` ran and
    ``__builtins__`` held the interpreter's 150-odd names."""
    program = ("from sympy.plotting.pygletplot.plot_interval import PlotInterval\n"
               "print(PlotInterval(\"(None, 0, 1, __import__('os').getpid())\"))\n")
    run = run_program(program, LIMITS)
    assert run.status == "error"
    assert run.error.startswith('SyntaxError: Line 1: "__import__" is an invalid variable name'), run.error
    run = run_program(program.replace("__import__('os').getpid()", "len(open('x', 'w').name)"), LIMITS)
    assert run.error == "NameError: name 'open' is not defined"
    fine = ("from sympy.plotting.pygletplot.plot_interval import PlotInterval\n"
            "print(PlotInterval('(None, 0, 1, 4)'), PlotInterval(\"(Symbol('t'), 0, 2, 8)\"))\n")
    run = run_program(fine, LIMITS)
    assert (run.status, run.output) == ("ok", "[None,0,1,4] [t,0,2,8]\n"), run


def test_private_modules_and_sympys_test_helpers_are_not_importable(tmp_path):
    """``import sympy.utilities._compilation.util as u`` passed RestrictedPython (which refuses
    ``from sympy.utilities import _compilation``): ``u.sha256_of_file`` read any file, ``u.copy``
    copied one. ``sympy.testing.tmpfiles.TmpFileManager.cleanup()`` removes any folder it is given
    (only Landlock stopped it; without pytest installed it imports)."""
    cases = [
        ("import sympy.utilities._compilation.util as u\nprint(u.sha256_of_file('pyvenv.cfg'))",
         "ImportError: import of 'sympy.utilities._compilation.util' is not allowed (a private module)"),
        ("from sympy.utilities._compilation import util\nprint(util)",
         "ImportError: import of 'sympy.utilities._compilation' is not allowed (a private module)"),
        (f"from sympy.testing.tmpfiles import TmpFileManager\nTmpFileManager.tmp_folder({str(tmp_path)!r})\n"
         "TmpFileManager.cleanup()\nprint('removed')",
         "ImportError: import of 'sympy.testing.tmpfiles' is not allowed (sympy's test suite)"),
        ("import sympy.testing\nprint(1)", "ImportError: import of 'sympy.testing' is not allowed (sympy's test suite)"),
        ("from sympy import testing\nprint(testing)", "ImportError: import of 'sympy.testing' is not allowed (sympy's test suite)"),
    ]
    for program, error in cases:
        run = run_program(program, LIMITS)
        assert (run.status, run.error) == ("error", error), program
    assert tmp_path.exists()
    run = run_program("import sympy.ntheory.factor_ as f\nprint(f.factorint(12))", LIMITS)
    assert (run.status, run.output) == ("ok", "{2: 2, 3: 1}\n")


def test_trace_stores_opened_at_once_on_a_new_database_by_threads_all_open(tmp_path):
    """Ten per-request ``TraceRecorder``s (each its own run id) opening a new database at once: nine
    failed at once with ``the database is locked by another process (waited 30 s)``, 0.0 s after
    they started, and their questions were lost. Creating the schema read, then wrote, in one
    transaction: SQLite refuses that upgrade without waiting when another connection wrote between."""
    import threading

    from agora.traces.store import TraceStore

    db = tmp_path / "new.db"
    start, errors, stores = threading.Barrier(10), [], []

    def open_store():
        start.wait()
        try:
            stores.append(TraceStore(db))
        except Exception as exc:  # noqa: BLE001 - counted below
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(stores) == 10
    for i, store in enumerate(stores):  # each writes its own run
        store.start_run(f"r{i}", "align", config={}, pool=[], dataset={})
    assert stores[0].run_ids() == sorted(f"r{i}" for i in range(10))
