"""The README's install commands, `.ci/run` and `benchmarks/first_install.sh` agree (issue 29).

The first install compiles llama-cpp-python; the README passes CMAKE_ARGS that build only the llama.cpp
libraries its bindings load (no multimodal library, no `common` library). These tests keep the README,
CI and the timing script on the same command, and check that Agora never needs what the lean build leaves
out.
"""
from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LEAN = ("CMAKE_ARGS=\"-DLLAVA_BUILD=OFF "
        "-DCMAKE_PROJECT_llama.cpp_INCLUDE='$PWD/cmake/llama-cpp-python-lean.cmake'\"")


def quick_start_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    quick = text.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", quick, flags=re.S)]


def test_both_quick_start_commands_build_llama_cpp_lean():
    first, tests = quick_start_commands()[:2]
    assert f"{LEAN} pip install -e . && agora run align" in first
    assert f'{LEAN} pip install -e ".[test,train]" && python -m pytest' in tests


def test_the_project_include_turns_llama_cpp_common_off_and_compiles_only_libllama_at_o1():
    include = (ROOT / "cmake" / "llama-cpp-python-lean.cmake").read_text()
    code = [line.strip() for line in include.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert code[0].startswith("set(LLAMA_BUILD_COMMON OFF CACHE BOOL") and code[0].endswith("FORCE)")
    # -O1 for libllama's C++ alone (ggml's kernels keep the build type's -O3), once every target exists
    assert code[1:] == ["function(_agora_llama_opt)", "if(TARGET llama)",
                        "target_compile_options(llama PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O1>)", "endif()",
                        "endfunction()", "cmake_language(DEFER DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} CALL _agora_llama_opt)"]


def test_ci_installs_with_the_readme_command():
    assert f'{LEAN} pip install -e ".[test,train]"' in (ROOT / ".ci" / "run").read_text()


def test_first_install_script_dry_run_prints_the_readme_command_and_the_full_build():
    script = ROOT / "benchmarks" / "first_install.sh"
    first = quick_start_commands()[0]
    out = subprocess.run(["bash", script, "--dry-run"], capture_output=True, text=True, check=True).stdout
    assert out.splitlines()[-1].strip() == first
    full = subprocess.run(["bash", script, "--full", "--dry-run"], capture_output=True, text=True, check=True).stdout
    assert full.splitlines()[-1].strip() == first.replace(LEAN + " ", "")
    bad = subprocess.run(["bash", script, "--fast"], capture_output=True, text=True)
    assert bad.returncode == 2 and "usage:" in bad.stderr


@pytest.mark.slow
def test_agora_never_loads_the_libraries_the_lean_build_leaves_out():
    """A real sample on the embedded pool loads libllama's bindings and nothing multimodal."""
    code = ("import sys\n"
            "from agora.models.pool import SamplingParams, builtin_pool\n"
            "pool = builtin_pool('tiny')\n"
            "samples, _ = pool.sample('smollm2-135m', [{'role': 'user', 'content': 'Say hi.'}],\n"
            "                         SamplingParams(n=2, max_tokens=4, seed=1))\n"
            "assert len(samples) == 2\n"
            "print(sorted(m for m in sys.modules if m.startswith('llama_cpp')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "'llama_cpp.llama_cpp'" in out.stdout
    assert "mtmd_cpp" not in out.stdout and "llava_cpp" not in out.stdout
