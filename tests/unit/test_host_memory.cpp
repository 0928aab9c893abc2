// The memory a run may take: a container's cgroup limit (v2 and v1, the tightest level, less what
// the cgroup uses) and a Slurm allocation bound the host's available memory, and say so.
#include "test_support.hpp"

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "device/host_memory.hpp"

namespace {

namespace fs = std::filesystem;
using strata::test::kGiB;

void write(const fs::path& file, const std::string& text) {
  fs::create_directories(file.parent_path());
  std::ofstream(file) << text;
}

strata::HostMemoryFiles files_in(const fs::path& dir) {
  write(dir / "meminfo", "MemTotal: 24000000 kB\nMemAvailable: 23068672 kB\n");  // 22 GiB available
  return {(dir / "meminfo").string(), (dir / "cgroup").string(), (dir / "fs").string()};
}

}  // namespace

TEST_CASE("host memory: a cgroup v2 limit bounds the host's available memory, at its tightest level") {
  strata::test::TempDir dir;
  const auto files = files_in(dir.path());
  write(dir.path() / "cgroup", "0::/job/step\n");
  write(dir.path() / "fs/job/memory.max", "4294967296\n");  // 4 GiB for the job, 1 GiB used
  write(dir.path() / "fs/job/memory.current", "1610612736\n");  // 0.5 GiB of it reclaimable page cache
  write(dir.path() / "fs/job/memory.stat", "anon 1073741824\nfile 536870912\ninactive_file 536870912\n");
  write(dir.path() / "fs/job/step/memory.max", "max\n");
  write(dir.path() / "fs/job/step/memory.current", "536870912\n");
  write(dir.path() / "fs/job/memory.events", "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n");
  const auto memory = strata::available_host_memory(files);
  REQUIRE(memory);
  CHECK(memory->bytes == doctest::Approx(3 * kGiB));
  CHECK(memory->source.find((dir.path() / "fs/job/memory.max").string()) != std::string::npos);
  CHECK(memory->source.find("4 GiB") != std::string::npos);
  const auto limit = strata::cgroup_memory_limit(files);
  REQUIRE(limit);
  CHECK(limit->bytes == doctest::Approx(4 * kGiB));
  CHECK(limit->oom_kills == 1);
}

TEST_CASE("host memory: cgroup v1 without a limit leaves the host's, with one it bounds it") {
  strata::test::TempDir dir;
  const auto files = files_in(dir.path());
  write(dir.path() / "cgroup", "4:memory:/ct\n3:cpu,cpuacct:/ct\n0::/\n");
  write(dir.path() / "fs/memory/ct/memory.limit_in_bytes", "9223372036854771712\n");
  write(dir.path() / "fs/memory/memory.limit_in_bytes", "9223372036854771712\n");
  auto memory = strata::available_host_memory(files);
  REQUIRE(memory);
  CHECK(memory->bytes == doctest::Approx(22 * kGiB));
  CHECK(memory->source == "this host's available memory");
  CHECK_FALSE(strata::cgroup_memory_limit(files));
  write(dir.path() / "fs/memory/ct/memory.limit_in_bytes", "2147483648\n");
  write(dir.path() / "fs/memory/ct/memory.usage_in_bytes", "0\n");
  memory = strata::available_host_memory(files);
  REQUIRE(memory);
  CHECK(memory->bytes == doctest::Approx(2 * kGiB));
  CHECK(memory->source.find("memory.limit_in_bytes") != std::string::npos);
}

TEST_CASE("host memory: a Slurm allocation below the host's bounds it") {
  strata::test::TempDir dir;
  const auto files = files_in(dir.path());
  ::setenv("SLURM_MEM_PER_NODE", "8192", 1);
  const auto memory = strata::available_host_memory(files);
  ::unsetenv("SLURM_MEM_PER_NODE");
  REQUIRE(memory);
  CHECK(memory->bytes == doctest::Approx(8 * kGiB));
  CHECK(memory->source.find("SLURM_MEM_PER_NODE") != std::string::npos);
}
