#include "test_support.hpp"
// [train] device for every value, with CUDA absent and present (the visible device count is
// injected: no GPU needed).

#include "launch/device_choice.hpp"
#include "strata/errors.hpp"

namespace {

using strata::choose_device;

/// The message of the Error the choice throws ("" when none).
std::string error_of(const std::string& requested, int local_rank, int local_world_size, int gpus) {
  try {
    choose_device(requested, local_rank, local_world_size, gpus);
  } catch (const strata::Error& e) {
    CHECK_FALSE(e.fix().empty());
    return e.what();
  }
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("device cpu is the CPU with or without GPUs") {
  for (int gpus : {0, 1, 8}) {
    const auto c = choose_device("cpu", 0, 1, gpus);
    CHECK(c.device.is_cpu());
    CHECK(c.note.empty());
  }
}

TEST_CASE("device auto without CUDA is the CPU, silently") {
  for (int local_world : {1, 4}) {
    const auto c = choose_device("auto", local_world - 1, local_world, 0);
    CHECK(c.device.is_cpu());
    CHECK(c.note.empty());
  }
}

TEST_CASE("device auto takes the GPU of the local rank when every rank of the host has one") {
  auto one = choose_device("auto", 0, 1, 1);
  CHECK(one.device == c10::Device(c10::kCUDA, 0));
  CHECK(one.note.empty());
  auto third = choose_device("auto", 2, 4, 8);
  CHECK(third.device == c10::Device(c10::kCUDA, 2));
  auto last = choose_device("auto", 3, 4, 4);
  CHECK(last.device == c10::Device(c10::kCUDA, 3));
}

TEST_CASE("device auto with fewer GPUs than local ranks runs every rank on the CPU and says why") {
  for (int rank : {0, 1}) {
    const auto c = choose_device("auto", rank, 2, 1);
    CHECK(c.device.is_cpu());
    CHECK(contains(c.note, "1 CUDA device for the 2 ranks"));
    CHECK(contains(c.note, "GPU of its own"));
  }
}

TEST_CASE("device cuda takes the local rank's GPU and refuses a host short of GPUs") {
  CHECK(choose_device("cuda", 0, 1, 1).device == c10::Device(c10::kCUDA, 0));
  CHECK(choose_device("cuda", 1, 2, 2).device == c10::Device(c10::kCUDA, 1));
  CHECK(contains(error_of("cuda", 0, 1, 0), "sees no CUDA device"));
  const auto short_host = error_of("cuda", 1, 2, 1);
  CHECK(contains(short_host, "local rank 1 needs a GPU of its own"));
  CHECK(contains(short_host, "1 CUDA device for the 2 ranks"));
  CHECK(error_of("cuda", 0, 2, 1).empty());  // rank 0 has its GPU; rank 1 is the one refused
}

TEST_CASE("device cuda:N is that GPU when it exists") {
  CHECK(choose_device("cuda:0", 0, 1, 1).device == c10::Device(c10::kCUDA, 0));
  CHECK(choose_device("cuda:3", 1, 2, 4).device == c10::Device(c10::kCUDA, 3));
  CHECK(contains(error_of("cuda:1", 0, 1, 1), "device \"cuda:1\" does not exist; this process sees 1 CUDA device"));
  CHECK(contains(error_of("cuda:0", 0, 1, 0), "sees no CUDA device"));
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
