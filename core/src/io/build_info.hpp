#pragma once
// What this build of strata is and where it runs: `strata --version`, summary.json's "versions"
// and "host", so that a result can be traced to the code and libraries that produced it.

#include <string>

#include "strata/json.hpp"

namespace strata {

/// Versions of strata and the libraries it runs on. A library that is absent reads "none".
struct BuildInfo {
  std::string version;  ///< strata's, e.g. "0.1.0"
  std::string commit;   ///< git short hash at build time, "+dirty" appended when the tree had
                        ///< uncommitted changes; "unknown" when built outside a git checkout
  std::string torch;    ///< LibTorch, e.g. "2.11.0"
  std::string cuda;     ///< the CUDA runtime LibTorch was built with, e.g. "13.0"; "none" for a CPU build
  std::string nccl;     ///< the NCCL loaded with LibTorch's CUDA library, e.g. "2.27.5"; "none" when not loaded
};

/// This process's build info (computed once).
const BuildInfo& build_info();

/// build_info() as a JSON object {strata, commit, libtorch, cuda, nccl}.
Json versions_json();

/// The text of `strata --version`: a first line "strata X.Y.Z", then one line per library.
std::string version_text();

/// This machine's host name ("unknown" if the system does not say).
std::string host_name();

}  // namespace strata
