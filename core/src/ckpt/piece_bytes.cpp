#include "ckpt/piece_bytes.hpp"

#include <algorithm>
#include <utility>

#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

namespace strata::ckpt {
namespace {

/// A run of one piece's bytes: in the stage's buffer at `offset`, or (`in_place`) at `host`.
struct Span {
  std::size_t piece = 0;
  bool in_place = false;
  const std::uint8_t* host = nullptr;
  std::int64_t offset = 0;
  std::int64_t size = 0;
};

/// One staging buffer and the spans it holds; `ready`: an event after its copies on each device
/// they came from (one, where a process drives one GPU).
struct Stage {
  torch::Tensor buffer;
  std::vector<Span> spans;
  std::vector<torch::Tensor> held;  // host pieces' bytes (contiguous copies of strided ones) until visited
  std::vector<c10::Event> ready;
};

/// A tensor's bytes, flat and contiguous, where it lives.
torch::Tensor bytes_of(const torch::Tensor& t) { return t.detach().contiguous().reshape({-1}).view(torch::kUInt8); }

class Stager {
 public:
  Stager(const std::vector<TensorPiece>& pieces, std::int64_t stage_bytes, bool stage_host)
      : pieces_(pieces), capacity_(std::max<std::int64_t>(stage_bytes, 1)), stage_host_(stage_host) {}

  void run(const std::function<void(std::size_t, const void*, std::size_t)>& visit) {
    Stage stages[2];
    fill(stages[0]);
    for (std::size_t k = 0; !stages[k % 2].spans.empty(); ++k) {
      Stage& current = stages[k % 2];
      fill(stages[(k + 1) % 2]);  // the next buffer's copies queue behind this one's
      for (const auto& event : current.ready) event.synchronize();
      for (const auto& span : current.spans) {
        const auto* data = span.in_place ? span.host : current.buffer.const_data_ptr<std::uint8_t>() + span.offset;
        visit(span.piece, data, static_cast<std::size_t>(span.size));
      }
    }
  }

 private:
  bool staged(const torch::Tensor& t) const { return !t.device().is_cpu() || stage_host_; }

  /// Queues the copies of the next bytes into `stage` (its previous spans were visited already).
  void fill(Stage& stage) {
    stage.spans.clear();
    stage.held.clear();
    stage.ready.clear();
    std::int64_t used = 0;
    std::vector<torch::Device> devices;
    while (piece_ < pieces_.size() && used < capacity_) {
      const auto& data = pieces_[piece_].data;
      if (offset_ == 0) source_ = bytes_of(data);
      const auto total = source_.numel();
      if (!staged(data)) {  // read in place; its bytes count against the stage, bounding what is held
        stage.spans.push_back({piece_, true, source_.const_data_ptr<std::uint8_t>(), 0, total});
        stage.held.push_back(source_);
        used += total;
        next_piece();
        continue;
      }
      if (!stage.buffer.defined()) {
        const bool pinned = !data.device().is_cpu();
        stage.buffer = torch::empty({capacity_}, torch::TensorOptions(torch::kUInt8).pinned_memory(pinned));
      }
      const auto size = std::min(total - offset_, capacity_ - used);
      if (size > 0)
        stage.buffer.narrow(0, used, size).copy_(source_.narrow(0, offset_, size), /*non_blocking=*/true);
      stage.spans.push_back({piece_, false, nullptr, used, size});
      if (!data.device().is_cpu() && std::find(devices.begin(), devices.end(), data.device()) == devices.end())
        devices.push_back(data.device());
      used += size;
      offset_ += size;
      if (offset_ == total) next_piece();
    }
    for (const auto& device : devices) {  // after the copies, on each device's current stream
      stage.ready.emplace_back(device.type());
      stage.ready.back().record(c10::impl::getDeviceGuardImpl(device.type())->getStream(device));
    }
  }

  void next_piece() {
    ++piece_;
    offset_ = 0;
    source_ = torch::Tensor();
  }

  const std::vector<TensorPiece>& pieces_;
  const std::int64_t capacity_;
  const bool stage_host_;
  std::size_t piece_ = 0;
  std::int64_t offset_ = 0;           // bytes of pieces_[piece_] already queued
  torch::Tensor source_;              // pieces_[piece_]'s bytes
};

}  // namespace

void for_each_piece_span(const std::vector<TensorPiece>& pieces,
                         const std::function<void(std::size_t, const void*, std::size_t)>& visit,
                         std::int64_t stage_bytes, bool stage_host) {
  Stager(pieces, stage_bytes, stage_host).run(visit);
}

}  // namespace strata::ckpt
