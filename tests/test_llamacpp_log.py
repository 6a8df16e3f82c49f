"""llama.cpp's log under Agora: errors reach stderr, warnings and info do not (ggml_log_level of
ggml.h: DEBUG 1, INFO 2, WARN 3, ERROR 4, CONT 5)."""

import pytest

from agora.models import llamacpp
from agora.models.builtin_backends import resolve_builtin


def test_only_error_lines_and_their_continuations_are_printed(capsys):
    for level, text in [(3, b"llama_kv_cache_iswa: using full-size SWA cache\n"), (2, b"llama_context: n_ctx = 256"),
                        (5, b" (continued info)\n"), (4, b"llama_model_load: error loading model"),
                        (5, b": missing tensor\n"), (1, b"debug\n")]:
        llamacpp._print_errors(level, text)
    assert capsys.readouterr().err == "llama_model_load: error loading model: missing tensor\n"


@pytest.mark.slow
def test_loading_gemma_prints_nothing(capfd):
    llamacpp._load(resolve_builtin("builtin:gemma3-270m"), 320, 1)  # an n_ctx no other test loads
    assert capfd.readouterr().err == ""

