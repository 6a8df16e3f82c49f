"""Small benchmark samples shipped inside the package (real problems, for the first run).

``gsm8k``: the first 5 GSM8K test problems (MIT, openai/grade-school-math; attribution and
license in ``tasks/data/README.md``). The product never reads a benchmark folder outside the
package: everything else comes from a path the user gives.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

SAMPLES = {"gsm8k": ("gsm8k_test_sample.jsonl", "gsm8k")}


def sample_path(name: str = "gsm8k") -> tuple[Path, str]:
    """The shipped sample file and its loader format.

    Raises:
        KeyError: an unknown sample name.
    """
    if name not in SAMPLES:
        raise KeyError(f"unknown sample {name!r}; choose one of {', '.join(SAMPLES)}")
    file_name, fmt = SAMPLES[name]
    return Path(str(resources.files("agora.tasks") / "data" / file_name)), fmt
