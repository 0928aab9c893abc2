// The `strata` command line: parses arguments and calls the core. Every error is caught here,
// printed as one paragraph with its fix, and mapped to an exit code (2: bad input or usage).

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "bench/bench.hpp"
#include "check/check.hpp"
#include "compare/report.hpp"
#include "run.hpp"
#include "strata/errors.hpp"
#include "text/errors_text.hpp"

namespace po = boost::program_options;

namespace {

constexpr const char* kUsage = R"(usage: strata <command> [options]

commands:
  run FILE [--nproc N] [--out DIR] [--set KEY=VALUE]... [--resume PATH|auto] [--max-restarts R]
                                              train the experiment in FILE (N ranks on this host);
                                              --resume continues from a checkpoint (a step_N
                                              directory, or the latest of a run directory; auto:
                                              the latest in --out, if any); --max-restarts restarts
                                              every rank from the latest checkpoint when one fails
  export CHECKPOINT --to FILE                 write the checkpoint's model, consolidated, as FILE:
                                              *.safetensors, *.pt, or a directory (Hugging Face layout)
  validate FILE [--set KEY=VALUE]...          check FILE, its plugins and data without training
  compare SWEEP [--out DIR] [--set KEY=VALUE]... [--dry-run]
                                              run every combination of the sweep file SWEEP and
                                              write results.csv, results.json, results.md and
                                              report.html (charts and tables in one page)
  plot RUN_DIR... [--out FILE] [--baseline DIR]
                                              report.html (or FILE) from run directories made by
                                              `strata run`: time, speedup, efficiency, memory,
                                              communication, loss; baseline: DIR, else `single`,
                                              else the smallest world size
  check NAME [--world-sizes 1,2,3] [--models standard|transformers] [--out DIR]
                                              conformance suite of strategy NAME on small CPU
                                              models (equivalence with single, memory,
                                              communication, state dict, bad options)
  bench comms [--nproc N] [--backend gloo|nccl] [--device cpu|cuda] [--collective NAME|all]
              [--min-bytes 8] [--max-bytes 64M] [--factor 2] [--iters 20] [--warmup 5]
              [--dtype float32] [--op sum|avg|max] [--csv FILE] [--json FILE] [--timeout-s 300]
                                              bandwidth of all_reduce, all_gather, reduce_scatter and
                                              broadcast by size, as nccl-tests prints it
  bench gemm [-m LIST -n LIST -k LIST] [--dtype float32|tf32|bfloat16|float16] [--device cpu|cuda]
             [--steps N] [--warmup 5] [--threads N] [--csv FILE] [--json FILE]
                                              matmul time and TFLOP/s by shape; records the best
                                              rate as this device's measured peak (for MFU)
  plugins                                     list the plugins found (kind, name, description, library)
  describe NAME                               options of a plugin or a core section (e.g. train)

options:
  -h, --help      this text (or `strata <command> --help`)
  --version       print the version

plugins are searched in ../plugins and ../lib/strata/plugins next to this program (build/plugins
in a build tree), in each directory of STRATA_PLUGIN_PATH, and in [plugins] paths of the experiment.
)";


/// The command's arguments; std::nullopt when they ask for --help (the usage is printed then).
std::optional<po::variables_map> parse(const std::vector<std::string>& args, const po::options_description& options,
                                       const po::positional_options_description& positional) {
  po::variables_map vars;
  try {
    po::store(po::command_line_parser(args).options(options).positional(positional).run(), vars);
    po::notify(vars);
  } catch (const po::error& e) {
    throw strata::UsageError(e.what(), "Run `strata --help` for the usage.");
  }
  if (vars.count("help")) {
    std::cout << kUsage;
    return std::nullopt;
  }
  return vars;
}

/// `strata bench comms|gemm [options]`.
int bench(std::vector<std::string> args, po::options_description& options, po::positional_options_description& positional) {
  const std::string what = args.empty() ? "" : args.front();
  if (what == "-h" || what == "--help") {
    std::cout << kUsage;
    return 0;
  }
  if (what != "comms" && what != "gemm")
    throw strata::UsageError(what.empty() ? "`strata bench` needs a benchmark." : "unknown benchmark '" + what + "'.",
                             "Write `strata bench comms` (collectives) or `strata bench gemm` (matmul).");
  args.erase(args.begin());
  options.add_options()("dtype", po::value<std::string>(), "element type")(
      "device", po::value<std::string>(), "cpu or cuda")("warmup", po::value<int>(), "untimed calls per size")(
      "csv", po::value<std::string>(), "CSV output")("json", po::value<std::string>(), "JSON output");
  if (what == "comms") {
    options.add_options()("nproc", po::value<int>(), "ranks on this host")("backend", po::value<std::string>(), "gloo or nccl")(
        "collective", po::value<std::string>(), "collective or all")("min-bytes", po::value<std::string>(), "smallest size")(
        "max-bytes", po::value<std::string>(), "largest size")("factor", po::value<int>(), "size multiplier")(
        "iters", po::value<int>(), "timed calls per size")("op", po::value<std::string>(), "sum, avg or max")(
        "timeout-s", po::value<double>(), "rendezvous and collective timeout");
    const auto parsed = parse(args, options, positional);
    if (!parsed) return 0;
    const auto& vars = *parsed;
    strata::CommsBenchRequest request;
    for (const auto& [key, field] : {std::pair{"nproc", &request.nproc}, std::pair{"factor", &request.factor},
                                     std::pair{"iters", &request.iters}, std::pair{"warmup", &request.warmup}})
      if (vars.count(key)) *field = vars[key].as<int>();
    for (const auto& [key, field] :
         {std::pair{"backend", &request.backend}, std::pair{"device", &request.device},
          std::pair{"collective", &request.collective}, std::pair{"min-bytes", &request.min_bytes},
          std::pair{"max-bytes", &request.max_bytes}, std::pair{"dtype", &request.dtype}, std::pair{"op", &request.op},
          std::pair{"csv", &request.csv}, std::pair{"json", &request.json}})
      if (vars.count(key)) *field = vars[key].as<std::string>();
    if (vars.count("timeout-s")) request.timeout_s = vars["timeout-s"].as<double>();
    return strata::bench_comms(request);
  }
  options.add_options()(",m", po::value<std::string>(), "M list")(",n", po::value<std::string>(), "N list")(
      ",k", po::value<std::string>(), "K list")("steps", po::value<int>(), "timed matmuls per shape")(
      "threads", po::value<int>(), "CPU threads (a rank's share of the cores)");
  const auto parsed = parse(args, options, positional);
  if (!parsed) return 0;
  const auto& vars = *parsed;
  strata::GemmBenchRequest request;
  for (const auto& [key, list] : {std::pair{"-m", &request.m}, std::pair{"-n", &request.n}, std::pair{"-k", &request.k}})
    if (vars.count(key)) *list = strata::parse_int_list(vars[key].as<std::string>(), key);  // short-only keys keep the dash
  if (vars.count("dtype")) request.dtype = vars["dtype"].as<std::string>();
  if (vars.count("device")) request.device = vars["device"].as<std::string>();
  if (vars.count("steps")) request.steps = vars["steps"].as<int>();
  if (vars.count("warmup")) request.warmup = vars["warmup"].as<int>();
  if (vars.count("threads")) request.threads = vars["threads"].as<int>();
  if (vars.count("csv")) request.csv = vars["csv"].as<std::string>();
  if (vars.count("json")) request.json = vars["json"].as<std::string>();
  return strata::bench_gemm(request);
}

int dispatch(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string command = args.front();
  const bool global_flag = command == "-h" || command == "--help" || command == "help" || command == "--version";
  if (global_flag && args.size() > 1)
    throw strata::UsageError("`strata " + command + "` takes no further arguments.", "Run `strata --help`.");
  if (command == "-h" || command == "--help" || command == "help") {
    std::cout << kUsage;
    return 0;
  }
  if (command == "--version") {
    std::cout << "strata " << STRATA_VERSION << "\n";
    return 0;
  }
  args.erase(args.begin());

  po::options_description options("options");
  options.add_options()("help,h", "show help");
  po::positional_options_description positional;

  if (command == "run" || command == "validate") {
    options.add_options()("file", po::value<std::string>(), "experiment TOML")(
        "set", po::value<std::vector<std::string>>()->composing(), "override KEY=VALUE");
    if (command == "run" || command == "validate")
      options.add_options()("nproc", po::value<int>(), "ranks on this host (overrides [distributed] nproc)");
    if (command == "run")
      options.add_options()("out", po::value<std::string>(), "run directory")(
          "resume", po::value<std::string>(), "checkpoint, run directory or `auto` to continue from")(
          "max-restarts", po::value<int>(), "restarts of all ranks after a failure (overrides [distributed] max_restarts)")(
          "standalone", "ignore launcher variables and start the ranks on this host");
    positional.add("file", 1);
    const auto parsed = parse(args, options, positional);
    if (!parsed) return 0;
    const auto& vars = *parsed;
    if (!vars.count("file")) throw strata::UsageError("`strata " + command + "` needs an experiment file.",
                                                      "Write `strata " + command + " experiments/quickstart.toml`.");
    strata::RunRequest request;
    request.file = vars["file"].as<std::string>();
    if (vars.count("set")) request.overrides = vars["set"].as<std::vector<std::string>>();
    if (vars.count("out")) request.out = vars["out"].as<std::string>();
    if (vars.count("nproc")) {
      request.nproc = vars["nproc"].as<int>();
      request.overrides.push_back("distributed.nproc=" + std::to_string(request.nproc));
    }
    request.standalone = vars.count("standalone") > 0;
    if (vars.count("resume")) request.resume = vars["resume"].as<std::string>();
    if (vars.count("max-restarts"))
      request.overrides.push_back("distributed.max_restarts=" + std::to_string(vars["max-restarts"].as<int>()));
    if (command == "validate") {
      strata::validate_experiment(request);
      return 0;
    }
    return strata::run_experiment(request);
  }
  if (command == "compare") {
    options.add_options()("file", po::value<std::string>(), "sweep TOML")(
        "set", po::value<std::vector<std::string>>()->composing(), "override KEY=VALUE for every run")(
        "out", po::value<std::string>(), "comparison directory")("dry-run", "validate and list the runs only");
    positional.add("file", 1);
    const auto parsed = parse(args, options, positional);
    if (!parsed) return 0;
    const auto& vars = *parsed;
    if (!vars.count("file"))
      throw strata::UsageError("`strata compare` needs a sweep file.",
                               "Write `strata compare experiments/compare_strategies.toml`.");
    strata::CompareRequest request;
    request.file = vars["file"].as<std::string>();
    if (vars.count("set")) request.overrides = vars["set"].as<std::vector<std::string>>();
    if (vars.count("out")) request.out = vars["out"].as<std::string>();
    request.dry_run = vars.count("dry-run") > 0;
    return strata::compare_strategies(request);
  }
  if (command == "plot") {
    options.add_options()("runs", po::value<std::vector<std::string>>(), "run directories")(
        "out", po::value<std::string>(), "HTML file (default ./report.html)")(
        "baseline", po::value<std::string>(), "run directory of the baseline");
    positional.add("runs", -1);
    const auto parsed = parse(args, options, positional);
    if (!parsed) return 0;
    const auto& vars = *parsed;
    if (!vars.count("runs"))
      throw strata::UsageError("`strata plot` needs run directories.", "Write `strata plot runs/a runs/b --out report.html`.");
    strata::PlotRequest request;
    for (const auto& dir : vars["runs"].as<std::vector<std::string>>()) request.runs.emplace_back(dir);
    if (vars.count("out")) request.out = vars["out"].as<std::string>();
    if (vars.count("baseline")) request.baseline = vars["baseline"].as<std::string>();
    const auto written = strata::plot_runs(request);
    std::cout << "report: " << written.string() << "\n";
    return 0;
  }
  if (command == "check") {
    options.add_options()("name", po::value<std::string>(), "strategy name")(
        "world-sizes", po::value<std::string>(), "comma-separated world sizes (default 1,2)")(
        "models", po::value<std::string>(), "workloads: standard (MLP, CNN; default) or transformers (ViT, Llama)")(
        "out", po::value<std::string>(), "directory for the check's experiments and runs (kept)");
    positional.add("name", 1);
    const auto parsed = parse(args, options, positional);
    if (!parsed) return 0;
    const auto& vars = *parsed;
    if (!vars.count("name"))
      throw strata::UsageError("`strata check` needs a strategy name.",
                               "Write `strata check ddp`; `strata plugins` lists the strategies.");
    strata::CheckRequest request;
    request.strategy = vars["name"].as<std::string>();
    if (vars.count("world-sizes"))
      request.world_sizes = strata::parse_world_sizes(vars["world-sizes"].as<std::string>());
    if (vars.count("out")) request.out = vars["out"].as<std::string>();
    if (vars.count("models")) request.models = vars["models"].as<std::string>();
    return strata::check_strategy(request);
  }
  if (command == "export") {
    options.add_options()("checkpoint", po::value<std::string>(), "checkpoint directory")(
        "to", po::value<std::string>(), "output: *.safetensors, *.pt or a directory");
    positional.add("checkpoint", 1);
    const auto parsed = parse(args, options, positional);
    if (!parsed) return 0;
    const auto& vars = *parsed;
    if (!vars.count("checkpoint") || !vars.count("to"))
      throw strata::UsageError("`strata export` needs a checkpoint and --to.",
                               "Write `strata export runs/x/checkpoints/step_00000100 --to model.safetensors`.");
    strata::export_checkpoint({vars["checkpoint"].as<std::string>(), vars["to"].as<std::string>()});
    return 0;
  }
  if (command == "bench") return bench(args, options, positional);
  if (command == "plugins") {
    const auto parsed = parse(args, options, positional);
    if (!parsed) return 0;
    strata::list_plugins();
    return 0;
  }
  if (command == "describe") {
    options.add_options()("name", po::value<std::string>(), "plugin or section name");
    positional.add("name", 1);
    const auto parsed = parse(args, options, positional);
    if (!parsed) return 0;
    const auto& vars = *parsed;
    if (!vars.count("name")) throw strata::UsageError("`strata describe` needs a name.", "Write `strata describe mlp`.");
    strata::describe(vars["name"].as<std::string>());
    return 0;
  }
  throw strata::UsageError("unknown command '" + command + "'.",
                           "Commands: run, validate, compare, plot, check, export, bench, plugins, describe.");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return dispatch(argc, argv);
  } catch (const strata::UsageError& e) {
    std::cerr << strata::detail::format_error(e) << "\n\n" << kUsage;
    return e.exit_code();
  } catch (const std::exception& e) {
    // A rank of a job says which one it is: the launcher's summary line names it too.
    std::string prefix;
    const char* rank = std::getenv("RANK");
    const char* world = std::getenv("WORLD_SIZE");
    if (rank && world) prefix = std::string("[rank ") + rank + "/" + world + "] ";
    // One write, so that the paragraphs of several failing ranks do not interleave.
    const std::string text = prefix + strata::detail::format_error(e) + "\n";
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
    return strata::detail::exit_code_of(e);
  }
}
