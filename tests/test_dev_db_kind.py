"""A dev run's trace database path that is a folder or a FIFO is named for what it is, not "not found"."""

import os

import pytest

from agora.traces.reliability import DevRunError, dev_accuracy


def test_a_folder_a_fifo_and_a_missing_file_are_told_apart(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(DevRunError, match=r"^dev run 'r1': trace database .* is a folder, not a database file$"):
        dev_accuracy(tmp_path, "r1")
    with pytest.raises(DevRunError, match=r"is a FIFO \(named pipe\), not a database file$"):
        dev_accuracy(fifo, "r1")
    with pytest.raises(DevRunError, match=r"trace database .*missing\.db not found$"):
        dev_accuracy(tmp_path / "missing.db", "r1")
