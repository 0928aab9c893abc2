#include "strata/comm.hpp"

#include <array>
#include <memory>

#include <fmt/format.h>

#include "strata/errors.hpp"

namespace strata {

double all_reduce_bus_factor(int world_size) {
  return world_size <= 1 ? 0.0 : 2.0 * (world_size - 1) / world_size;
}
double gather_scatter_bus_factor(int world_size) {
  return world_size <= 1 ? 0.0 : static_cast<double>(world_size - 1) / world_size;
}

void check_comm_device(const Comm& comm, const char* op, const torch::Tensor& tensor) {
  if (!tensor.defined())
    throw DistributedError(comm.rank(), op, fmt::format("{} was handed an undefined tensor.", op),
                           "Pass a tensor allocated on the job's communication device.");
  if (tensor.device() == comm.device()) return;
  throw DistributedError(
      comm.rank(), op,
      fmt::format("rank {}: {} was handed a tensor on {}, but this job communicates on {}.", comm.rank(), op,
                  tensor.device().str(), comm.device().str()),
      fmt::format("Allocate every tensor that meets a collective on the job's device ({}); NCCL takes CUDA "
                  "tensors only, and a copy per call would hide a host sync in the step.",
                  comm.device().str()));
}

namespace {

class DoneWork final : public CommWork {
 public:
  void wait() override {}
  void host_wait() override {}
};

/// One rank: every collective is the identity. Calls are still counted (with zero bus bytes) and
/// their tensors checked, so a strategy's accounting and device discipline are exercised the same
/// way at every world size.
class LocalComm final : public Comm {
 public:
  explicit LocalComm(torch::Device device) : device_(device) {}
  int rank() const override { return 0; }
  int world_size() const override { return 1; }
  torch::Device device() const override { return device_; }
  std::shared_ptr<CommWork> all_reduce(torch::Tensor& tensor, ReduceOp, bool) override {
    check_comm_device(*this, "all_reduce", tensor);
    return count(tensor.nbytes());
  }
  std::shared_ptr<CommWork> reduce_scatter(torch::Tensor& output, const torch::Tensor& input, ReduceOp,
                                           bool) override {
    check_comm_device(*this, "reduce_scatter", output);
    check_comm_device(*this, "reduce_scatter", input);
    if (!output.is_same(input) && output.data_ptr() != input.data_ptr()) output.copy_(input.view_as(output));
    return count(input.nbytes());
  }
  std::shared_ptr<CommWork> all_gather(torch::Tensor& output, const torch::Tensor& input, bool) override {
    check_comm_device(*this, "all_gather", output);
    check_comm_device(*this, "all_gather", input);
    if (!output.is_same(input)) output.copy_(input.view_as(output));
    return count(output.nbytes());
  }
  std::shared_ptr<CommWork> broadcast(torch::Tensor& tensor, int, bool) override {
    check_comm_device(*this, "broadcast", tensor);
    return count(tensor.nbytes());
  }
  std::shared_ptr<CommWork> all_to_all(torch::Tensor& output, const torch::Tensor& input, bool) override {
    check_comm_device(*this, "all_to_all", output);
    check_comm_device(*this, "all_to_all", input);
    if (output.numel() != input.numel())
      throw DistributedError(0, "all_to_all", "output and input hold different numbers of elements");
    if (!output.is_same(input)) output.copy_(input.view_as(output));
    return count(input.nbytes());
  }
  void barrier() override {}
  std::shared_ptr<Comm> subgroup(const std::vector<int>& ranks) override {
    if (ranks != std::vector<int>{0}) throw Error("subgroup: a one-rank job has only rank 0");
    auto group = std::make_shared<LocalComm>(device_);
    group->state_ = state_;
    return group;
  }
  std::shared_ptr<Comm> separate_stream() override { return std::shared_ptr<Comm>(std::shared_ptr<Comm>{}, this); }
  void set_phase(CommPhase phase) override { state_->phase = phase; }
  CommCounters counters(CommPhase phase) const override { return state_->counters[static_cast<int>(phase)]; }
  void book(std::int64_t payload_bytes, double bus_bytes, double seconds) override {
    auto& c = state_->counters[static_cast<int>(state_->phase)];
    c.calls += 1;
    c.payload_bytes += payload_bytes;
    c.bus_bytes += bus_bytes;
    c.time_s += seconds;
  }

 private:
  struct State {
    CommPhase phase = CommPhase::kSetup;
    std::array<CommCounters, 3> counters{};
  };
  std::shared_ptr<CommWork> count(std::size_t payload) {
    auto& c = state_->counters[static_cast<int>(state_->phase)];
    c.calls += 1;
    c.payload_bytes += static_cast<std::int64_t>(payload);
    return std::make_shared<DoneWork>();
  }
  torch::Device device_;
  std::shared_ptr<State> state_ = std::make_shared<State>();
};

}  // namespace

std::unique_ptr<Comm> make_local_comm(torch::Device device) { return std::make_unique<LocalComm>(device); }

std::shared_ptr<CommWork> Comm::all_to_all(torch::Tensor&, const torch::Tensor&, bool) {
  throw DistributedError(rank(), "all_to_all", "this communicator provides no all-to-all (it was written before ABI 11.1)",
                         "Use a communicator of strata 11.1 or later.");
}

}  // namespace strata
