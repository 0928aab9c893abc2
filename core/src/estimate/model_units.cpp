// The model's units and their parameter counts, for the estimator (needs LibTorch: builds the model).

#include <fmt/format.h>

#include "config/experiment.hpp"
#include "estimate/profile.hpp"
#include "run.hpp"
#include "strata/dataset.hpp"
#include "strata/model.hpp"
#include "strata/registry.hpp"

namespace strata::estimate {

std::vector<UnitProfile> model_units(const Experiment& experiment) {
  std::vector<UnitProfile> units;
  {
    Experiment e = experiment;
    Registry registry;
    load_registry(registry, &e);
    validate_plugin_sections(e, registry);
    const DatasetContext dataset_context{std::filesystem::absolute(e.directory()).lexically_normal(),
                                         static_cast<std::uint64_t>(e.train.seed)};
    const auto dataset = registry.create_dataset(e.dataset.name, e.dataset.options, dataset_context);
    const ModelContext model_context{dataset->spec(), e.directory()};
    const auto model = registry.create_model(e.model.name, e.model.options, model_context);
    const auto& names = model->unit_names();
    for (std::size_t u = 0; u < model->units().size(); ++u) {
      double params = 0;
      for (const auto& t : model->units()[u]->parameters())
        if (t.requires_grad()) params += static_cast<double>(t.numel());
      units.push_back({u < names.size() ? names[u] : fmt::format("unit{}", u), params});
    }
  }
  return units;
}

}  // namespace strata::estimate
