# strata_add_plugin(<name> KIND <strategy|model|dataset> SOURCES <files...>
#                   [LIBRARIES <targets...>] [OUTPUT_DIRECTORY <dir>])
#
# Builds one plugin as a MODULE library `libstrata_<kind>_<name>.so`, with hidden visibility,
# linked to the same LibTorch and libstrata_core as the host. A strategy plugin also gets the
# strategy kit (Strata::kit, libstrata_kit.a: strata/engine.hpp, plan.hpp, mesh.hpp, ...) linked
# into itself: its own private copy, of the kit version it was built against. The only symbols it
# exports are the three of STRATA_PLUGIN (strata/plugin.hpp).
#
# The same file serves the Strata build and plugins built out of tree against an installed Strata
# (find_package(Strata) includes it). In tree the library goes to build/plugins and shares the
# precompiled LibTorch header, warnings and fmt flags of the other plugins; out of tree it goes to
# OUTPUT_DIRECTORY, default the current binary directory (point STRATA_PLUGIN_PATH there).
function(strata_add_plugin name)
  cmake_parse_arguments(ARG "" "KIND;OUTPUT_DIRECTORY" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT ARG_KIND MATCHES "^(strategy|model|dataset)$")
    message(FATAL_ERROR "strata_add_plugin(${name}): KIND must be strategy, model or dataset")
  endif()
  if(NOT ARG_OUTPUT_DIRECTORY)
    if(STRATA_PLUGIN_OUTPUT_DIRECTORY)
      set(ARG_OUTPUT_DIRECTORY "${STRATA_PLUGIN_OUTPUT_DIRECTORY}")
    else()
      set(ARG_OUTPUT_DIRECTORY "${CMAKE_CURRENT_BINARY_DIR}")
    endif()
  endif()
  set(target strata_${ARG_KIND}_${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  # Strata::core carries the SDK headers, C++20 and LibTorch.
  target_link_libraries(${target} PRIVATE Strata::core)
  if(ARG_KIND STREQUAL "strategy")
    target_link_libraries(${target} PRIVATE Strata::kit)
  endif()
  # In tree only: strata::fmt (plugins may format with fmt, and the shared precompiled header
  # expects its flags) and the project's warnings.
  foreach(extra strata::fmt strata_warnings)
    if(TARGET ${extra})
      target_link_libraries(${target} PRIVATE ${extra})
    endif()
  endforeach()
  target_link_libraries(${target} PRIVATE ${ARG_LIBRARIES})
  set_target_properties(${target} PROPERTIES
    CXX_EXTENSIONS OFF  # -std=c++20, as the host
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIRECTORY}")
  if(COMMAND strata_torch_pch)
    strata_torch_pch(${target})
  endif()
  set_property(GLOBAL APPEND PROPERTY STRATA_PLUGIN_TARGETS ${target})
endfunction()
