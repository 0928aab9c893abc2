#include "train/step_trace.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>
#include <memory>
#include <set>
#include <stdexcept>
#include <system_error>
#include <utility>

#include <fmt/format.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>

namespace strata {

namespace {
namespace profiler = torch::autograd::profiler;
using torch::profiler::impl::ActivityType;
using torch::profiler::impl::ProfilerConfig;
using torch::profiler::impl::ProfilerState;

ProfilerConfig config() {
  return ProfilerConfig(ProfilerState::KINETO, /*report_input_shapes=*/false, /*profile_memory=*/false,
                        /*with_stack=*/false, /*with_flops=*/false, /*with_modules=*/false);
}
}  // namespace

StepTrace::StepTrace(std::vector<std::int64_t> steps, std::int64_t start_step, c10::Device device,
                     std::filesystem::path run_dir, int rank)
    : device_(device), file_(run_dir / "trace" / fmt::format("rank_{}.pt.trace.json", rank)) {
  if (steps.size() != 2 || steps[1] <= start_step) return;
  first_ = std::max(steps[0], start_step + 1);
  last_ = steps[1];
}

StepTrace::~StepTrace() {
  if (!active_) return;
  try {
    profiler::disableProfiler();  // a step failed while traced: nothing is written
  } catch (const std::exception&) {  // the run's own error is the one to report
  }
}

void StepTrace::before_step(std::int64_t step1) {
  if (step1 != first_ || active_ || written_) return;
  // Kineto reports, as an error, that it finds no GPU on a machine without one.
  if (!device_.is_cuda()) setenv("KINETO_LOG_LEVEL", "5", /*overwrite=*/0);
  std::set<ActivityType> activities{ActivityType::CPU};
  if (device_.is_cuda()) activities.insert(ActivityType::CUDA);
  try {  // a debug aid: a profiler that cannot start costs the trace, not the run
    profiler::prepareProfiler(config(), activities);
    profiler::enableProfiler(config(), activities);
    active_ = true;
  } catch (const std::exception& e) {
    error_ = e.what();
  }
}

std::string StepTrace::after_step(std::int64_t step1) {
  if (step1 == last_ && !error_.empty()) return "trace: not recorded, the profiler did not start: " + error_;
  if (step1 != last_ || !active_) return "";
  if (device_.is_cuda()) torch::cuda::synchronize(device_.index());  // the traced steps' kernels, all finished
  active_ = false;
  try {  // as for starting it: a trace that cannot be written is reported, the run goes on
    const auto result = profiler::disableProfiler();
    std::error_code ec;
    std::filesystem::create_directories(file_.parent_path(), ec);
    if (ec) throw std::runtime_error("could not create " + file_.parent_path().string() + ": " + ec.message());
    result->save(file_.string());
    written_ = std::filesystem::is_regular_file(file_, ec);
    if (!written_) throw std::runtime_error("the profiler wrote no " + file_.string());
    return fmt::format("trace: steps {}-{} ({} events) in {}", first_, last_, result->events().size(), file_.string());
  } catch (const std::exception& e) {
    error_ = e.what();
    return "trace: not written: " + error_;
  }
}

Json StepTrace::describe() const {
  if (first_ == 0) return Json();
  Json j = Json::object();
  j["steps"] = Json::Array{Json(first_), Json(last_)};
  j["file"] = written_ ? Json(file_.filename().string()) : Json();
  j["dir"] = "trace";
  if (!error_.empty()) j["error"] = error_;
  return j;
}

}  // namespace strata
