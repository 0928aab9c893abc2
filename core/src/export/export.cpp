// `strata export`: a checkpoint's model, consolidated. The model is rebuilt from the checkpoint's
// resolved config and data description (no dataset needed), filled from the saved pieces of its
// tensors, and written in the form the output's name asks for.

#include "export/export.hpp"

#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "ckpt/store.hpp"
#include "config/experiment.hpp"
#include "run.hpp"
#include "strata/errors.hpp"
#include "strata/model.hpp"
#include "strata/registry.hpp"
#include "strata/sharded_state.hpp"
#include "strata/strategy.hpp"
#include "train/saved_model.hpp"
#include "train/checkpointer.hpp"

namespace strata {

namespace fs = std::filesystem;

void export_checkpoint(const ExportRequest& request) {
  const auto dir = resolve_resume(request.checkpoint.string(), Experiment{}, {});
  const ckpt::Checkpoint checkpoint(*dir);
  const Json trainer = Json::parse(checkpoint.file_text("trainer.json"));

  // The experiment that saved it, without what would need files beside it (init_from).
  Experiment e = load_experiment(*dir / "config.toml", {"train.init_from=\"\""});
  Registry registry;
  load_registry(registry, &e);
  validate_plugin_sections(e, registry);
  const Json* data = trainer.find("data");
  const Json* config_dir = trainer.find("config_dir");
  if (data == nullptr)
    throw Error(fmt::format("checkpoint {} has no data description in its trainer.json.", dir->string()),
                "Export checkpoints written by this version of Strata.");
  const ModelContext context{data_spec_from(*data), config_dir ? fs::path(config_dir->string_or("")) : dir->parent_path()};
  auto model = registry.create_model(e.model.name, e.model.options, context);

  std::vector<TensorPiece> pieces;
  for (const auto& [name, p] : unique_trainable_parameters(*model))
    pieces.push_back({"model/" + name, p.sizes().vec(), 0, p.numel(), p.detach().view({-1})});
  for (auto& p : frozen_state_pieces(*model, StateAccess::kLoad, {})) pieces.push_back(std::move(p));
  checkpoint.read_into(pieces);

  StateDict state;
  for (const auto& p : model->named_parameters()) state.emplace_back(p.key(), state_dict_copy(p.value()));
  for (const auto& b : model->named_buffers()) state.emplace_back(b.key(), state_dict_copy(b.value()));
  const auto ext = request.to.extension().string();
  const std::string form = ext == ".pt" ? "pt" : ext == ".safetensors" ? "safetensors" : "directory";
  if (request.to.has_parent_path()) fs::create_directories(request.to.parent_path());
  const std::string note = write_model(*model, state, request.to, form);
  std::printf("%s\n", fmt::format("exported step {} of {} ({} model, {} tensors{}) to {}", checkpoint.step(),
                                  dir->string(), e.model.name, state.size(), note, request.to.string())
                          .c_str());
}

}  // namespace strata
