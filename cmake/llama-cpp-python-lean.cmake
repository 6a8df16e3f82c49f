# Included by llama.cpp's own CMakeLists right after its project() call, when llama-cpp-python is
# built with
#   CMAKE_ARGS="-DLLAVA_BUILD=OFF -DCMAKE_PROJECT_llama.cpp_INCLUDE=<this file>"
# (README, "Quick start"). llama-cpp-python forces llama.cpp's `common` library on, but its Python
# package never loads it: the library, and the HTTP client vendored for it, are over a third of the
# compile. Agora needs only libllama and libggml; LLAVA_BUILD=OFF drops the multimodal library too.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama: build common utils library (not needed by llama-cpp-python's bindings)" FORCE)

# libllama (llama.cpp's src/: model loading, graph building, KV cache, sampling) is two thirds of what
# is left to compile at -O3, yet holds none of the compute kernels, which are ggml's and keep -O3. At
# -O1 its compile takes about 38 % less time, and `agora run align` ran as fast (issue 29:
# benchmarks/README.md, "The first install"). Applied once every target exists, to the `llama` target only.
function(_agora_llama_opt)
  if(TARGET llama)
    target_compile_options(llama PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-O1>)
  endif()
endfunction()
cmake_language(DEFER DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} CALL _agora_llama_opt)
