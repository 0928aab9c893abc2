# Compiler launcher, warnings and the shared LibTorch precompiled header.

if(STRATA_USE_CCACHE)
  find_program(STRATA_CCACHE ccache)
  if(STRATA_CCACHE)
    # pch_defines/time_macros let ccache cache TUs that use a precompiled header. Depend mode: a
    # miss hashes the headers listed in the compiler's own dependency file instead of running the
    # preprocessor first, which costs about 1 s for a source that reaches LibTorch's headers (an
    # empty cache, strategies/fsdp/fsdp.cpp: 10.6-11.3 s against 9.3-10.4 s without ccache); a hit
    # takes 0.8 s either way.
    set(CMAKE_CXX_COMPILER_LAUNCHER
        "${CMAKE_COMMAND}" -E env "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
        "CCACHE_DEPEND=true" "${STRATA_CCACHE}")
    set(CMAKE_CUDA_COMPILER_LAUNCHER "${STRATA_CCACHE}")  # the fused model kernels (models/common)
  endif()
endif()

add_library(strata_warnings INTERFACE)
target_compile_options(strata_warnings INTERFACE -Wall -Wextra -Wno-unused-parameter)

# One precompiled LibTorch header for every plugin and test: compiled once, reused by all
# targets with the same flags (PIC, hidden visibility). libstrata_core has its own copy.
set(STRATA_TORCH_PCH_HEADER "${PROJECT_SOURCE_DIR}/core/src/torch_pch.hpp")
function(strata_torch_pch target)
  if(NOT STRATA_USE_PCH)
    return()
  endif()
  if(NOT TARGET strata_torch_pch)
    add_library(strata_torch_pch OBJECT "${PROJECT_SOURCE_DIR}/core/src/torch_pch.cpp")
    set_target_properties(strata_torch_pch PROPERTIES CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
    target_link_libraries(strata_torch_pch PRIVATE strata_torch strata::fmt)
    target_precompile_headers(strata_torch_pch PRIVATE "${STRATA_TORCH_PCH_HEADER}")
  endif()
  target_precompile_headers(${target} REUSE_FROM strata_torch_pch)
endfunction()

# Unity build: `target`'s sources compiled `batch` at a time, each batch one translation unit. Every
# Strata source includes LibTorch's headers, and a source of 200 lines costs 15-25 s to compile
# because of them (parsing, then instantiating and optimizing the inline LibTorch code it uses);
# in a batch that cost is paid once. Built so, the three targets take about 35% of the CPU time
# they take source by source, and a clean build about 55% (BENCHMARKS.md). The price: names at file scope (anonymous namespaces
# included) must be unique across a target's sources, and editing one source recompiles its batch.
# Sources with their own compile options, definitions or include directories compile alone.
# -DSTRATA_UNITY_BUILD=OFF compiles source by source.
function(strata_unity_build target batch)
  if(STRATA_UNITY_BUILD)
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE ${batch})
  endif()
endfunction()

# Test code (the unit tests, the fixture plugins, the config fuzzer, the GPU tests) compiles at -O1
# in a Release build: the speed of what it runs is LibTorch's and libstrata_core's, compiled as they
# are. A batch of ten unit test sources compiles in 35 s at -O1, 49 s at -O3.
function(strata_test_code target)
  target_compile_options(${target} PRIVATE $<$<CONFIG:Release>:-O1>)
endfunction()

# libstdc++ ahead of LibTorch, in every binary that links LibTorch.
#
# The PyPI LibTorch is built with Red Hat's gcc-toolset-13 on a GCC 8 system, which links the parts
# of libstdc++ newer than the system's into the binaries, and its libraries export those copies,
# unversioned: libtorch.so the std::filesystem operations (remove_all, equivalent, permissions, ...),
# the string streams and std::chrono's time zones; libtorch_cpu.so std::filesystem::path,
# directory_iterator, exception_ptr and more (`nm -D --defined-only`). They are not interchangeable
# with the system's: libtorch.so's remove_all calls recursive_directory_iterator::__erase, which no
# libstdc++ exports (its gnu.ver keeps it local up to GCC 16), so removing a non-empty directory
# through that copy jumps to address 0 on GCC 12 and GCC 14 runtimes alike. (Linked LibTorch
# first, dozens of the unit test cases crash, most of them there.)
#
# Which copy a reference gets is decided at run time by glibc's dynamic loader: the first object of
# the reference's lookup scope that defines the name wins, and an unversioned definition satisfies
# a versioned reference as well (remove_all@GLIBCXX_3.4.26 binds to libtorch.so when libtorch.so
# comes first), so symbol versions protect nothing; only the order does. The scope of every object
# of a process begins with the global scope: the executable, then its DT_NEEDED entries breadth
# first; a plugin dlopen()ed with RTLD_LOCAL searches the global scope before its own dependencies.
# So libstdc++.so.6 is made the first DT_NEEDED entry:
#  - of every executable: libstdc++ then comes right after the executable in the global scope, and
#    every reference of the process (the executable's, libstrata_core's, LibTorch's own, every
#    plugin's, in tree or not) that libstdc++ can satisfy binds to libstdc++;
#  - of libstrata_core and every plugin: the static linker records their references against
#    libstdc++ (versioned) instead of against libtorch.so (unversioned), and a host whose global
#    scope has no LibTorch ahead of libstdc++ (say a C program, or one linked libstdc++ first) gets
#    libstdc++'s definitions for them too. (A host that itself puts LibTorch first, or an
#    LD_PRELOAD of it, still wins: no link option of a library can override the global scope.)
# The same holds on both toolchains we build with: GCC 12 on Debian 12 (glibc 2.36, binutils 2.40)
# and GCC 13 on Ubuntu 24.04 with GCC 14's libstdc++ at run time (glibc 2.39, binutils 2.42). The
# lookup rules are glibc's on both, and every reference compiled from GCC 13's headers is defined
# by GCC 14's libstdc++, so the search stops there before reaching LibTorch. Both GCCs link with
# --as-needed by default, which would drop a libstdc++ named before anything uses it; the
# --push-state/--no-as-needed pair keeps it (GNU ld >= 2.26, lld and mold accept it) and restores
# the toolchain's mode for the rest of the command line. Link options go before the objects and
# libraries on CMake's link lines, so -lstdc++ comes ahead of LibTorch's libraries on each of them.
#
# Set on strata_core as a usage requirement (top-level CMakeLists.txt), the option reaches in this
# one place everything that links LibTorch, since everything links it through strata_core: the CLI,
# the test executables and the config fuzzer, libstrata_core, the built-in, template and fixture
# plugins, and (exported with Strata::core) plugins and programs built against the installed SDK.
# tests/integration/test_link.py asks the dynamic loader where each reference of every binary of
# the build binds, and fails naming the binary and the symbol when one reaches LibTorch.
set(STRATA_LIBSTDCXX_FIRST_FLAGS "-Wl,--push-state,--no-as-needed -lstdc++ -Wl,--pop-state")
function(strata_link_libstdcxx_first target)
  # One SHELL: item keeps the three together (CMake de-duplicates link options one item at a time).
  target_link_options(${target} BEFORE PUBLIC "SHELL:${STRATA_LIBSTDCXX_FIRST_FLAGS}")
endfunction()
