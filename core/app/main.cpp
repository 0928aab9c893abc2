// The `strata` command line: parses arguments and calls the core. Every error is caught here,
// printed as one paragraph with its fix, and mapped to an exit code (2: bad input or usage).

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "bench/bench.hpp"
#include "check/check.hpp"
#include "device/cuda_support.hpp"
#include "compare/report.hpp"
#include "sweep/sweep_check.hpp"
#include "estimate/estimate.hpp"
#include "export/export.hpp"
#include "fork_server.hpp"
#include "help.hpp"
#include "io/build_info.hpp"
#include "launch/child.hpp"
#include "run.hpp"
#include "strata/errors.hpp"
#include "text/errors_text.hpp"
#include "text/suggest.hpp"

namespace po = boost::program_options;

namespace {
/// A command line that does not parse (unknown command or option, missing argument): the usage
/// follows the error. Usage errors found later (a launcher conflict, say) print their paragraph only.
class CommandLineError : public strata::UsageError {
 public:
  using strata::UsageError::UsageError;
};
}  // namespace

namespace {

using strata::cli::CommandHelp;
using strata::cli::command_helps;

/// `strata <command> --help`: usage, what it does, its options (those on the command line by
/// position left out), exit codes and environment variables.
void print_command_help(const std::string& command, const po::options_description& options,
                        const po::positional_options_description& positional) {
  const auto& helps = command_helps();
  const auto help = std::find_if(helps.begin(), helps.end(), [&](const CommandHelp& h) { return command == h.command; });
  if (help == helps.end()) {
    std::cout << strata::cli::usage();
    return;
  }
  std::set<std::string> by_position;
  for (unsigned i = 0; i < std::min(positional.max_total_count(), 8u); ++i) by_position.insert(positional.name_for_position(i));
  po::options_description shown("options", 110, 60);
  for (const auto& option : options.options())
    if (!by_position.count(option->long_name())) shown.add(option);
  std::cout << "usage: " << help->usage << "\n\n" << help->about << "\n\n" << shown << "\nexit codes:\n"
            << help->exit_codes << "\n\nenvironment:\n" << help->environment;
}


/// The command's arguments; std::nullopt when they ask for --help (the command's help is printed then).
std::optional<po::variables_map> parse(const std::string& command, const std::vector<std::string>& args,
                                       const po::options_description& options,
                                       const po::positional_options_description& positional) {
  po::variables_map vars;
  try {
    po::store(po::command_line_parser(args).options(options).positional(positional).run(), vars);
    po::notify(vars);
  } catch (const po::unknown_option& e) {
    // "--nprocs": the option meant, when one is close.
    std::vector<std::string> names;
    for (const auto& option : options.options()) names.push_back("--" + option->long_name());
    std::string given = e.get_option_name();
    if (given.rfind("--", 0) != 0 && given.rfind('-', 0) == 0) given = "-" + given;
    const std::string near = strata::detail::closest_match(given.substr(0, given.find('=')), names);
    throw CommandLineError(std::string(e.what()) + (near.empty() ? "." : "; did you mean " + near + "?"),
                           "Run `strata " + command + " --help` for its options.");
  } catch (const po::error& e) {
    throw CommandLineError(e.what(), "Run `strata " + command + " --help` for its options.");
  }
  if (vars.count("help")) {
    print_command_help(command, options, positional);
    return std::nullopt;
  }
  return vars;
}

/// --network FILE[,FILE...]: the files, in order.
std::vector<std::filesystem::path> network_files(const std::string& text) {
  std::vector<std::filesystem::path> files;
  for (const auto& file : strata::split_commas(text)) {
    if (file.empty())
      throw CommandLineError("--network " + text + " has an empty file name.",
                             "Write `--network comms2.json,comms4.json` (`strata bench comms --json` files) or one cluster spec.");
    files.emplace_back(file);
  }
  return files;
}

/// `strata bench comms|gemm [options]`.
int bench(std::vector<std::string> args, po::options_description& options, po::positional_options_description& positional) {
  const std::string what = args.empty() ? "" : args.front();
  if (what == "-h" || what == "--help") {
    print_command_help("bench", options, positional);
    return 0;
  }
  if (what != "comms" && what != "gemm")
    throw CommandLineError(what.empty() ? "`strata bench` needs a benchmark." : "unknown benchmark '" + what + "'.",
                             "Write `strata bench comms` (collectives) or `strata bench gemm` (matmul).");
  args.erase(args.begin());
  options.add_options()("dtype", po::value<std::string>()->value_name("TYPE"), "element type (default float32)")(
      "device", po::value<std::string>()->value_name("cpu|cuda"), "where the tensors live")(
      "warmup", po::value<int>()->value_name("N"), "untimed calls per size (default 5)")(
      "csv", po::value<std::string>()->value_name("FILE"), "also write the table as CSV")(
      "json", po::value<std::string>()->value_name("FILE"), "also write the table as JSON");
  if (what == "comms") {
    options.add_options()("nproc", po::value<int>()->value_name("N"), "ranks on this host (under a launcher: its ranks)")(
        "backend", po::value<std::string>()->value_name("gloo|nccl"), "process group backend")(
        "collective", po::value<std::string>()->value_name("NAME"),
        "all_reduce, all_gather, reduce_scatter, broadcast, all_to_all or all (default)")(
        "min-bytes", po::value<std::string>()->value_name("SIZE"), "smallest message, e.g. 8 or 4K (default 8)")(
        "max-bytes", po::value<std::string>()->value_name("SIZE"), "largest message, e.g. 64M (default 64M)")(
        "factor", po::value<int>()->value_name("F"), "size multiplier between steps (default 2)")(
        "iters", po::value<int>()->value_name("N"), "timed calls per size (default 20)")(
        "op", po::value<std::string>()->value_name("sum|avg|max"), "reduction (default sum)")(
        "timeout-s", po::value<double>()->value_name("S"), "rendezvous and collective timeout (default 300)");
    const auto parsed = parse("bench comms", args, options, positional);
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
  options.add_options()(",m", po::value<std::string>()->value_name("LIST"), "rows of A, e.g. 1024,4096")(
      ",n", po::value<std::string>()->value_name("LIST"), "columns of B")(
      ",k", po::value<std::string>()->value_name("LIST"), "inner dimension")(
      "steps", po::value<int>()->value_name("N"), "timed matmuls per shape")(
      "threads", po::value<int>()->value_name("N"), "CPU threads (a rank's share of the cores)");
  const auto parsed = parse("bench gemm", args, options, positional);
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
    std::cerr << strata::cli::usage();
    return 2;
  }
  const std::string command = args.front();
  const bool global_flag = command == "-h" || command == "--help" || command == "help" || command == "--version";
  if (global_flag && args.size() > 1)
    throw CommandLineError("`strata " + command + "` takes no further arguments.", "Run `strata --help`.");
  if (command == "-h" || command == "--help" || command == "help") {
    std::cout << strata::cli::usage();
    return 0;
  }
  if (command == "--version") {
    std::cout << strata::version_text();
    return 0;
  }
  args.erase(args.begin());

  po::options_description options("options");
  options.add_options()("help,h", "this help");
  po::positional_options_description positional;

  if (command == "run" || command == "validate") {
    options.add_options()("file", po::value<std::string>(), "experiment TOML")(
        "set", po::value<std::vector<std::string>>()->composing()->value_name("KEY=VALUE"),
        "override a key of the experiment (TOML value), e.g. train.steps=20; repeatable");
    if (command == "run" || command == "validate")
      options.add_options()("nproc", po::value<int>()->value_name("N"), "ranks on this host (overrides [distributed] nproc)");
    if (command == "validate")
      options.add_options()("device", po::value<std::string>()->value_name("NAME"),
                            "check memory against this device's (h100-80gb, a100-40gb, h200-141gb, ...; a GPU run "
                            "checked from a machine without that GPU)");
    if (command == "run")
      options.add_options()("out", po::value<std::string>()->value_name("DIR"),
                            "run directory (default runs/<experiment name>/<UTC time>)")(
          "resume", po::value<std::string>()->value_name("PATH|auto"),
          "continue from a checkpoint: a step_N directory, the latest of a run directory, or `auto` (the latest in "
          "--out, if any)")(
          "max-restarts", po::value<int>()->value_name("R"), "restarts of all ranks after a failure (overrides [distributed] max_restarts)")(
          "standalone", "ignore launcher variables and start the ranks on this host");
    positional.add("file", 1);
    const auto parsed = parse(command, args, options, positional);
    if (!parsed) return 0;
    const auto& vars = *parsed;
    if (!vars.count("file")) throw CommandLineError("`strata " + command + "` needs an experiment file.",
                                                      "Write `strata " + command + " experiments/quickstart.toml`.");
    strata::RunRequest request;
    request.file = vars["file"].as<std::string>();
    if (vars.count("set")) request.overrides = vars["set"].as<std::vector<std::string>>();
    if (command == "validate" && strata::is_sweep_file(request.file)) {
      if (vars.count("device"))
        throw strata::UsageError("--device does not apply to a sweep: validate each experiment with it.",
                                 "Drop --device, or run `strata validate EXPERIMENT.toml --device NAME`.");
      if (vars.count("nproc"))
        throw strata::UsageError("--nproc does not apply to a sweep: each run's world size comes from its axis.",
                                 "Write `--set compare.axes.world_size=[N]` instead.");
      strata::validate_sweep(request.file, request.overrides);
      return 0;
    }
    if (vars.count("out")) request.out = vars["out"].as<std::string>();
    if (vars.count("nproc")) {
      request.nproc = vars["nproc"].as<int>();
      request.overrides.push_back("distributed.nproc=" + std::to_string(request.nproc));
    }
    request.standalone = vars.count("standalone") > 0;
    if (vars.count("resume")) request.resume = vars["resume"].as<std::string>();
    if (vars.count("max-restarts"))
      request.overrides.push_back("distributed.max_restarts=" + std::to_string(vars["max-restarts"].as<int>()));
    if (vars.count("device")) request.device_name = vars["device"].as<std::string>();
    if (command == "validate") {
      strata::validate_experiment(request);
      return 0;
    }
    return strata::run_experiment(request);
  }
  if (command == "compare") {
    options.add_options()("file", po::value<std::string>(), "sweep TOML")(
        "set", po::value<std::vector<std::string>>()->composing()->value_name("KEY=VALUE"),
        "override a key of every run (as [compare.set]), or of the sweep (compare.KEY=VALUE); repeatable")(
        "out", po::value<std::string>()->value_name("DIR"), "comparison directory (default runs/<sweep name>/<UTC time>)")(
        "dry-run", "validate the sweep and list the runs' commands in the order they would run; start none")(
        "resume", po::value<std::string>()->value_name("DIR"),
        "go on with the interrupted comparison in DIR (same sweep file and --set): runs that ended ok are kept, "
        "the others run again (what they left is moved to DIR/discarded)")(
        "until-tight", po::value<std::string>()->value_name("REL"),
        "after the first `repeats` rounds, more rounds until every combination's steady step time has a relative "
        "range of at most REL (compare.until_tight)")(
        "max-repeats", po::value<std::string>()->value_name("N"), "the most rounds of the auto-repeat mode (compare.max_repeats)")(
        "budget", po::value<std::string>()->value_name("SECONDS"),
        "rounds after the first `repeats` only while the comparison would end within SECONDS of its start (compare.budget_s)")(
        "estimate", "then `strata estimate` of the sweep (from the baseline's run when it is on one device): predictions "
                    "beside the measurements with the error of each (accuracy.md, accuracy.csv)")(
        "network", po::value<std::string>()->value_name("FILE[,FILE...]"),
        "with --estimate: `strata bench comms --json` outputs (one per world size) or a TOML cluster spec");
    positional.add("file", 1);
    const auto parsed = parse(command, args, options, positional);
    if (!parsed) return 0;
    const auto& vars = *parsed;
    if (!vars.count("file"))
      throw CommandLineError("`strata compare` needs a sweep file.",
                               "Write `strata compare experiments/compare_strategies.toml`.");
    strata::CompareRequest request;
    request.file = vars["file"].as<std::string>();
    if (vars.count("set")) request.overrides = vars["set"].as<std::vector<std::string>>();
    if (vars.count("out")) request.out = vars["out"].as<std::string>();
    request.dry_run = vars.count("dry-run") > 0;
    if (vars.count("resume")) {
      request.resume = vars["resume"].as<std::string>();
      if (!request.out.empty() && std::filesystem::weakly_canonical(request.out) != std::filesystem::weakly_canonical(request.resume))
        throw CommandLineError("--resume continues the comparison in its own directory, not in --out.",
                               "Leave --out out (or give the same directory).");
    }
    request.estimate = vars.count("estimate") > 0;
    if (vars.count("network")) {
      if (!request.estimate)
        throw CommandLineError("--network is for --estimate.", "Add --estimate, or leave --network out.");
      request.network = network_files(vars["network"].as<std::string>());
    }
    // Shorthands of --set compare.KEY=VALUE: validated (and reported) as those.
    for (const auto& [flag, key] : {std::pair{"until-tight", "until_tight"}, std::pair{"max-repeats", "max_repeats"},
                                    std::pair{"budget", "budget_s"}})
      if (vars.count(flag)) request.overrides.push_back(std::string("compare.") + key + "=" + vars[flag].as<std::string>());
    return strata::compare_strategies(request);
  }
  if (command == "plot") {
    options.add_options()("runs", po::value<std::vector<std::string>>(), "run directories")(
        "out", po::value<std::string>()->value_name("FILE"), "HTML file (default ./report.html)")(
        "baseline", po::value<std::string>()->value_name("DIR"),
        "run directory of the baseline (default: `single`, else the smallest world size)");
    positional.add("runs", -1);
    const auto parsed = parse(command, args, options, positional);
    if (!parsed) return 0;
    const auto& vars = *parsed;
    if (!vars.count("runs"))
      throw CommandLineError("`strata plot` needs run directories.", "Write `strata plot runs/a runs/b --out report.html`.");
    strata::PlotRequest request;
    for (const auto& dir : vars["runs"].as<std::vector<std::string>>()) request.runs.emplace_back(dir);
    if (vars.count("out")) request.out = vars["out"].as<std::string>();
    if (vars.count("baseline")) request.baseline = vars["baseline"].as<std::string>();
    const auto written = strata::plot_runs(request);
    std::cout << "report: " << written.string() << "\n";
    return 0;
  }
  if (command == "estimate") {
    options.add_options()("file", po::value<std::string>(), "experiment TOML, or a sweep file")(
        "world-sizes", po::value<std::string>()->value_name("LIST"),
        "comma-separated world sizes (default: the sweep's, else 1,2,4,8)")(
        "network", po::value<std::string>()->value_name("FILE[,FILE...]"),
        "`strata bench comms --json` outputs (one per world size) or a TOML cluster spec (default: an assumed one-host "
        "network, said so)")(
        "strategies", po::value<std::string>()->value_name("LIST"),
        "comma-separated strategies (default: the sweep's, else the built-in ones)")(
        "out", po::value<std::string>()->value_name("DIR"), "where estimate.json, estimate.csv and the profile run go")(
        "profile", po::value<std::string>()->value_name("RUN_DIR"), "reuse this run (world size 1) as the profile")(
        "device-memory", po::value<double>()->value_name("GIB"), "memory of one device (default: the host's on CPU, 80 on GPUs)")(
        "compute-scale", po::value<double>()->value_name("R"),
        "the network's devices compute R times as fast as the profile's (a CPU profile estimated on a GPU "
        "cluster spec); required when their kinds differ")(
        "cpu-threads", po::value<std::string>()->value_name("equal|share"),
        "CPU: equal gives every rank the same intra-op threads at every world size (the default, or a sweep's "
        "[compare] cpu_threads); share divides the host's among the ranks")(
        "set", po::value<std::vector<std::string>>()->composing()->value_name("KEY=VALUE"),
        "override a key of the experiment (and of its profile run); repeatable");
    positional.add("file", 1);
    const auto parsed = parse(command, args, options, positional);
    if (!parsed) return 0;
    const auto& vars = *parsed;
    if (!vars.count("file"))
      throw CommandLineError("`strata estimate` needs an experiment file.",
                             "Write `strata estimate experiments/quickstart.toml --world-sizes 1,2,4`.");
    strata::EstimateRequest request;
    request.file = vars["file"].as<std::string>();
    if (vars.count("set")) request.overrides = vars["set"].as<std::vector<std::string>>();
    if (vars.count("world-sizes")) request.world_sizes = strata::parse_world_sizes(vars["world-sizes"].as<std::string>());
    if (vars.count("network")) request.network = network_files(vars["network"].as<std::string>());
    if (vars.count("out")) request.out = vars["out"].as<std::string>();
    if (vars.count("profile")) request.profile = vars["profile"].as<std::string>();
    if (vars.count("compute-scale")) {
      request.compute_scale = vars["compute-scale"].as<double>();
      if (!(request.compute_scale > 0))
        throw CommandLineError("--compute-scale must be a positive ratio.", "Write `--compute-scale 50`.");
    }
    if (vars.count("cpu-threads")) {
      request.cpu_threads = vars["cpu-threads"].as<std::string>();
      if (request.cpu_threads != "equal" && request.cpu_threads != "share")
        throw CommandLineError("--cpu-threads " + request.cpu_threads + ": not a rule.", "Write `--cpu-threads equal` or `--cpu-threads share`.");
    }
    if (vars.count("device-memory")) {
      request.device_memory_gib = vars["device-memory"].as<double>();
      if (!(request.device_memory_gib > 0))
        throw CommandLineError("--device-memory must be a positive number of GiB.", "Write `--device-memory 80`.");
    }
    if (vars.count("strategies"))
      request.strategies = strata::parse_strategy_names(vars["strategies"].as<std::string>(), "--strategies");
    return strata::estimate_experiment(request);
  }
  if (command == "check") {
    options.add_options()("name", po::value<std::string>(), "strategy name")(
        "world-sizes", po::value<std::string>()->value_name("LIST"), "comma-separated world sizes (default 1,2)")(
        "models", po::value<std::string>()->value_name("SET"),
        "workloads: standard (MLP, CNN; default) or transformers (ViT, Llama)")(
        "out", po::value<std::string>()->value_name("DIR"), "directory for the check's experiments and runs (kept)")(
        "set", po::value<std::vector<std::string>>()->value_name("KEY=VALUE"),
        "a strategy option for every run of the strategy, e.g. strategy.secondary_group_size=2 (repeatable); "
        "replaces the strategy's own option matrix")(
        "no-matrix", po::bool_switch(), "check the defaults (and --set) only, not the strategy's option matrix");
    positional.add("name", 1);
    const auto parsed = parse(command, args, options, positional);
    if (!parsed) return 0;
    const auto& vars = *parsed;
    if (!vars.count("name"))
      throw CommandLineError("`strata check` needs a strategy name.",
                               "Write `strata check ddp`; `strata plugins` lists the strategies.");
    strata::CheckRequest request;
    request.strategy = vars["name"].as<std::string>();
    if (vars.count("world-sizes"))
      request.world_sizes = strata::parse_world_sizes(vars["world-sizes"].as<std::string>());
    if (vars.count("out")) request.out = vars["out"].as<std::string>();
    if (vars.count("models")) request.models = vars["models"].as<std::string>();
    if (vars.count("set")) request.sets = vars["set"].as<std::vector<std::string>>();
    request.matrix = !vars["no-matrix"].as<bool>();
    return strata::check_strategy(request);
  }
  if (command == "export") {
    options.add_options()("checkpoint", po::value<std::string>(), "checkpoint directory")(
        "to", po::value<std::string>()->value_name("FILE"), "output: *.safetensors, *.pt or a directory");
    positional.add("checkpoint", 1);
    const auto parsed = parse(command, args, options, positional);
    if (!parsed) return 0;
    const auto& vars = *parsed;
    if (!vars.count("checkpoint") || !vars.count("to"))
      throw CommandLineError("`strata export` needs a checkpoint and --to.",
                               "Write `strata export runs/x/checkpoints/step_00000100 --to model.safetensors`.");
    strata::export_checkpoint({vars["checkpoint"].as<std::string>(), vars["to"].as<std::string>()});
    return 0;
  }
  if (command == "bench") return bench(args, options, positional);
  if (command == "plugins") {
    const auto parsed = parse(command, args, options, positional);
    if (!parsed) return 0;
    strata::list_plugins();
    return 0;
  }
  if (command == "describe") {
    options.add_options()("name", po::value<std::string>(), "plugin or section name");
    positional.add("name", 1);
    const auto parsed = parse(command, args, options, positional);
    if (!parsed) return 0;
    const auto& vars = *parsed;
    strata::describe(vars.count("name") ? vars["name"].as<std::string>() : std::string());
    return 0;
  }
  throw CommandLineError("unknown command '" + command + "'.",
                           "Commands: run, validate, compare, estimate, plot, check, export, bench, plugins, describe.");
}

}  // namespace

namespace {

/// The command line, every error caught and printed as one paragraph: the exit code.
int run_command_line(int argc, char** argv) {
  try {
    return dispatch(argc, argv);
  } catch (const CommandLineError& e) {
    std::cerr << strata::detail::format_error(e) << "\n\n" << strata::cli::usage();
    return e.exit_code();
  } catch (const std::exception& e) {
    // A rank of a job says which one it is: the launcher's summary line names it too.
    std::string prefix;
    const char* rank = std::getenv("RANK");
    const char* world = std::getenv("WORLD_SIZE");
    // As the logger, a job of one rank has none.
    if (rank && world && std::string(world) != "1" && dynamic_cast<const strata::UsageError*>(&e) == nullptr)
      prefix = std::string("[rank ") + rank + "/" + world + "] ";
    // One write, so that the paragraphs of several failing ranks do not interleave.
    const std::string text = prefix + strata::detail::format_error(e) + "\n";
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
    return strata::detail::exit_code_of(e);
  } catch (...) {
    std::fputs("error: an exception that is not a std::exception ended strata.\n  fix: this is a bug in strata or a "
               "plugin; please report it with the command line.\n",
               stderr);
    return 1;
  }
}

/// `strata ARGS` in a fork of this process (launch/child.hpp: the runs of check, compare, estimate).
int run_in_image(const std::vector<std::string>& args) {
  std::vector<std::string> strings{"strata"};
  strings.insert(strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& s : strings) argv.push_back(s.data());
  argv.push_back(nullptr);
  return run_command_line(static_cast<int>(strings.size()), argv.data());
}

}  // namespace

int main(int argc, char** argv) {
  strata::cuda_support::load_at_start();  // before anything asks LibTorch about CUDA
  strata::set_self_runner(&run_in_image);
  // The test suite's fork server (fork_server.hpp): a test hook, as STRATA_FAULT is.
  if (const char* socket = std::getenv("STRATA_FORK_SERVER"); socket != nullptr && argc == 1)
    return strata::app::serve_forks(socket, &run_command_line);
  return run_command_line(argc, argv);
}
