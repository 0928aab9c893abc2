# Compiler launcher, warnings and the shared LibTorch precompiled header.

if(STRATA_USE_CCACHE)
  find_program(STRATA_CCACHE ccache)
  if(STRATA_CCACHE)
    # pch_defines/time_macros let ccache cache TUs that use a precompiled header.
    set(CMAKE_CXX_COMPILER_LAUNCHER
        "${CMAKE_COMMAND}" -E env "CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime"
        "${STRATA_CCACHE}")
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
    target_link_libraries(strata_torch_pch PRIVATE torch strata::fmt)
    target_precompile_headers(strata_torch_pch PRIVATE "${STRATA_TORCH_PCH_HEADER}")
  endif()
  target_precompile_headers(${target} REUSE_FROM strata_torch_pch)
endfunction()

# The PyPI LibTorch exports its own copies of some std::filesystem functions, built against a newer
# libstdc++; when libtorch.so precedes libstdc++ in an executable's search order, those copies win
# and some (remove_all) call into symbols this libstdc++ lacks. Naming libstdc++ first in every
# executable keeps the system's definitions in front.
function(strata_executable_link_order target)
  target_link_options(${target} BEFORE PRIVATE "LINKER:--push-state,--no-as-needed" "-lstdc++" "LINKER:--pop-state")
endfunction()
