#pragma once
// A communicator for the kit's unit tests: rank 0 of two on the CPU whose peer holds the same
// values, so every collective completes at once as the identity of an average (an all-reduce
// leaves the tensor, a reduce-scatter keeps the first chunk, an all-gather repeats the input).
// Each collective is logged when it is issued ("all_gather 512"), and with `waits` when it is
// waited for ("wait all_gather 512").

#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "strata/comm.hpp"  // after test_support.hpp (LibTorch's CHECK macro goes before doctest's)

namespace strata::test {

class RecordingComm final : public Comm {
 public:
  explicit RecordingComm(std::vector<std::string>* log, bool waits = false) : log_(log), waits_(waits) {}
  int rank() const override { return 0; }
  int world_size() const override { return 2; }
  torch::Device device() const override { return torch::kCPU; }
  std::shared_ptr<CommWork> all_reduce(torch::Tensor& t, ReduceOp, bool) override {
    return logged("all_reduce " + std::to_string(t.numel()));
  }
  std::shared_ptr<CommWork> reduce_scatter(torch::Tensor& out, const torch::Tensor& in, ReduceOp, bool) override {
    if (!out.is_same(in.narrow(0, 0, out.numel()))) out.copy_(in.narrow(0, 0, out.numel()));
    return logged("reduce_scatter " + std::to_string(in.numel()));
  }
  std::shared_ptr<CommWork> all_gather(torch::Tensor& out, const torch::Tensor& in, bool) override {
    out.copy_(torch::cat({in, in}));
    return logged("all_gather " + std::to_string(out.numel()));
  }
  std::shared_ptr<CommWork> broadcast(torch::Tensor&, int, bool) override { return logged("broadcast"); }
  void barrier() override {}
  std::shared_ptr<Comm> subgroup(const std::vector<int>&) override { throw std::logic_error("not here"); }
  std::shared_ptr<Comm> separate_stream() override { throw std::logic_error("not here"); }
  void set_phase(CommPhase) override {}
  CommCounters counters(CommPhase) const override { return {}; }
  void book(std::int64_t, double, double) override {}

 private:
  struct Done final : CommWork {
    Done(std::vector<std::string>* log, std::string what) : log(log), what(std::move(what)) {}
    void wait() override {
      if (log != nullptr) log->push_back("wait " + what);
    }
    void host_wait() override { wait(); }
    std::vector<std::string>* log;  // null: waits are not logged
    std::string what;
  };
  std::shared_ptr<CommWork> logged(std::string what) {
    log_->push_back(what);
    return std::make_shared<Done>(waits_ ? log_ : nullptr, std::move(what));
  }
  std::vector<std::string>* log_;
  bool waits_;
};

}  // namespace strata::test
