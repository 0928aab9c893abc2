# LibTorch ships its own fmt headers (a newer major) in its include directory. Any target that
# sees both would compile against LibTorch's headers but link Debian's libfmt. This sets
# STRATA_FMT_SHIM to a directory holding only the real fmt headers, to go ahead of every -isystem
# path (-I wins). Needs find_package(fmt) first.
get_target_property(_fmt_inc fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
find_path(STRATA_FMT_INCLUDE_DIR fmt/core.h HINTS ${_fmt_inc} REQUIRED)
set(STRATA_FMT_SHIM "${PROJECT_BINARY_DIR}/include-shims/fmt")
file(MAKE_DIRECTORY "${STRATA_FMT_SHIM}")
if(NOT EXISTS "${STRATA_FMT_SHIM}/fmt")
  file(CREATE_LINK "${STRATA_FMT_INCLUDE_DIR}/fmt" "${STRATA_FMT_SHIM}/fmt" SYMBOLIC)
endif()
