"""Ctrl-C in the CLI: the first asks LangGraph to drain at the next step, the second exits at once."""

import os
import signal

import pytest

from agora.cli._shared import graceful_stop


class Exited(Exception):
    pass


def test_first_sigint_drains_second_exits_at_once_and_the_handler_is_restored(monkeypatch):
    """The second Ctrl-C must not wait for model calls in flight (LangGraph's executor would): it
    ends the process with status 130."""
    def fake_exit(code):
        raise Exited(code)

    monkeypatch.setattr(os, "_exit", fake_exit)
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(Exited) as exited:
        with graceful_stop() as control:
            assert not control.drain_requested
            os.kill(os.getpid(), signal.SIGINT)
            assert control.drain_requested and control.drain_reason == "interrupted"
            os.kill(os.getpid(), signal.SIGINT)  # exits here
            pytest.fail("the second Ctrl-C did not stop the process")  # pragma: no cover
    assert exited.value.args == (130,)
    assert signal.getsignal(signal.SIGINT) is before


def test_a_run_without_ctrl_c_leaves_the_control_untouched():
    before = signal.getsignal(signal.SIGINT)
    with graceful_stop() as control:
        pass
    assert not control.drain_requested and signal.getsignal(signal.SIGINT) is before
