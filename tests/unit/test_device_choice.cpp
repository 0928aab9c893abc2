#include "test_support.hpp"
// [train] device for every value, with CUDA absent and present, and under every launcher binding
// (what CUDA shows is injected: no GPU needed).

#include "launch/device_choice.hpp"
#include "strata/errors.hpp"

namespace {

using strata::choose_device;
using strata::DeviceView;

/// Ranks strata started itself (all see the same devices).
DeviceView own(int gpus) { return {gpus, true, "", "strata", ""}; }
/// Ranks an external launcher started, seeing `gpus` devices through `visible`.
DeviceView bound(int gpus, const std::string& launcher, const std::string& visible, const std::string& source) {
  return {gpus, false, visible, launcher, source};
}

/// The message of the Error the choice throws ("" when none).
std::string choice_error(const std::string& requested, int local_rank, int local_world_size, const DeviceView& view) {
  try {
    choose_device(requested, local_rank, local_world_size, view);
  } catch (const strata::Error& e) {
    CHECK_FALSE(e.fix().empty());
    return e.what();
  }
  return "";
}

using strata::test::contains;

const c10::Device kCuda0(c10::kCUDA, 0);

}  // namespace

TEST_CASE("device cpu is the CPU with or without GPUs") {
  for (int gpus : {0, 1, 8}) {
    const auto c = choose_device("cpu", 0, 1, own(gpus));
    CHECK(c.device.is_cpu());
    CHECK(c.note.empty());
  }
}

TEST_CASE("device auto without CUDA is the CPU, silently") {
  for (int local_world : {1, 4}) {
    const auto c = choose_device("auto", local_world - 1, local_world, own(0));
    CHECK(c.device.is_cpu());
    CHECK(c.note.empty());
  }
}

TEST_CASE("device auto takes the GPU of the local rank when every rank of the host has one") {
  auto one = choose_device("auto", 0, 1, own(1));
  CHECK(one.device == kCuda0);
  CHECK(one.note.empty());
  CHECK(choose_device("auto", 2, 4, own(8)).device == c10::Device(c10::kCUDA, 2));
  CHECK(choose_device("auto", 3, 4, own(4)).device == c10::Device(c10::kCUDA, 3));
  CHECK(choose_device("auto", 1, 2, bound(2, "torchrun", "(unset)", "LOCAL_RANK=1")).device ==
        c10::Device(c10::kCUDA, 1));
}

TEST_CASE("device auto with fewer GPUs than the ranks strata started runs every rank on the CPU and says why") {
  for (int rank : {0, 1}) {
    const auto c = choose_device("auto", rank, 2, own(1));
    CHECK(c.device.is_cpu());
    CHECK(contains(c.note, "1 CUDA device for the 2 ranks"));
    CHECK(contains(c.note, "GPU of its own"));
  }
}

TEST_CASE("one GPU bound to each rank by its launcher is cuda:0 for every rank") {
  // Slurm --gpus-per-task=1 / --gpu-bind=single:1, or a per-rank CUDA_VISIBLE_DEVICES.
  for (const char* device : {"auto", "cuda"}) {
    const auto second = choose_device(device, 1, 4, bound(1, "slurm", "1", "SLURM_LOCALID=1"));
    CHECK(second.device == kCuda0);
    CHECK(contains(second.note, "local rank 1 takes cuda:0"));
    CHECK(contains(second.note, "CUDA_VISIBLE_DEVICES=1"));
    CHECK(choose_device(device, 3, 4, bound(1, "torchrun", "3", "LOCAL_RANK=3")).device == kCuda0);
  }
}

TEST_CASE("GPUs short of the ranks under an external launcher are an error naming the binding") {
  for (const char* device : {"auto", "cuda"}) {
    const auto text = choice_error(device, 2, 4, bound(2, "slurm", "0,1", "SLURM_LOCALID=2"));
    CHECK(contains(text, "the GPUs are short"));
    CHECK(contains(text, "local rank 2 of 4"));
    CHECK(contains(text, "SLURM_LOCALID=2"));
    CHECK(contains(text, "CUDA_VISIBLE_DEVICES=0,1"));
    CHECK(contains(text, "started by slurm"));
  }
}

TEST_CASE("one GPU seen by every rank of an external launcher that bound nothing is refused before rendezvous") {
  // torchrun or mpirun, 2 ranks on a host with one GPU, CUDA_VISIBLE_DEVICES unset: both would take
  // cuda:0, and NCCL would fail at its first collective ("Duplicate GPU").
  for (const char* device : {"auto", "cuda"})
    for (const char* launcher : {"torchrun", "openmpi"}) {
      const auto text = choice_error(device, 1, 2, bound(1, launcher, "", "LOCAL_RANK=1"));
      CHECK(contains(text, "the GPUs are short"));
      CHECK(contains(text, "CUDA_VISIBLE_DEVICES=(unset)"));
      CHECK(contains(text, std::string("started by ") + launcher));
      CHECK(contains(text, "LOCAL_RANK=1"));
      CHECK(contains(text, "every rank of this host sees the same GPU"));
    }
  // One rank on the host: its one GPU is its own.
  CHECK(choose_device("cuda", 0, 1, bound(1, "torchrun", "", "LOCAL_RANK=0")).device == kCuda0);
}

TEST_CASE("device cuda takes the local rank's GPU and refuses a host short of GPUs") {
  CHECK(choose_device("cuda", 0, 1, own(1)).device == kCuda0);
  CHECK(choose_device("cuda", 1, 2, own(2)).device == c10::Device(c10::kCUDA, 1));
  CHECK(contains(choice_error("cuda", 0, 1, own(0)), "sees no CUDA device"));
  const auto short_host = choice_error("cuda", 1, 2, own(1));
  CHECK(contains(short_host, "the GPUs are short"));
  CHECK(contains(short_host, "local rank 1 of 2"));
  CHECK(choice_error("cuda", 0, 2, own(2)).empty());
}

TEST_CASE("device cuda:N is that GPU when it exists") {
  CHECK(choose_device("cuda:0", 0, 1, own(1)).device == kCuda0);
  CHECK(choose_device("cuda:3", 1, 2, own(4)).device == c10::Device(c10::kCUDA, 3));
  CHECK(contains(choice_error("cuda:1", 0, 1, own(1)), "device \"cuda:1\" does not exist; this process sees 1 CUDA device"));
  CHECK(contains(choice_error("cuda:0", 0, 1, own(0)), "sees no CUDA device"));
}

TEST_CASE("NCCL refuses the ranks of a host on one named GPU before any rendezvous") {
  CHECK_NOTHROW(strata::check_shared_gpu("cuda:0", "nccl", 1));
  CHECK_NOTHROW(strata::check_shared_gpu("cuda:0", "gloo", 2));
  CHECK_NOTHROW(strata::check_shared_gpu("cuda", "nccl", 2));
  CHECK_NOTHROW(strata::check_shared_gpu("auto", "nccl", 2));
  try {
    strata::check_shared_gpu("cuda:0", "nccl", 2);
    FAIL("no error");
  } catch (const strata::Error& e) {
    CHECK(contains(e.what(), "all 2 ranks of this host on one GPU"));
    CHECK(contains(e.fix(), "gloo"));
  }
}
