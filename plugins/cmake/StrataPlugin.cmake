# strata_add_plugin(<name> KIND <strategy|model|dataset> SOURCES <files...>
#                   [LIBRARIES <targets...>] [OUTPUT_DIRECTORY <dir>])
#
# Builds one plugin as a MODULE library `libstrata_<kind>_<name>.so` into build/plugins (or
# OUTPUT_DIRECTORY), with hidden visibility, linked to the same LibTorch and libstrata_core as
# the host. The only symbols it exports are the three of STRATA_PLUGIN (strata/plugin.hpp).
function(strata_add_plugin name)
  cmake_parse_arguments(ARG "" "KIND;OUTPUT_DIRECTORY" "SOURCES;LIBRARIES" ${ARGN})
  if(NOT ARG_KIND MATCHES "^(strategy|model|dataset)$")
    message(FATAL_ERROR "strata_add_plugin(${name}): KIND must be strategy, model or dataset")
  endif()
  if(NOT ARG_OUTPUT_DIRECTORY)
    set(ARG_OUTPUT_DIRECTORY "${STRATA_PLUGIN_OUTPUT_DIRECTORY}")
  endif()
  set(target strata_${ARG_KIND}_${name})
  add_library(${target} MODULE ${ARG_SOURCES})
  # strata::fmt: plugins may format with fmt, and the shared precompiled header expects its flags.
  target_link_libraries(${target} PRIVATE strata::core strata::fmt strata_warnings ${ARG_LIBRARIES})
  set_target_properties(${target} PROPERTIES
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY "${ARG_OUTPUT_DIRECTORY}")
  strata_torch_pch(${target})
  set_property(GLOBAL APPEND PROPERTY STRATA_PLUGIN_TARGETS ${target})
endfunction()
