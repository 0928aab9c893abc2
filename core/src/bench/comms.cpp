// `strata bench comms`: nccl-tests' bandwidth table (Jeaugey et al., NVIDIA nccl-tests,
// doc/PERFORMANCE.md) measured through strata::Comm, the same communicator the strategies use.
// Sizes follow nccl-tests: all_gather counts its output, reduce_scatter its input, all_reduce and
// broadcast the buffer; bus bandwidth applies the bus factors of Strata's own traffic accounting
// (strata/comm.hpp), so a run's comm.bus_bytes_per_step reads directly against this table.

#include "bench/bench.hpp"

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <optional>

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include "comm/process_group.hpp"
#include "launch/device_choice.hpp"
#include "io/atomic_file.hpp"
#include "io/json.hpp"
#include "io/run_dir.hpp"
#include "launch/spawn.hpp"
#include "job/world.hpp"
#include "strata/errors.hpp"
#include "text/suggest.hpp"

namespace strata {

std::int64_t parse_byte_size(const std::string& text, const std::string& option) {
  auto bad = [&]() -> UsageError {
    return UsageError(fmt::format("{} \"{}\" is not a byte count.", option, text),
                      fmt::format("Give a positive number of bytes with an optional suffix K, M or G (powers of "
                                  "1024), e.g. {} 64K.",
                                  option));
  };
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0 || digits > 15) throw bad();
  std::string suffix = text.substr(digits);
  for (auto& c : suffix) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  std::int64_t scale = 1;
  if (suffix.empty() || suffix == "B") scale = 1;
  else if (suffix == "K" || suffix == "KB" || suffix == "KIB") scale = std::int64_t{1} << 10;
  else if (suffix == "M" || suffix == "MB" || suffix == "MIB") scale = std::int64_t{1} << 20;
  else if (suffix == "G" || suffix == "GB" || suffix == "GIB") scale = std::int64_t{1} << 30;
  else throw bad();
  const std::int64_t value = std::stoll(text.substr(0, digits));
  if (value <= 0 || value > (std::int64_t{1} << 40) / scale) throw bad();
  return value * scale;
}

namespace {

using Clock = std::chrono::steady_clock;

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kBroadcast, kAllToAll };
constexpr Collective kCollectives[] = {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                                       Collective::kBroadcast, Collective::kAllToAll};

const char* collective_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kAllToAll: return "all_to_all";
  }
  return "?";
}

bool reduces(Collective c) { return c == Collective::kAllReduce || c == Collective::kReduceScatter; }

/// The options, checked and with their defaults resolved.
struct Plan {
  std::vector<Collective> collectives;
  std::int64_t min_bytes = 8, max_bytes = 0;
  int factor = 2, iters = 20, warmup = 5;
  std::string dtype_name;
  torch::ScalarType dtype = torch::kFloat32;
  std::string op_name;
  ReduceOp op = ReduceOp::kSum;
  std::string backend, device;  // "gloo"|"nccl", "cpu"|"cuda"
  double timeout_s = 300;
};

UsageError unknown(const std::string& option, const std::string& value, const std::vector<std::string>& names) {
  return UsageError(fmt::format("unknown {} \"{}\".{}", option, value, detail::did_you_mean(value, names)),
                    fmt::format("Use one of: {}.", detail::join(names, ", ")));
}

Plan comms_plan(const CommsBenchRequest& r) {
  Plan p;
  auto at_least = [](const char* option, double value, double low) {
    if (value < low)
      throw UsageError(fmt::format("{} must be at least {}; got {}.", option, low, value),
                       fmt::format("Give {} {} or more.", option, low));
  };
  at_least("--nproc", r.nproc, 1);
  at_least("--factor", r.factor, 2);
  at_least("--iters", r.iters, 1);
  at_least("--warmup", r.warmup, 0);
  if (!(r.timeout_s > 0))
    throw UsageError(fmt::format("--timeout-s must be positive; got {}.", r.timeout_s), "Give e.g. --timeout-s 300.");
  p.factor = r.factor;
  p.iters = r.iters;
  p.warmup = r.warmup;
  p.timeout_s = r.timeout_s;

  if (r.collective == "all") {
    p.collectives.assign(std::begin(kCollectives), std::end(kCollectives));
  } else {
    std::vector<std::string> names{"all"};
    for (auto c : kCollectives) names.push_back(collective_name(c));
    for (auto c : kCollectives)
      if (r.collective == collective_name(c)) p.collectives = {c};
    if (p.collectives.empty()) throw unknown("--collective", r.collective, names);
  }

  const std::vector<std::string> dtypes{"float32", "float16", "bfloat16", "float64", "int32"};
  const torch::ScalarType types[] = {torch::kFloat32, torch::kFloat16, torch::kBFloat16, torch::kFloat64, torch::kInt32};
  const auto d = std::find(dtypes.begin(), dtypes.end(), r.dtype);
  if (d == dtypes.end()) throw unknown("--dtype", r.dtype, dtypes);
  p.dtype_name = r.dtype;
  p.dtype = types[d - dtypes.begin()];
  const std::vector<std::string> ops{"sum", "avg", "max"};
  const auto o = std::find(ops.begin(), ops.end(), r.op);
  if (o == ops.end()) throw unknown("--op", r.op, ops);
  p.op_name = r.op;
  p.op = o == ops.begin() ? ReduceOp::kSum : *o == "avg" ? ReduceOp::kAvg : ReduceOp::kMax;
  // c10d divides the sum in the tensor's own dtype: an integer average cannot be stored (Gloo fails).
  if (p.op == ReduceOp::kAvg && p.dtype == torch::kInt32)
    throw UsageError("--op avg cannot be stored in --dtype int32 (the average of integers is not an integer).",
                     "Use --op sum or max with int32, or a floating-point --dtype with avg.");

  const bool cuda = torch::cuda::is_available();
  p.device = r.device.empty() ? (cuda ? "cuda" : "cpu") : r.device;
  if (p.device != "cpu" && p.device != "cuda") throw unknown("--device", p.device, {"cpu", "cuda"});
  if (p.device == "cuda" && !cuda)
    throw UsageError("--device cuda was requested, but no CUDA device is available.",
                     "Use --device cpu (with --backend gloo), or run on a machine with a GPU.");
  if (p.device == "cuda" && r.nproc > static_cast<int>(torch::cuda::device_count()))
    throw UsageError(fmt::format("--nproc {} needs a GPU per rank, but this host has {}.", r.nproc,
                                 torch::cuda::device_count()),
                     "Use at most one rank per GPU, or --device cpu.");
  p.backend = r.backend.empty() ? (p.device == "cuda" ? "nccl" : "gloo") : r.backend;
  if (p.backend != "gloo" && p.backend != "nccl") throw unknown("--backend", p.backend, {"gloo", "nccl"});
  if (p.backend == "nccl" && p.device != "cuda")
    throw UsageError("--backend nccl needs CUDA tensors, but the benchmark runs on the CPU.",
                     "Use --backend gloo with --device cpu, or --device cuda on a machine with a GPU.");

  p.min_bytes = parse_byte_size(r.min_bytes, "--min-bytes");
  p.max_bytes = r.max_bytes.empty() ? (p.device == "cuda" ? 64 << 20 : 16 << 20) : parse_byte_size(r.max_bytes, "--max-bytes");
  if (p.max_bytes < p.min_bytes)
    throw UsageError(fmt::format("--max-bytes ({}) is below --min-bytes ({}).", p.max_bytes, p.min_bytes),
                     "Give --max-bytes at least as large as --min-bytes.");
  return p;
}

/// What one size of one collective measured.
struct Row {
  std::string collective;
  std::int64_t size_bytes = 0, count = 0;
  std::string type, redop;
  double time_us = 0, algbw_gbps = 0, busbw_gbps = 0;
  std::int64_t wrong = 0;
};

/// Buffers of one size and how to run the collective on them. Inputs are filled so that the
/// results are known in closed form: element i of rank r's input holds (r + 1) + (i % 7), small
/// integers that every dtype of the benchmark stores exactly for up to 249 ranks.
class Case {
 public:
  Case(Comm& comm, const Plan& plan, Collective c, std::int64_t count)
      : comm_(comm), plan_(plan), c_(c), n_(comm.world_size()), r_(comm.rank()), count_(count) {
    const auto options = torch::TensorOptions().dtype(plan.dtype).device(comm.device());
    const std::int64_t part = count / n_;
    // all_gather's size is its output, reduce_scatter's its input (nccl-tests).
    if (c == Collective::kAllGather) {
      input_ = torch::empty({part}, options);
      output_ = torch::empty({count}, options);
    } else if (c == Collective::kReduceScatter) {
      input_ = torch::empty({count}, options);
      output_ = torch::empty({part}, options);
    } else if (c == Collective::kAllToAll) {  // its size is what each rank sends (nccl-tests)
      input_ = torch::empty({count}, options);
      output_ = torch::empty({count}, options);
    } else {
      input_ = torch::empty({count}, options);
    }
    fill();
  }

  void run() {
    switch (c_) {
      case Collective::kAllReduce: comm_.all_reduce(input_, plan_.op); break;
      case Collective::kAllGather: comm_.all_gather(output_, input_); break;
      case Collective::kReduceScatter: comm_.reduce_scatter(output_, input_, plan_.op); break;
      case Collective::kBroadcast: comm_.broadcast(input_, 0); break;
      case Collective::kAllToAll: comm_.all_to_all(output_, input_); break;
    }
  }

  /// Fresh inputs (the timed calls changed them), one call, and the elements of this rank's
  /// result that differ from the closed form.
  std::int64_t wrong_elements(bool corrupt) {
    fill();
    run();
    const auto result_tensor = (output_.defined() ? output_ : input_);
    auto result = result_tensor.to(torch::kCPU, torch::kFloat64).contiguous();
    if (corrupt) result[0].fill_(-1.0);  // every expected value is >= 1
    const auto [expected, tolerance] = expectation(result.numel());
    const auto ok = (result - expected).abs() <= tolerance;  // NaN is never ok
    return result.numel() - ok.sum().item<std::int64_t>();
  }

 private:
  /// The inputs' values as the dtype stores them: table[q][k] = rd((q + 1) + k), k = i % 7.
  torch::Tensor input_table() const {
    auto values = torch::arange(1, n_ + 1, torch::kFloat64).unsqueeze(1) + torch::arange(0, 7, torch::kFloat64);
    return values.to(plan_.dtype).to(torch::kFloat64);
  }

  void fill() {
    auto values = torch::arange(input_.numel(), torch::kInt64).remainder(7).to(torch::kFloat64) + (r_ + 1);
    input_.copy_(values.to(plan_.dtype).view(input_.sizes()));
    if (output_.defined()) output_.zero_();
  }

  /// Expected result of this rank (float64, CPU) and the allowed absolute difference per element.
  std::pair<torch::Tensor, torch::Tensor> expectation(std::int64_t numel) const {
    const auto table = input_table();
    const auto index = torch::arange(numel, torch::kInt64);
    if (c_ == Collective::kBroadcast) return {table[0].index_select(0, index.remainder(7)), torch::zeros({numel}, torch::kFloat64)};
    if (c_ == Collective::kAllGather) {
      const std::int64_t part = count_ / n_;
      auto flat = index.div(part, "floor") * 7 + index.remainder(part).remainder(7);
      return {table.view({-1}).index_select(0, flat), torch::zeros({numel}, torch::kFloat64)};
    }
    if (c_ == Collective::kAllToAll) {
      // Element j came from rank q = j / part: element r * part + j % part of q's input.
      const std::int64_t part = count_ / n_;
      auto flat = index.div(part, "floor") * 7 + (index.remainder(part) + r_ * part).remainder(7);
      return {table.view({-1}).index_select(0, flat), torch::zeros({numel}, torch::kFloat64)};
    }
    // Reductions: reduce_scatter's element j on rank r is element r * part + j of the reduction.
    const std::int64_t offset = c_ == Collective::kReduceScatter ? r_ * (count_ / n_) : 0;
    torch::Tensor per_residue = plan_.op == ReduceOp::kMax ? std::get<0>(table.max(0)) : table.sum(0);
    if (plan_.op == ReduceOp::kAvg) per_residue = per_residue / n_;
    auto expected = per_residue.index_select(0, (index + offset).remainder(7));
    // Exact unless rounding is possible: an average, or partial sums beyond the dtype's integers.
    const double digits = plan_.dtype == torch::kFloat16 ? 11 : plan_.dtype == torch::kBFloat16 ? 8
                        : plan_.dtype == torch::kFloat32 ? 24 : 53;
    const bool exact = plan_.dtype == torch::kInt32 || plan_.op == ReduceOp::kMax ||
                       (plan_.op == ReduceOp::kSum && table.sum(0).max().item<double>() <= std::ldexp(1.0, static_cast<int>(digits)));
    if (exact) return {expected, torch::zeros({numel}, torch::kFloat64)};
    const double eps = std::ldexp(1.0, 1 - static_cast<int>(digits));
    return {expected, expected.abs() * ((n_ + 1) * eps)};
  }

  Comm& comm_;
  const Plan& plan_;
  Collective c_;
  int n_, r_;
  std::int64_t count_;
  torch::Tensor input_, output_;
};

/// Measures one size; nullopt when it holds no whole element per rank.
std::optional<Row> measure_collective(Comm& comm, const Plan& plan, Collective c, std::int64_t bytes, bool first) {
  const int n = comm.world_size();
  const std::int64_t element = static_cast<std::int64_t>(c10::elementSize(plan.dtype));
  std::int64_t count = bytes / element;
  if (c == Collective::kAllGather || c == Collective::kReduceScatter || c == Collective::kAllToAll) count -= count % n;
  if (count == 0) return std::nullopt;
  Case bench(comm, plan, c, count);
  if (first) {
    // The first call of a collective tells whether the backend runs it for this dtype and op.
    try {
      bench.run();
    } catch (const std::exception& e) {
      throw UsageError(fmt::format("backend {} could not run {} on {} tensors{}: {}", plan.backend, collective_name(c),
                                   plan.dtype_name, reduces(c) ? " with --op " + plan.op_name : "", e.what()),
                       "Choose another --dtype" + std::string(reduces(c) ? " or --op" : "") + ", or another --backend.");
    }
  }
  for (int i = 0; i < plan.warmup; ++i) bench.run();
  comm.barrier();
  detail::synchronize_device(comm.device());
  const auto start = Clock::now();
  for (int i = 0; i < plan.iters; ++i) bench.run();
  detail::synchronize_device(comm.device());
  const double mean_s = std::chrono::duration<double>(Clock::now() - start).count() / plan.iters;
  // The slowest rank's mean: a collective is done when its last rank is.
  auto time = torch::full({1}, mean_s, torch::TensorOptions().dtype(torch::kFloat64).device(comm.device()));
  comm.all_reduce(time, ReduceOp::kMax);

  const char* corrupt = std::getenv("STRATA_BENCH_CORRUPT");
  const bool corrupt_here = corrupt != nullptr && std::string(corrupt) == "1" && comm.rank() == 0;
  auto wrong = torch::full({1}, static_cast<double>(bench.wrong_elements(corrupt_here)),
                           torch::TensorOptions().dtype(torch::kFloat64).device(comm.device()));
  comm.all_reduce(wrong, ReduceOp::kSum);

  Row row;
  row.collective = collective_name(c);
  row.size_bytes = count * element;
  row.count = count;
  row.type = plan.dtype_name;
  row.redop = reduces(c) ? plan.op_name : "none";
  const double seconds = time.item<double>();
  row.time_us = seconds * 1e6;
  row.algbw_gbps = static_cast<double>(row.size_bytes) / seconds / 1e9;
  const double factor = c == Collective::kAllReduce ? all_reduce_bus_factor(n)
                        : c == Collective::kBroadcast ? (n > 1 ? 1.0 : 0.0)
                                                      : gather_scatter_bus_factor(n);
  row.busbw_gbps = row.algbw_gbps * factor;
  row.wrong = static_cast<std::int64_t>(wrong.item<double>());
  return row;
}

std::string format_row(const Row& r) {
  return fmt::format("{:>12} {:>12} {:>9} {:>6} {:>12.2f} {:>12.3f} {:>12.3f} {:>7}\n", r.size_bytes, r.count, r.type,
                     r.redop, r.time_us, r.algbw_gbps, r.busbw_gbps, r.wrong);
}

Json metadata(const Plan& plan, const WorldInfo& world) {
  Json j = Json::object();
  j["benchmark"] = "strata bench comms";
  j["date"] = utc_time("%Y-%m-%dT%H:%M:%SZ");
  j["world_size"] = world.world_size;
  j["launcher"] = world.launcher;
  j["backend"] = plan.backend;
  j["device"] = plan.device;
  j["dtype"] = plan.dtype_name;
  j["op"] = plan.op_name;
  j["iters"] = plan.iters;
  j["warmup"] = plan.warmup;
  return j;
}

void write_comms_outputs(const CommsBenchRequest& request, const Plan& plan, const WorldInfo& world,
                         const std::vector<Row>& rows, double avg_busbw, std::int64_t wrong_total) {
  if (!request.csv.empty()) {
    std::string csv = "collective,size_bytes,count,type,redop,time_us,algbw_gbps,busbw_gbps,wrong\n";
    for (const auto& r : rows)
      csv += fmt::format("{},{},{},{},{},{},{},{},{}\n", r.collective, r.size_bytes, r.count, r.type, r.redop, r.time_us,
                         r.algbw_gbps, r.busbw_gbps, r.wrong);
    write_file_atomically(request.csv, csv);
  }
  if (!request.json.empty()) {
    Json j = metadata(plan, world);
    Json list = Json::array();
    for (const auto& r : rows) {
      Json o = Json::object();
      o["collective"] = r.collective;
      o["size_bytes"] = r.size_bytes;
      o["count"] = r.count;
      o["type"] = r.type;
      o["redop"] = r.redop;
      o["time_us"] = r.time_us;
      o["algbw_gbps"] = r.algbw_gbps;
      o["busbw_gbps"] = r.busbw_gbps;
      o["wrong"] = r.wrong;
      list.push_back(std::move(o));
    }
    j["rows"] = std::move(list);
    j["avg_busbw_gbps"] = avg_busbw;
    j["wrong_total"] = wrong_total;
    write_file_atomically(request.json, j.dump() + "\n");
  }
}

/// One rank of the benchmark: connects, measures every collective and size, and (rank 0) prints.
int run_comms_rank(const CommsBenchRequest& request, const Plan& plan, WorldInfo world) {
  torch::Device device = torch::kCPU;
  if (plan.device == "cuda") {
    // The rank's GPU follows what its launcher lets it see, as a training rank's does.
    try {
      device = choose_device("cuda", world.local_rank, world.local_world_size, device_view(world)).device;
    } catch (const Error& err) {
      throw UsageError(std::string("--device cuda: ") + err.what(), err.fix() + " Or use --device cpu.");
    }
    c10::impl::getDeviceGuardImpl(device.type())->setDevice(device);
  }
  if (world.launcher == "none") world.master_port = free_port(world.master_addr);
  const auto timeout = std::chrono::milliseconds(static_cast<std::int64_t>(plan.timeout_s * 1000));
  ProcessGroupOptions options;
  options.world = world;
  options.backend = plan.backend;
  options.device = device;
  options.timeout = timeout;
  auto comm = make_process_group_comm(options);
  const bool lead = world.rank == 0;
  if (lead) {
    std::cout << fmt::format("# strata bench comms: {} rank(s) ({} launcher), backend {}, device {}, {} iterations "
                             "after {} warmup\n#\n",
                             world.world_size, world.launcher == "none" ? "no" : world.launcher, plan.backend,
                             plan.device, plan.iters, plan.warmup);
    std::cout << fmt::format("#{:>11} {:>12} {:>9} {:>6} {:>12} {:>12} {:>12} {:>7}\n", "size(B)", "count", "type",
                             "redop", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "#wrong")
              << std::flush;
  }
  std::vector<Row> rows;
  for (const auto c : plan.collectives) {
    if (lead) std::cout << "# " << collective_name(c) << "\n" << std::flush;
    bool first = true;
    for (std::int64_t bytes = plan.min_bytes; bytes <= plan.max_bytes; bytes *= plan.factor) {
      if (auto row = measure_collective(*comm, plan, c, bytes, first)) {
        first = false;
        if (lead) std::cout << format_row(*row) << std::flush;
        rows.push_back(*row);
      }
      if (bytes > std::numeric_limits<std::int64_t>::max() / plan.factor) break;
    }
  }
  double busbw_sum = 0;
  std::int64_t wrong_total = 0;
  for (const auto& r : rows) busbw_sum += r.busbw_gbps, wrong_total += r.wrong;
  const double avg_busbw = rows.empty() ? 0.0 : busbw_sum / static_cast<double>(rows.size());
  if (lead) {
    std::cout << fmt::format("# Wrong elements       : {} {}\n", wrong_total, wrong_total == 0 ? "OK" : "FAILED")
              << fmt::format("# Avg bus bandwidth    : {:.3f}\n#\n", avg_busbw) << std::flush;
    write_comms_outputs(request, plan, world, rows, avg_busbw, wrong_total);
  }
  comm->barrier();  // nobody tears the group down while a peer still needs it
  if (wrong_total > 0 && lead)
    std::cerr << "error: " << wrong_total << " result element(s) differ from the expected values (#wrong).\n";
  return wrong_total > 0 ? 1 : 0;
}

}  // namespace

int bench_comms(const CommsBenchRequest& request) {
  const Plan plan = comms_plan(request);
  if (const auto launched = world_from_environment()) {
    if (request.nproc > 1 && request.nproc != launched->world_size)
      throw UsageError(fmt::format("--nproc {} was given, but this process is rank {} of a {}-rank job started by {}.",
                                   request.nproc, launched->rank, launched->world_size, launched->launcher),
                       "Leave out --nproc under a launcher (it decides the ranks), or start strata once.");
    return run_comms_rank(request, plan, *launched);
  }
  if (request.nproc == 1) return run_comms_rank(request, plan, WorldInfo{});
  // The ranks re-run this command with the options resolved here, so that they all agree.
  SpawnOptions spawn;
  spawn.nproc = request.nproc;
  spawn.args = {"bench", "comms", "--backend", plan.backend, "--device", plan.device,
                "--collective", request.collective, "--min-bytes", std::to_string(plan.min_bytes),
                "--max-bytes", std::to_string(plan.max_bytes), "--factor", std::to_string(plan.factor),
                "--iters", std::to_string(plan.iters), "--warmup", std::to_string(plan.warmup),
                "--dtype", plan.dtype_name, "--op", plan.op_name, "--timeout-s", fmt::format("{}", plan.timeout_s)};
  if (!request.csv.empty()) spawn.args.insert(spawn.args.end(), {"--csv", request.csv});
  if (!request.json.empty()) spawn.args.insert(spawn.args.end(), {"--json", request.json});
  return spawn_and_supervise(spawn);
}

}  // namespace strata
