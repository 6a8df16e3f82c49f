# Included by llama.cpp's own CMakeLists right after its project() call, when llama-cpp-python is
# built with
#   CMAKE_ARGS="-DLLAVA_BUILD=OFF -DCMAKE_PROJECT_llama.cpp_INCLUDE=<this file>"
# (README, "Quick start"). llama-cpp-python forces llama.cpp's `common` library on, but its Python
# package never loads it: the library, and the HTTP client vendored for it, are over a third of the
# compile. Agora needs only libllama and libggml; LLAVA_BUILD=OFF drops the multimodal library too.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama: build common utils library (not needed by llama-cpp-python's bindings)" FORCE)

# Agora loads every model with use_extra_bufts = False (the AMX workaround, models/llamacpp.py), so
# ggml's "extra buffer types" never run in it: the AMX matmul and the runtime repacking of Q4_0/Q4_K
# weights. They are 11 % of the remaining compile. AMX is compiled out (-mno-amx-*: the platform notes'
# other fix for llama.cpp's AMX crash, upstream #20824), and repacking is turned off (GGML_CPU_REPACK,
# ggml's own switch), so its two files, still compiled and linked, are never called and build at -O0.
set(GGML_CPU_REPACK OFF CACHE BOOL "ggml: use runtime weight conversion of Q4_0 to Q4_X_X (never used by Agora)" FORCE)

# libllama (llama.cpp's src/: model loading, graph building, KV cache, sampling) is two thirds of what
# is left to compile at -O3, yet holds none of the compute kernels, which are ggml's and keep -O3. At
# -O1 its compile takes about 38 % less time, and `agora run align` ran as fast (issue 29:
# benchmarks/README.md, "The first install"). Applied once every target exists.
function(_agora_lean_targets)
  if(TARGET llama)
    target_compile_options(llama PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O1>)
  endif()
  if(TARGET ggml-cpu AND CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$"
     AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
    target_compile_options(ggml-cpu PRIVATE -mno-amx-tile -mno-amx-int8 -mno-amx-bf16)
    set(_cpu "${CMAKE_CURRENT_SOURCE_DIR}/ggml/src/ggml-cpu")
    set_source_files_properties("${_cpu}/repack.cpp" "${_cpu}/arch/x86/repack.cpp"
      TARGET_DIRECTORY ggml-cpu PROPERTIES COMPILE_OPTIONS -O0)
  endif()
endfunction()
cmake_language(DEFER DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} CALL _agora_lean_targets)
