"""The Postgres trace store's exclusive run lock (a session advisory lock) is free again as soon as
its ``with`` block ends: a rerun started at once, from another connection, gets it."""

from agora.traces.store import TraceStore


def test_a_run_lock_is_free_the_moment_its_block_ends(postgres_server):
    """Released only by closing its connection, the lock stayed held until the server's backend had
    ended, after ``close()`` returned: a run started right after another on the same run id was
    refused now and then ("being run by another process"), as a duel test's rerun was (on a busy machine, within 2,000 takes). 1,000 takes,
    each from a new store, right after the previous block ended."""
    url = postgres_server.database()
    first, second = TraceStore(url), TraceStore(url)
    for i in range(1000):
        store = (first, second)[i % 2]
        with store.run_lock("duels"):
            pass
