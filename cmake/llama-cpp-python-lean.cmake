# Included by llama.cpp's own CMakeLists right after its project() call, when llama-cpp-python is
# built with
#   CMAKE_ARGS="-DLLAVA_BUILD=OFF -DCMAKE_PROJECT_llama.cpp_INCLUDE=<this file>"
# (README, "Quick start"). llama-cpp-python forces llama.cpp's `common` library on, but its Python
# package never loads it: the library, and the HTTP client vendored for it, are over a third of the
# compile. Agora needs only libllama and libggml; LLAVA_BUILD=OFF drops the multimodal library too.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama: build common utils library (not needed by llama-cpp-python's bindings)" FORCE)
