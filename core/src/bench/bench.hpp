#pragma once
// `strata bench comms` and `strata bench gemm`: what this machine's links and devices can do, measured
// the way nccl-tests and param's compute benchmark measure it, so that a training run's
// communication time and MFU can be read against it.

#include <cstdint>
#include <string>
#include <vector>

namespace c10 {
struct Device;
}

namespace strata {

namespace detail {
/// Waits for the work queued on `device` (CUDA); nothing on the CPU. Ends a timed benchmark loop.
[[gnu::visibility("hidden")]] void synchronize_device(const c10::Device& device);
}  // namespace detail

/// `strata bench comms`: nccl-tests style bandwidth of each collective over a range of sizes.
/// Options are kept as given (empty: the default that depends on the device), validated by
/// bench_comms; every field is what the CLI option of the same name sets.
struct CommsBenchRequest {
  int nproc = 1;                   ///< ranks to spawn on this host (1: this process alone, or the ranks of a launcher)
  std::string backend;             ///< "gloo" or "nccl"; empty: nccl on cuda, else gloo
  std::string device;              ///< "cpu" or "cuda" (cuda:LOCAL_RANK per rank); empty: cuda when available
  std::string collective = "all";  ///< all_reduce, all_gather, reduce_scatter, broadcast or all
  std::string min_bytes = "8";     ///< smallest size in bytes; suffixes K, M, G (powers of 1024)
  std::string max_bytes;           ///< largest size; empty: 64M on cuda, 16M on the CPU
  int factor = 2;                  ///< each size is the previous one times this (>= 2)
  int iters = 20;                  ///< timed calls per size
  int warmup = 5;                  ///< untimed calls per size before them
  std::string dtype = "float32";   ///< float32, float16, bfloat16, float64 or int32
  std::string op = "sum";          ///< reduction of all_reduce and reduce_scatter: sum, avg or max
  std::string csv;                 ///< write the rows as CSV here (rank 0); empty: none
  std::string json;                ///< write the rows and the job's metadata as JSON here; empty: none
  double timeout_s = 300;          ///< rendezvous and collective timeout, in seconds
};

/// Runs the benchmark: validates the options (UsageError, exit 2, naming the option), then either
/// joins the job of a launcher (torchrun, srun, mpirun, strata's own), or spawns `nproc` ranks that
/// run `strata bench comms` with the same options, or runs alone. Rank 0 prints the table.
/// Returns the exit code: 0, or 1 when some result was wrong (the #wrong column).
int bench_comms(const CommsBenchRequest& request);

/// `strata bench gemm`: time of one M x K by K x N matmul and its rate, for a list of shapes.
struct GemmBenchRequest {
  std::vector<std::int64_t> m, n, k;  ///< same length, or length 1 (repeated); all empty: the default sweep
  std::string dtype = "float32";      ///< float32, tf32 (float32 tensors, TF32 cuBLAS; CUDA only), bfloat16, float16
  std::string device;                 ///< "cpu", "cuda" or "cuda:N"; empty: cuda when available
  int steps = 0;                      ///< timed matmuls per shape; 0: 50 on CUDA, 10 on the CPU
  int warmup = 5;                     ///< untimed matmuls per shape before them
  int threads = 0;                    ///< CPU: intra-op threads (a training rank's [train] threads); 0: LibTorch's default
  std::string csv;                    ///< write the rows as CSV here; empty: none
  std::string json;                   ///< write the rows and the device as JSON here; empty: none
};

/// Runs the sweep in this process (launcher variables are ignored), prints the table and the best
/// rate, and records that rate in the measured-peak cache (device/peaks.hpp). Returns 0.
int bench_gemm(const GemmBenchRequest& request);

/// "64K" -> 65536: a byte count with an optional suffix K, M or G (powers of 1024; also KB, KiB).
/// Throws UsageError naming `option` when `text` is not one.
std::int64_t parse_byte_size(const std::string& text, const std::string& option);

/// "128,256" -> {128, 256}: positive integers. Throws UsageError naming `option` otherwise.
std::vector<std::int64_t> parse_int_list(const std::string& text, const std::string& option);

}  // namespace strata
