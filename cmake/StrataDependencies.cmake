# Every dependency is found through CMAKE_PREFIX_PATH (no hard-coded system paths), so the same
# build works against Debian's packages, a staged prefix on a GPU node, or a custom install.

# The Python interpreter of the venv: it locates LibTorch and runs the TensorBoard reader tests.
set(STRATA_PYTHON "" CACHE FILEPATH "Python interpreter with torch and tensorboard (recorded by scripts/setup.sh)")

# LibTorch's CMake config probes the local GPU with a CUDA try_run unless an architecture list is
# given. Strata compiles no CUDA code of its own, so the list only silences that probe (and keeps
# configure identical on machines with and without a GPU).
if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
  set(TORCH_CUDA_ARCH_LIST "9.0")
endif()

# enable_language(CUDA) (the fused model kernels, top-level CMakeLists.txt) caches
# CMAKE_CUDA_ARCHITECTURES, which LibTorch's config warns about and ignores on every later
# configure; those kernels take their architectures from STRATA_CUDA_ARCHITECTURES instead.
unset(CMAKE_CUDA_ARCHITECTURES CACHE)
find_package(Torch QUIET)
if(NOT Torch_FOUND)
  if(NOT STRATA_PYTHON)
    find_program(STRATA_PYTHON_FALLBACK NAMES python3 python)
    set(_strata_py "${STRATA_PYTHON_FALLBACK}")
  else()
    set(_strata_py "${STRATA_PYTHON}")
  endif()
  if(_strata_py)
    execute_process(
      COMMAND "${_strata_py}" -c "import torch; print(torch.utils.cmake_prefix_path)"
      OUTPUT_VARIABLE _strata_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
      RESULT_VARIABLE _strata_rc ERROR_QUIET)
    if(_strata_rc EQUAL 0)
      list(APPEND CMAKE_PREFIX_PATH "${_strata_torch_prefix}")
    endif()
  endif()
  find_package(Torch)
  if(NOT Torch_FOUND)
    message(FATAL_ERROR
      "LibTorch was not found. Run scripts/setup.sh, or pass -DSTRATA_PYTHON=<python with torch 2.11> "
      "or add the output of `python -c 'import torch;print(torch.utils.cmake_prefix_path)'` to CMAKE_PREFIX_PATH.")
  endif()
endif()
if(NOT Torch_VERSION VERSION_EQUAL 2.11.0)
  message(WARNING "Strata is pinned to LibTorch 2.11.0; found ${Torch_VERSION}.")
endif()
set(STRATA_TORCH_VERSION "${Torch_VERSION}")

# strata_torch: the LibTorch that libstrata_core, the kit, the plugins and the tests link: its CPU
# library, c10 and c10_cuda (the CUDA allocator's statistics, streams and guards: small, and loaded
# without a GPU as well), with the C++ API's headers, definitions and flags of the `torch` target.
# Not libtorch_cuda: its CUDA kernels, cuBLAS, cuDNN and NCCL make every process start 0.16 s
# later (measured on 2 cores) and serve only a machine with an NVIDIA GPU, where libstrata_cuda
# (core/CMakeLists.txt) brings them in at start (core/src/device/cuda_support.cpp). The installed
# SDK exports it as Strata::torch, its properties read from the consumer's own `torch` target.
add_library(strata_torch INTERFACE)
target_link_libraries(strata_torch INTERFACE torch_cpu_library $<$<TARGET_EXISTS:c10_cuda>:c10_cuda>)
target_include_directories(strata_torch SYSTEM INTERFACE $<TARGET_PROPERTY:torch,INTERFACE_INCLUDE_DIRECTORIES>)
target_compile_options(strata_torch INTERFACE $<TARGET_PROPERTY:torch,INTERFACE_COMPILE_OPTIONS>)
# LibTorch's build configuration (USE_C10D_NCCL, ...) as `torch` declares it, so that its headers
# describe the same classes in libstrata_core as in libstrata_cuda.
target_compile_definitions(strata_torch INTERFACE
  $<$<TARGET_EXISTS:torch_cuda>:$<TARGET_PROPERTY:torch_cuda,INTERFACE_COMPILE_DEFINITIONS>>)
set_target_properties(strata_torch PROPERTIES EXPORT_NAME torch)

find_package(Boost 1.74 REQUIRED COMPONENTS program_options)
find_package(tomlplusplus 3.3 REQUIRED)
find_package(fmt REQUIRED)
find_package(ZLIB REQUIRED)
if(STRATA_BUILD_TESTS)
  find_package(doctest REQUIRED)
endif()

include("${CMAKE_CURRENT_LIST_DIR}/StrataFmtShim.cmake")  # STRATA_FMT_SHIM: strata::fmt puts it first
add_library(strata_fmt INTERFACE)
add_library(strata::fmt ALIAS strata_fmt)
target_include_directories(strata_fmt BEFORE INTERFACE "$<BUILD_INTERFACE:${STRATA_FMT_SHIM}>")
target_link_libraries(strata_fmt INTERFACE fmt::fmt)

# Gloo headers: LibTorch's ProcessGroupGloo.hpp includes <gloo/...>, which the wheel does not
# ship. LibTorch carries the compiled Gloo code; only the declarations are needed, from Debian's
# libgloo-dev (or any prefix on CMAKE_PREFIX_PATH). Only core/src/comm/'s c10d sources use them.
find_path(STRATA_GLOO_INCLUDE_DIR gloo/algorithm.h
  DOC "Directory holding gloo/algorithm.h (Debian package libgloo-dev)")
if(NOT STRATA_GLOO_INCLUDE_DIR)
  message(FATAL_ERROR
    "The Gloo headers (gloo/algorithm.h) were not found; LibTorch's c10d headers need them. "
    "Install the Debian package libgloo-dev (scripts/setup.sh does), or add a prefix holding "
    "include/gloo to CMAKE_PREFIX_PATH, or set -DSTRATA_GLOO_INCLUDE_DIR=<dir>.")
endif()
# NCCL: c10d's ProcessGroupNCCL layout depends on nccl.h's version, so prefer the header of the
# NCCL that LibTorch loads (the nvidia-nccl Python package next to torch) over a system one.
find_path(STRATA_NCCL_INCLUDE_DIR nccl.h
  HINTS "${TORCH_INSTALL_PREFIX}/../nvidia/nccl/include" NO_DEFAULT_PATH
  DOC "nccl.h of the NCCL that LibTorch uses (optional; the CUDA toolkit's is used otherwise)")

# SentencePiece (Debian's libsentencepiece-dev), optional: the `text` and `mrpc` datasets read a
# `tokenizer = "<path>/tokenizer.model"` with it. Without it they build with the byte tokenizer
# only, and a model path is refused with a message saying so.
find_path(STRATA_SENTENCEPIECE_INCLUDE_DIR sentencepiece_processor.h
  DOC "Directory holding sentencepiece_processor.h (Debian package libsentencepiece-dev)")
find_library(STRATA_SENTENCEPIECE_LIBRARY sentencepiece
  DOC "libsentencepiece (Debian package libsentencepiece-dev)")
if(STRATA_SENTENCEPIECE_INCLUDE_DIR AND STRATA_SENTENCEPIECE_LIBRARY)
  add_library(SentencePiece::sentencepiece UNKNOWN IMPORTED)
  set_target_properties(SentencePiece::sentencepiece PROPERTIES
    IMPORTED_LOCATION "${STRATA_SENTENCEPIECE_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${STRATA_SENTENCEPIECE_INCLUDE_DIR}")
  message(STATUS "SentencePiece: ${STRATA_SENTENCEPIECE_LIBRARY}")
else()
  message(STATUS "SentencePiece not found (libsentencepiece-dev): the text and mrpc datasets get the byte "
                 "tokenizer only")
endif()
