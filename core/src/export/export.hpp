#pragma once
// `strata export CHECKPOINT --to FILE`: a checkpoint's model, consolidated, as a file that
// init_from and Python load. A command built on the core: it reads the checkpoint store (ckpt/)
// and the model plugins; nothing in training depends on it.

#include <filesystem>

namespace strata {

struct ExportRequest {
  std::filesystem::path checkpoint;  ///< a checkpoint directory, a directory of them or a run directory
  std::filesystem::path to;          ///< *.safetensors, *.pt, or a directory (Hugging Face layout)
};
/// Writes the checkpoint's model, consolidated in float32, in the form `to` names: a file
/// `init_from` and Python load. Rebuilds the model from the checkpoint's config.toml (its plugins
/// and dataset must be available) and reads the tensors a piece at a time.
void export_checkpoint(const ExportRequest& request);

}  // namespace strata
