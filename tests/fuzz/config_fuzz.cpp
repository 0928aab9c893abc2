// Config fuzz test: hundreds of mutated experiments through the real `strata validate` code path.
//
// `strata validate` as a process costs about a second (loading LibTorch), so this driver loads
// LibTorch and the plugins once and forks a child per case that runs the CLI's own main()
// (cli_entry.cpp) on `validate CASE [--set ...]`. Each child runs with the case's environment,
// stdout and stderr in a pipe, at most --time-limit-s of wall time and --memory-limit-mb more
// data than the driver had. A case passes when the child exits 0 or 2, by itself, and its
// output holds no C++ stack text, no control characters but newlines, valid UTF-8 and no line
// over 2000 characters. Then a few accepted cases must also start under `strata run`
// (--strata BIN, one training step). Failing cases are kept under WORK/failures/case-N with a
// repro.sh; the summary groups them by class and message.
//
//   build/bin/strata_config_fuzz --seeds experiments --seeds tests/fixtures/configs/good_synthetic.toml
//       --cases 300 --seed 1 --strata build/bin/strata --work /tmp/fuzz
//   build/bin/strata_config_fuzz ... --case 17     # one case, its output printed

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "children.hpp"
#include "config/experiment.hpp"
#include "mutations.hpp"
#include "run.hpp"
#include "strata/registry.hpp"

int strata_cli_main(int argc, char** argv);  // core/app/main.cpp's main (cli_entry.cpp)

namespace fs = std::filesystem;
using strata::fuzz::Case;
using strata::fuzz::Child;
using strata::fuzz::Outcome;
using strata::fuzz::run_all;
using strata::fuzz::spawn;
using strata::fuzz::vm_data_bytes;
using Clock = std::chrono::steady_clock;

namespace {

struct Settings {
  std::vector<fs::path> seeds;
  int cases = 300;
  std::uint64_t seed = 1;
  int only_case = -1;
  int jobs = 2;
  fs::path work = "strata-config-fuzz";
  fs::path strata;  // for the run checks; empty: none
  int run_checks = 3;
  double time_limit_s = 10;
  double run_time_limit_s = 60;
  std::uint64_t memory_limit_mb = 2048;
  double budget_s = 0;  // stop starting cases after this long; 0 = no limit
  bool log_all = false;  // a line per case: status, time, message, mutations
};

constexpr int kFullExitEvery = 10;  // every tenth case exits as the CLI does (see run_cli)

// ---- checks ---------------------------------------------------------------------------------

std::string describe_status(const Outcome& o) {
  if (o.timed_out) return "timeout";
  if (WIFSIGNALED(o.status)) return std::string("signal ") + strsignal(WTERMSIG(o.status));
  return "exit " + std::to_string(WEXITSTATUS(o.status));
}

bool valid_utf8(const std::string& s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const std::size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (std::size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    if (n == 2 && c == 0xC2 && static_cast<unsigned char>(s[i + 1]) < 0xA0) return false;  // C1 controls
    i += n;
  }
  return true;
}

/// What is wrong with an outcome of `strata validate` (empty: nothing), as failure classes.
std::vector<std::string> problems(const Outcome& o, double time_limit_s, std::uint64_t memory_limit_mb,
                                  bool accept_only) {
  std::vector<std::string> out;
  const bool exited = !o.timed_out && WIFEXITED(o.status);
  const int code = exited ? WEXITSTATUS(o.status) : -1;
  if (o.timed_out) out.push_back("time: over " + std::to_string(static_cast<int>(time_limit_s)) + " s");
  else if (!exited) out.push_back("crash: " + describe_status(o));
  else if (code != 0 && (accept_only || code != 2)) out.push_back("status: " + describe_status(o));
  if (static_cast<std::uint64_t>(o.max_rss_kb) > memory_limit_mb * 1024)
    out.push_back("memory: peak RSS over " + std::to_string(memory_limit_mb) + " MB");
  for (const char* marker : {"frame #", "Exception raised from", "[enforce fail", "terminate called", "what():",
                             "AddressSanitizer", "Segmentation fault", "core dumped"})
    if (o.output.find(marker) != std::string::npos) out.push_back(std::string("stack text: ") + marker);
  for (unsigned char ch : o.output)
    if ((ch < 0x20 && ch != '\n') || ch == 0x7f) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "control character 0x%02x in output", ch);
      out.push_back(buf);
      break;
    }
  if (!valid_utf8(o.output)) out.push_back("invalid UTF-8 or C1 control in output");
  if (o.output.find("\nzz-newline") != std::string::npos) out.push_back("newline of a value echoed raw");
  std::size_t longest = 0;
  for (std::size_t start = 0; start < o.output.size();) {
    const auto end = std::min(o.output.find('\n', start), o.output.size());
    longest = std::max(longest, end - start);
    start = end + 1;
  }
  if (longest > 2000) out.push_back("line of over 2000 characters");
  if (code == 2 && o.output.find("error: ") == std::string::npos) out.push_back("exit 2 without an error: line");
  return out;
}

/// Printable excerpt: control bytes as \xHH, long lines cut.
std::string excerpt(const std::string& text, std::size_t max_lines = 12, std::size_t max_line = 300) {
  std::string out;
  std::istringstream in(text);
  std::string line;
  for (std::size_t n = 0; std::getline(in, line) && n < max_lines; ++n) {
    std::string shown;
    for (unsigned char ch : line.substr(0, max_line)) {
      if (ch < 0x20 || ch == 0x7f) {
        char buf[8];
        std::snprintf(buf, sizeof buf, "\\x%02x", ch);
        shown += buf;
      } else {
        shown += static_cast<char>(ch);
      }
    }
    out += "      | " + shown + (line.size() > max_line ? " ...(" + std::to_string(line.size()) + " chars)" : "") + "\n";
  }
  return out;
}

/// The message a group of failures shares: the first error line, file and numbers blanked.
std::string message_key(const std::string& output) {
  std::istringstream in(output);
  std::string line, first;
  while (std::getline(in, line)) {
    if (first.empty() && !line.empty()) first = line;
    if (line.rfind("error: ", 0) == 0) {
      first = line;
      break;
    }
  }
  std::string key;
  for (std::size_t i = 0; i < first.size() && key.size() < 110; ++i) {
    const auto ch = static_cast<unsigned char>(first[i]);
    if (std::isdigit(ch)) {
      if (key.empty() || key.back() != '#') key += '#';
    } else if (ch < 0x20 || ch >= 0x7f) {
      key += '?';
    } else {
      key += static_cast<char>(ch);
    }
  }
  if (auto p = key.find("cases/case-#.toml"); p != std::string::npos) key.replace(p, 17, "CASE");
  return key.empty() ? "(no output)" : key;
}

// ---- cases ----------------------------------------------------------------------------------

std::vector<std::string> validate_args(const Case& c, const std::string& file) {
  std::vector<std::string> args = {"strata", "validate", file};
  for (const auto& o : c.overrides) args.insert(args.end(), {"--set", o});
  args.insert(args.end(), c.extra_args.begin(), c.extra_args.end());
  return args;
}

std::string case_file(const Case& c) {
  return c.file_override.empty() ? "cases/case-" + std::to_string(c.index) + ".toml" : c.file_override;
}

/// The child's body: the CLI's main() on `args`. LibTorch's static destructors take 0.4 s at
/// exit (deregistering operators), ten times the validation itself, so most children flush and
/// _exit; with `full_exit` the child exits as the CLI does, static destructors included.
[[noreturn]] void run_cli(std::vector<std::string> args, const std::vector<std::pair<std::string, std::string>>& env,
                          bool full_exit) {
  for (const auto& [name, value] : env) setenv(name.c_str(), value.c_str(), 1);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int code = strata_cli_main(static_cast<int>(args.size()), argv.data());
  if (full_exit) std::exit(code);
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  _exit(code);
}

void keep_failure(const Settings& s, const Case& c, const std::vector<std::string>& args, const Outcome& o,
                  const std::vector<std::string>& why) {
  const fs::path dir = fs::path("failures") / ("case-" + std::to_string(c.index));
  fs::create_directories(dir);
  if (c.file_override.empty()) fs::copy_file(case_file(c), dir / "case.toml", fs::copy_options::overwrite_existing);
  std::ofstream repro(dir / "repro.sh");
  repro << "#!/bin/sh\n# " << strata::fuzz::shell_quote(c.label()) << "\n# " << why.front() << "\ncd \"$(dirname \"$0\")\"\n";
  if (!c.env.empty()) repro << "env";
  for (const auto& [name, value] : c.env) repro << " " << name << "=" << strata::fuzz::shell_quote(value);
  repro << (c.env.empty() ? "" : " ") << "\"${STRATA:-strata}\"";
  for (std::size_t i = 1; i < args.size(); ++i)
    repro << " " << strata::fuzz::shell_quote(i == 2 && c.file_override.empty() ? "case.toml" : args[i]);
  repro << "\n";
  fs::permissions(dir / "repro.sh", fs::perms::owner_exec, fs::perm_options::add);
  std::ofstream(dir / "output.txt", std::ios::binary) << o.output;
  std::cout << "FAIL case " << c.index << " [" << why.front() << "] " << describe_status(o) << ", "
            << static_cast<int>(o.seconds * 1000) << " ms: " << c.label().substr(0, 300) << "\n"
            << "    kept: " << fs::absolute(dir).string() << "/ (repro.sh; or --seed " << s.seed << " --case "
            << c.index << ")\n"
            << excerpt(o.output);
}

strata::fuzz::ValueKind kind_of(strata::OptionType t) {
  using strata::OptionType;
  using strata::fuzz::ValueKind;
  switch (t) {
    case OptionType::kBool: return ValueKind::kBool;
    case OptionType::kInt: return ValueKind::kInt;
    case OptionType::kFloat: return ValueKind::kFloat;
    case OptionType::kString: return ValueKind::kString;
    case OptionType::kIntList: return ValueKind::kIntList;
    case OptionType::kFloatList: return ValueKind::kFloatList;
    case OptionType::kStringList: return ValueKind::kStringList;
  }
  return ValueKind::kString;
}

/// Every key the core sections and the registered plugins take.
strata::fuzz::Catalog make_catalog(const strata::Registry& registry) {
  strata::fuzz::Catalog catalog;
  for (const auto& section : strata::core_section_names())
    if (const auto* schema = strata::core_section_schema(section))
      for (const auto& spec : schema->specs) {
        catalog.sections[section].push_back({spec.name, kind_of(spec.type)});
        if (spec.name == "name" && !spec.constraint.choices.empty()) catalog.names[section] = spec.constraint.choices;
      }
  for (const auto* entry : registry.entries()) {
    const std::string section = strata::kind_name(entry->kind);
    catalog.names[section].push_back(entry->name);
    auto& keys = catalog.plugins[section][entry->name];
    for (const auto& spec : entry->schema.specs) keys.push_back({spec.name, kind_of(spec.type)});
  }
  return catalog;
}

std::vector<strata::fuzz::SeedFile> read_seeds(const std::vector<fs::path>& paths) {
  std::vector<fs::path> files;
  for (const auto& p : paths) {
    if (!fs::is_directory(p)) {
      files.push_back(p);
      continue;
    }
    std::vector<fs::path> found;
    for (const auto& e : fs::directory_iterator(p))
      if (e.path().extension() == ".toml") found.push_back(e.path());
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  std::vector<strata::fuzz::SeedFile> seeds;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read seed " + f.string());
    std::string text(std::istreambuf_iterator<char>(in), {});
    // A sweep (strata compare) is no experiment: `validate` checks it as a sweep, not what this fuzzes.
    if (text.rfind("[compare]", 0) == 0 || text.find("\n[compare]") != std::string::npos) continue;
    seeds.push_back({f.filename().string(), std::move(text)});
  }
  if (seeds.empty()) throw std::runtime_error("no seed experiments; pass --seeds DIR_OR_FILE");
  return seeds;
}

Settings parse_args(int argc, char** argv) {
  Settings s;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--seeds") s.seeds.push_back(fs::absolute(value()));
    else if (a == "--cases") s.cases = std::stoi(value());
    else if (a == "--seed") s.seed = std::stoull(value());
    else if (a == "--case") s.only_case = std::stoi(value());
    else if (a == "--jobs") s.jobs = std::max(1, std::stoi(value()));
    else if (a == "--work") s.work = fs::absolute(value());
    else if (a == "--strata") s.strata = fs::absolute(value());
    else if (a == "--run-checks") s.run_checks = std::stoi(value());
    else if (a == "--time-limit-s") s.time_limit_s = std::stod(value());
    else if (a == "--memory-limit-mb") s.memory_limit_mb = std::stoull(value());
    else if (a == "--budget-s") s.budget_s = std::stod(value());
    else if (a == "--log-all") s.log_all = true;
    else throw std::runtime_error("unknown argument " + a + " (see the comment at the top of config_fuzz.cpp)");
  }
  if (const char* seed = std::getenv("STRATA_FUZZ_SEED"); seed && *seed) s.seed = std::stoull(seed);
  if (const char* cases = std::getenv("STRATA_FUZZ_CASES"); cases && *cases) s.cases = std::stoi(cases);
  return s;
}

/// `strata run` on a few accepted cases, one per seed file first: one training step, one eval
/// batch, under --out WORK/runs. Returns the number that failed.
int check_runs(const Settings& s, const std::map<int, Case>& cases, const std::vector<int>& accepted,
               std::map<std::string, std::vector<int>>& groups) {
  if (s.strata.empty() || s.run_checks <= 0) return 0;
  std::vector<int> chosen;
  std::set<std::string> bases;
  for (int i : accepted)
    if (bases.insert(cases.at(i).base).second) chosen.push_back(i);
  for (int i : accepted)
    if (std::find(chosen.begin(), chosen.end(), i) == chosen.end()) chosen.push_back(i);
  chosen.resize(std::min(chosen.size(), static_cast<std::size_t>(s.run_checks)));
  int failures = 0;
  auto run_args = [&](const Case& c) {
    auto args = validate_args(c, case_file(c));
    args[0] = s.strata.string();
    args[1] = "run";
    args.insert(args.end(), {"--set", "train.steps=1", "--set", "eval.batches=1", "--out",
                             "runs/case-" + std::to_string(c.index)});
    return args;
  };
  run_all(
      static_cast<int>(chosen.size()), 1,  // a run uses every core
      [&](int k) -> std::optional<Child> {
        auto args = run_args(cases.at(chosen[static_cast<std::size_t>(k)]));
        return spawn(
            [args]() mutable {
              std::vector<char*> argv;
              for (auto& a : args) argv.push_back(a.data());
              argv.push_back(nullptr);
              execv(argv[0], argv.data());
              _exit(127);
            },
            s.run_time_limit_s, 0);
      },
      [&](int k, Outcome& o) {
        const Case& c = cases.at(chosen[static_cast<std::size_t>(k)]);
        auto why = problems(o, s.run_time_limit_s, std::uint64_t{1} << 40, true);
        if (why.empty()) {
          std::cout << "run ok (" << static_cast<int>(o.seconds) << " s): " << c.label().substr(0, 200) << "\n";
          return;
        }
        ++failures;
        for (auto& w : why) w = "run after validate accepted: " + w;
        keep_failure(s, c, run_args(c), o, why);
        for (const auto& w : why) groups[w + " | " + message_key(o.output)].push_back(c.index);
      },
      [] { return false; });
  return failures;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    Settings s = parse_args(argc, argv);
    const auto seeds = read_seeds(s.seeds);
    // Loading the plugins here maps LibTorch and every plugin once; the children inherit them.
    // No tensor operation runs in this process, so no thread pool is forked half-initialized.
    strata::Registry registry;
    strata::load_registry(registry, nullptr);
    const auto catalog = make_catalog(registry);
    fs::create_directories(s.work);
    fs::current_path(s.work);
    fs::remove_all("cases");
    fs::remove_all("failures");
    fs::remove_all("runs");
    fs::create_directories("cases");
    const std::uint64_t data_limit = vm_data_bytes() + s.memory_limit_mb * 1024 * 1024;
    std::cout << "config fuzz: seed " << s.seed << ", " << (s.only_case >= 0 ? 1 : s.cases) << " cases from "
              << seeds.size() << " experiments, " << s.jobs << " at a time, limits " << s.time_limit_s << " s and "
              << s.memory_limit_mb << " MB each; work directory " << fs::current_path().string() << std::endl;

    const auto started = Clock::now();
    auto elapsed = [&] { return std::chrono::duration<double>(Clock::now() - started).count(); };
    std::map<int, Case> cases;
    std::map<std::string, std::vector<int>> groups;  // "class | message" -> cases
    std::vector<int> accepted;
    std::vector<std::pair<double, int>> slowest;
    int done_count = 0, ok_count = 0;
    const int first = s.only_case >= 0 ? s.only_case : 0;
    const int count = s.only_case >= 0 ? 1 : s.cases;
    run_all(
        count, s.jobs,
        [&](int i) -> std::optional<Child> {
          Case c = strata::fuzz::make_case(seeds, catalog, s.seed, first + i);
          if (c.file_override.empty()) std::ofstream(case_file(c), std::ios::binary) << c.text;
          const auto args = validate_args(c, case_file(c));
          const auto env = c.env;
          const bool full_exit = c.index % kFullExitEvery == 0;
          cases.emplace(i, std::move(c));
          return spawn([args, env, full_exit] { run_cli(args, env, full_exit); }, s.time_limit_s, data_limit);
        },
        [&](int i, Outcome& o) {
          const Case& c = cases.at(i);
          ++done_count;
          slowest.emplace_back(o.seconds, c.index);
          const auto why = problems(o, s.time_limit_s, s.memory_limit_mb, false);
          if (s.log_all)
            std::cout << "case " << c.index << " " << describe_status(o) << " " << static_cast<int>(o.seconds * 1000)
                      << " ms | " << message_key(o.output) << " | " << c.label().substr(0, 200) << "\n";
          if (s.only_case >= 0) std::cout << c.label() << "\n" << describe_status(o) << "\n" << excerpt(o.output, 40);
          if (!why.empty()) {
            keep_failure(s, c, validate_args(c, case_file(c)), o, why);
            for (const auto& w : why) groups[w + " | " + message_key(o.output)].push_back(c.index);
          } else if (!o.timed_out && WIFEXITED(o.status) && WEXITSTATUS(o.status) == 0) {
            ++ok_count;
            if (c.file_only()) accepted.push_back(i);
          }
          const bool keep = s.only_case >= 0 || (why.empty() && c.file_only() && WIFEXITED(o.status) &&
                                                 WEXITSTATUS(o.status) == 0);
          if (why.empty() && !keep && c.file_override.empty()) fs::remove(case_file(c));
        },
        [&] { return s.budget_s > 0 && elapsed() > s.budget_s; });
    const double validate_s = elapsed();

    const int run_failures = check_runs(s, cases, accepted, groups);

    std::sort(slowest.rbegin(), slowest.rend());
    std::cout << "\nconfig fuzz: " << done_count << " cases in " << static_cast<int>(validate_s) << " s (seed " << s.seed
              << "), " << ok_count << " accepted, " << (done_count - ok_count) << " rejected; slowest:";
    for (std::size_t i = 0; i < std::min<std::size_t>(3, slowest.size()); ++i)
      std::cout << " case " << slowest[i].second << " " << static_cast<int>(slowest[i].first * 1000) << " ms";
    std::cout << "\n";
    if (done_count < count) std::cout << "note: --budget-s " << s.budget_s << " ended the run after " << done_count << " cases\n";
    if (groups.empty() && run_failures == 0) {
      std::cout << "no failures\n";
      return 0;
    }
    std::cout << "failures by class and message (" << groups.size() << " groups):\n";
    for (const auto& [key, list] : groups) {
      std::cout << "  " << list.size() << "x  " << key << "\n     cases:";
      for (std::size_t i = 0; i < std::min<std::size_t>(8, list.size()); ++i) std::cout << " " << list[i];
      std::cout << (list.size() > 8 ? " ..." : "") << "\n";
    }
    std::cout << "failing cases are kept in " << (fs::current_path() / "failures").string() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "strata_config_fuzz: " << e.what() << "\n";
    return 2;
  }
}
