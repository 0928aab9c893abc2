#pragma once
// The commands of the `strata` CLI, callable without it (the CLI only parses arguments).

#include <filesystem>
#include <string>
#include <vector>

namespace strata {

struct RunRequest {
  std::filesystem::path file;          ///< experiment TOML
  std::filesystem::path out;           ///< run directory; empty: <out_dir>/<name>/<UTC time>
  std::vector<std::string> overrides;  ///< "section.key=value"
};

/// `strata run`: trains the experiment and writes the run directory. As a rank of a job started
/// by a launcher (torchrun, srun, mpirun or strata itself) it joins that job; otherwise, for
/// [distributed] nproc > 1, it spawns and supervises the ranks on this host. Throws on failure;
/// returns the exit code (non-zero when a spawned rank failed).
int run_experiment(const RunRequest& request);
/// `strata validate`: every check of `run` that precedes training (plugins, options, data files).
void validate_experiment(const RunRequest& request);
/// `strata plugins`: a table of kind, name, description and library.
void list_plugins();
/// `strata describe NAME`: a plugin's (or a core section's) options with types, defaults and docs.
void describe(const std::string& name);

}  // namespace strata
