# `cmake --install build --prefix P` installs the SDK and the CLI:
#
#   P/bin/strata                        the CLI's launcher (a shell script): finds LibTorch, then runs
#   P/lib/strata/bin/strata             the CLI itself
#   P/lib/libstrata_core.so             the host and SDK implementation
#   P/lib/libstrata_cuda.so             its CUDA half (the NCCL backend, with libtorch_cuda), opened
#                                       at start on a machine with an NVIDIA GPU
#   P/lib/strata/plugins/*.so           the built-in plugins (every strata_add_plugin() call made
#                                       before this file is included: not the template, not the
#                                       test fixtures)
#   P/lib/libstrata_kit.a               the strategy kit, linked into each strategy plugin
#   P/include/strata/*.hpp              the SDK headers: the contract's and the kit's
#   P/lib/cmake/Strata/                 find_package(Strata): Strata::core, Strata::kit, strata_add_plugin()
#
# The CLI looks for its plugins in <its directory>/../plugins, then <its directory>/../lib/strata/plugins
# (plugin_search_path in core/src/plugin_loader.cpp): the plugin directory is `lib/strata/plugins`
# literally, whatever CMAKE_INSTALL_LIBDIR is. Installed binaries find libstrata_core relative to
# themselves (the tree can move), and LibTorch at run time: the launcher puts STRATA_LIBTORCH, else
# the torch/lib this build used when it is still there, else the torch of STRATA_PYTHON or python3,
# on LD_LIBRARY_PATH (their RUNPATH keeps this build's torch/lib as the last resort).
include(CMakePackageConfigHelpers)

set(STRATA_INSTALL_PLUGINDIR "lib/strata/plugins")
set(STRATA_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/Strata")

get_filename_component(_strata_torch_libdir "${TORCH_LIBRARY}" DIRECTORY)
file(RELATIVE_PATH _strata_bin_to_lib "/lib/strata/bin" "/${CMAKE_INSTALL_LIBDIR}")
file(RELATIVE_PATH _strata_plugins_to_lib "/${STRATA_INSTALL_PLUGINDIR}" "/${CMAKE_INSTALL_LIBDIR}")
string(REGEX REPLACE "/$" "" _strata_plugins_to_lib "${_strata_plugins_to_lib}")
set_target_properties(strata PROPERTIES INSTALL_RPATH "$ORIGIN/${_strata_bin_to_lib};${_strata_torch_libdir}")
set_target_properties(strata_core PROPERTIES INSTALL_RPATH "${_strata_torch_libdir}")
get_property(_strata_builtin_plugins GLOBAL PROPERTY STRATA_PLUGIN_TARGETS)
set_target_properties(${_strata_builtin_plugins} PROPERTIES
  INSTALL_RPATH "$ORIGIN/${_strata_plugins_to_lib};${_strata_torch_libdir}")

install(TARGETS strata RUNTIME DESTINATION "lib/strata/bin")  # beside lib/strata/plugins: ../plugins finds them
set(STRATA_TORCH_LIBDIR "${_strata_torch_libdir}")
configure_file(cmake/strata_launcher.sh.in "${PROJECT_BINARY_DIR}/strata_launcher.sh" @ONLY)
install(PROGRAMS "${PROJECT_BINARY_DIR}/strata_launcher.sh" DESTINATION "${CMAKE_INSTALL_BINDIR}" RENAME strata)
install(TARGETS strata_core strata_torch EXPORT StrataTargets LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}")
if(TARGET strata_cuda)  # beside libstrata_core, which opens it on a machine with a GPU
  set_target_properties(strata_cuda PROPERTIES INSTALL_RPATH "$ORIGIN;${_strata_torch_libdir}")
  install(TARGETS strata_cuda LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}")
endif()
install(TARGETS strata_kit EXPORT StrataTargets ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
install(TARGETS ${_strata_builtin_plugins} LIBRARY DESTINATION "${STRATA_INSTALL_PLUGINDIR}")
install(DIRECTORY "${PROJECT_SOURCE_DIR}/core/include/strata" "${PROJECT_SOURCE_DIR}/kit/include/strata"
  DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}" FILES_MATCHING PATTERN "*.hpp")
# The exporter of the torchscript model plugin: a PyTorch nn.Module in, DIR/model.pt + model.json out.
install(PROGRAMS "${PROJECT_SOURCE_DIR}/tools/export_model.py" DESTINATION "${CMAKE_INSTALL_DATADIR}/strata/tools")

install(EXPORT StrataTargets NAMESPACE Strata:: DESTINATION "${STRATA_INSTALL_CMAKEDIR}")
configure_package_config_file(cmake/StrataConfig.cmake.in "${PROJECT_BINARY_DIR}/StrataConfig.cmake"
  INSTALL_DESTINATION "${STRATA_INSTALL_CMAKEDIR}")
# While Strata is 0.x, a minor release may change the SDK: find_package(Strata 0.1) accepts 0.1.*
# only. (The loader checks the plugin ABI and the LibTorch version at run time anyway.)
write_basic_package_version_file("${PROJECT_BINARY_DIR}/StrataConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}" COMPATIBILITY SameMinorVersion)
install(FILES "${PROJECT_BINARY_DIR}/StrataConfig.cmake" "${PROJECT_BINARY_DIR}/StrataConfigVersion.cmake"
  "${PROJECT_SOURCE_DIR}/plugins/cmake/StrataPlugin.cmake"
  DESTINATION "${STRATA_INSTALL_CMAKEDIR}")
