#include "compare/resume.hpp"

#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "strata/errors.hpp"

namespace strata {

namespace fs = std::filesystem;

Json comparison_json(const CompareRequest& request, const SweepPlan& plan) {
  Json j = Json::object();
  j["sweep"] = fs::absolute(request.file).lexically_normal().string();
  Json& sets = j["set"] = Json::array();
  for (const auto& o : request.overrides) sets.push_back(o);
  Json& runs = j["combinations"] = Json::array();
  for (const auto& c : plan.combinations) {
    Json run = Json::object();
    run["label"] = c.label;
    Json& o = run["overrides"] = Json::array();
    for (const auto& s : c.overrides) o.push_back(s);
    runs.push_back(std::move(run));
  }
  return j;
}

void check_resumable(const fs::path& dir, const Json& now) {
  const fs::path file = dir / kComparisonFile;
  const std::string fix = "Give --resume the directory of an earlier `strata compare` (its outputs: line), with the "
                          "sweep file and --set options it ran with (its comparison.json lists them).";
  if (!fs::is_directory(dir)) throw UsageError("--resume " + dir.string() + ": no such directory.", fix);
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  if (!in) {
    throw UsageError("--resume " + dir.string() + ": it holds no " + kComparisonFile +
                         " (not a comparison's directory, or one made before --resume existed).", fix);
  }
  Json before;
  try {
    before = Json::parse(text.str());
  } catch (const std::exception& e) {
    throw UsageError(file.string() + " is damaged: " + e.what(), fix);
  }
  const Json* had = before.find("combinations");
  const Json* has = now.find("combinations");
  if (had == nullptr || had->dump(-1) != has->dump(-1)) {
    const Json* sweep = before.find("sweep");
    throw UsageError(fmt::format("--resume {}: that comparison ran other combinations (sweep {}, --set {}) than this "
                                 "command asks for.",
                                 dir.string(), sweep ? sweep->string_or("?") : "?",
                                 before.find("set") ? before.find("set")->dump(-1) : "[]"),
                     fix);
  }
}

}  // namespace strata
