#pragma once
// Saved models: the full state dict a strategy hands to rank 0, written in the format of
// PyTorch's torch.save (a pickled dict of tensors, readable by torch.load in Python), and read back
// into a model before any strategy takes it over (`[train] init_from`).

#include <filesystem>
#include <map>
#include <string>

#include "strata/model.hpp"
#include "strata/strategy.hpp"

namespace strata {

/// Writes `state` to `file` as a dict {name: tensor} (CPU tensors).
void save_state_dict(const StateDict& state, const std::filesystem::path& file);

/// Loads a file written by save_state_dict into `model`'s parameters and buffers. The names,
/// shapes and count must match the model exactly; otherwise throws Error naming the file and the
/// offending keys.
/// The tensors of a file written by save_state_dict(), by name; throws strata::Error (`where`
/// names the file for the user, `fix` says what to do) when it is not one.
std::map<std::string, torch::Tensor> read_state_dict(const std::filesystem::path& file, const std::string& where,
                                                     const std::string& fix);
void load_state_dict(Model& model, const std::filesystem::path& file);

}  // namespace strata
