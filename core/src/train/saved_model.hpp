#pragma once
// Saved models: the full state dict a strategy hands to rank 0, written for `[train] save_final`
// as a PyTorch torch.save file (final_model.pt) or as a Hugging Face style directory
// (final_model/model.safetensors + config.json), and read back into a model before any strategy
// takes it over (`[train] init_from`), from either of those or from a Hugging Face checkpoint.

#include <filesystem>
#include <map>
#include <string>

#include "strata/model.hpp"
#include "strata/strategy.hpp"

namespace strata {

/// Writes `state` to `file` as a dict {name: tensor} (CPU tensors).
void save_state_dict(const StateDict& state, const std::filesystem::path& file);

/// The tensors of a file written by save_state_dict(), by name; throws strata::Error (`where`
/// names the file for the user, `fix` says what to do) when it is not one.
std::map<std::string, torch::Tensor> read_state_dict(const std::filesystem::path& file, const std::string& where,
                                                     const std::string& fix);

/// Loads a saved model into `model`'s parameters and buffers (`[train] init_from`). `path` is one of
///  - a file written by save_state_dict() (final_model.pt);
///  - a safetensors file (recognized by its contents, whatever its name);
///  - a sharded checkpoint's index, `*.index.json` ({"weight_map": {tensor: shard file}});
///  - a directory holding `model.safetensors` or else `model.safetensors.index.json` (a Hugging
///    Face model directory, or the final_model directory of a safetensors save_final).
/// A tensor may carry the model's own name or its external name (Model::external_names(); several
/// external names for one tensor are aliases, e.g. tied weights, and must then hold equal
/// values). Floating-point tensors convert to the model's dtype (bf16, fp16, f64 -> float32).
/// Tolerated: `*rotary_emb.inv_freq` tensors (derived state some Hugging Face files carry); a
/// missing name of a tensor the model registers under two names (tied weights) when the other is
/// found; and, for models with external names, missing buffers that have no external name (derived
/// state that the external format does not carry). Anything else missing, unexpected, mis-shaped or of the
/// wrong kind of dtype is one Error listing them (names and shapes) with the file named. Only the
/// tensors the model takes are read. With `partial` (`[train] init_partial`, e.g. a classifier
/// fine-tuned from a language model's checkpoint) missing tensors keep their fresh initialization
/// and unexpected ones are left unread; the returned text lists both ("" when none), for the log.
/// Mis-shaped tensors are an error either way.
std::string load_state_dict(Model& model, const std::filesystem::path& path, bool partial = false);
/// Checks, cheaply, that `path` is something load_state_dict can open (a directory with
/// model.safetensors or an index, a safetensors file or index whose headers parse, or a
/// torch.save archive), reading headers only. Throws strata::Error as load_state_dict would.
void check_saved_model(const std::filesystem::path& path);

/// Writes `state` of `model` to `target` in `form`: "pt" a torch.save file (save_state_dict);
/// "safetensors" one safetensors file (metadata {"format": "pt"}) under the model's external names
/// when every parameter has one (buffers without one, derived state, are left out; otherwise every
/// tensor keeps its Strata name); "directory" that file as `target`/model.safetensors with, when
/// Model::external_config() is not empty, config.json beside it (a Hugging Face model directory).
/// Returns a remark for the log ("" or ", external names, config.json"). Throws strata::Error.
std::string write_model(const Model& model, const StateDict& state, const std::filesystem::path& target,
                        const std::string& form);

/// What write_final_model() wrote.
struct SavedModel {
  std::string name;  ///< relative to the run directory: "final_model.pt" or the directory "final_model"
  std::string note;  ///< "" or a remark for the log line (e.g. why Strata names were kept)
};

/// Writes the final model `state` of `model` into `run_dir` in `format`: "pt": final_model.pt;
/// "safetensors": the directory final_model/ (write_model's "directory"), so
/// `transformers.AutoModelForCausalLM.from_pretrained(<run>/final_model)` and
/// `[train] init_from = "<run>/final_model"` both load it.
/// Throws strata::Error.
SavedModel write_final_model(const Model& model, const StateDict& state, const std::filesystem::path& run_dir,
                             const std::string& format);

}  // namespace strata
