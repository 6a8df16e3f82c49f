"""Ctrl-C in the CLI: the first asks LangGraph to drain at the next step, the second interrupts."""

import os
import signal

import pytest

from agora.cli._shared import graceful_stop


def test_first_sigint_drains_second_interrupts_and_the_handler_is_restored():
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        with graceful_stop() as control:
            assert not control.drain_requested
            os.kill(os.getpid(), signal.SIGINT)
            assert control.drain_requested and control.drain_reason == "interrupted"
            os.kill(os.getpid(), signal.SIGINT)  # raises KeyboardInterrupt here
            pytest.fail("the second Ctrl-C did not interrupt")  # pragma: no cover
    assert signal.getsignal(signal.SIGINT) is before


def test_a_run_without_ctrl_c_leaves_the_control_untouched():
    before = signal.getsignal(signal.SIGINT)
    with graceful_stop() as control:
        pass
    assert not control.drain_requested and signal.getsignal(signal.SIGINT) is before
