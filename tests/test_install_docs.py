"""The README's install commands, `.ci/run` and `benchmarks/first_install.sh` agree (issue 29).

The first install compiles llama-cpp-python; the README passes CMAKE_ARGS that build only the llama.cpp
libraries its bindings load (no multimodal library, no `common` library). These tests keep the README,
CI and the timing script on the same command, and check that Agora never needs what the lean build leaves
out.
"""
from __future__ import annotations

import json
import platform
import re
import shutil
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
    assert f"{LEAN} pip install --no-compile -e . && agora run align" in first
    assert f'{LEAN} pip install --no-compile -e ".[test,train]" && python -m pytest' in tests


def test_the_project_include_turns_llama_cpp_common_off():
    include = (ROOT / "cmake" / "llama-cpp-python-lean.cmake").read_text()
    code = [line.strip() for line in include.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert code[0].startswith("set(LLAMA_BUILD_COMMON OFF CACHE BOOL") and code[0].endswith("FORCE)")


# A stand-in for llama.cpp's tree: the targets and files the include touches, with ggml's flags.
_FAKE_ROOT = """cmake_minimum_required(VERSION 3.21)
project("llama.cpp" C CXX)
add_subdirectory(ggml/src)
add_library(llama SHARED src/llama.cpp)
"""
_FAKE_GGML = """option(GGML_CPU_REPACK "repack" ON)
add_library(ggml-cpu SHARED ggml-cpu/ops.cpp ggml-cpu/repack.cpp ggml-cpu/arch/x86/repack.cpp)
target_compile_options(ggml-cpu PRIVATE -march=native)
if (GGML_CPU_REPACK)
    target_compile_definitions(ggml-cpu PRIVATE GGML_USE_CPU_REPACK)
endif()
"""


@pytest.mark.skipif(shutil.which("cmake") is None or platform.machine() not in ("x86_64", "AMD64"),
                    reason="needs cmake on x86-64 (the machine that compiles llama-cpp-python)")
def test_the_project_include_sets_each_files_flags_as_documented(tmp_path):
    """Configured on a stand-in tree, the include gives: libllama -O1; ggml-cpu's kernels -O3 with AMX
    compiled out after -march=native; the repack files -O0 and repacking itself off."""
    (tmp_path / "ggml/src/ggml-cpu/arch/x86").mkdir(parents=True)
    (tmp_path / "src").mkdir()
    (tmp_path / "CMakeLists.txt").write_text(_FAKE_ROOT)
    (tmp_path / "ggml/src/CMakeLists.txt").write_text(_FAKE_GGML)
    for name in ("src/llama.cpp", "ggml/src/ggml-cpu/ops.cpp", "ggml/src/ggml-cpu/repack.cpp",
                 "ggml/src/ggml-cpu/arch/x86/repack.cpp"):
        (tmp_path / name).write_text("int f() { return 0; }\n")
    include = ROOT / "cmake" / "llama-cpp-python-lean.cmake"
    subprocess.run(["cmake", "-S", tmp_path, "-B", tmp_path / "build", "-DCMAKE_BUILD_TYPE=Release",
                    "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", f"-DCMAKE_PROJECT_llama.cpp_INCLUDE={include}"],
                   check=True, capture_output=True)
    commands = json.loads((tmp_path / "build" / "compile_commands.json").read_text())
    flags = {Path(c["file"]).relative_to(tmp_path).as_posix(): c["command"].split() for c in commands}

    def opt(name):  # the -O flag that wins (the last one)
        return [f for f in flags[name] if re.fullmatch(r"-O\w", f)][-1]

    assert opt("src/llama.cpp") == "-O1"
    ops = flags["ggml/src/ggml-cpu/ops.cpp"]
    assert opt("ggml/src/ggml-cpu/ops.cpp") == "-O3"
    assert ops.index("-march=native") < ops.index("-mno-amx-int8")
    assert {"-mno-amx-tile", "-mno-amx-int8", "-mno-amx-bf16"} <= set(ops)
    assert opt("ggml/src/ggml-cpu/repack.cpp") == opt("ggml/src/ggml-cpu/arch/x86/repack.cpp") == "-O0"
    assert not any("GGML_USE_CPU_REPACK" in f for command in flags.values() for f in command)
    assert "-mno-amx-int8" not in flags["src/llama.cpp"]


def test_ci_installs_with_the_readme_command():
    assert f'{LEAN} pip install --no-compile -e ".[test,train]"' in (ROOT / ".ci" / "run").read_text()


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
