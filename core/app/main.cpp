// The `strata` command line: parses arguments and calls the core. Every error is caught here,
// printed as one paragraph with its fix, and mapped to an exit code (2: bad input or usage).

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <boost/program_options.hpp>

#include "check/check.hpp"
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
                                              write results.csv, results.json and results.md
  check NAME [--world-sizes 1,2,3] [--models standard|transformers] [--out DIR]
                                              conformance suite of strategy NAME on small CPU
                                              models (equivalence with single, memory,
                                              communication, state dict, bad options)
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
          "max-restarts", po::value<int>(), "restarts of all ranks after a failure (overrides [distributed] max_restarts)");
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
    if (vars.count("nproc")) request.overrides.push_back("distributed.nproc=" + std::to_string(vars["nproc"].as<int>()));
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
                           "Commands: run, validate, compare, check, export, plugins, describe.");
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
