#include "mutations.hpp"

#include <cctype>
#include <cstdio>
#include <random>
#include <sstream>

namespace strata::fuzz {

namespace {

// std::uniform_int_distribution differs between standard libraries; these do not, so a case is
// the same wherever it is generated.
using Rng = std::mt19937_64;
std::uint64_t below(Rng& rng, std::uint64_t n) { return n == 0 ? 0 : rng() % n; }
bool chance(Rng& rng, int percent) { return below(rng, 100) < static_cast<std::uint64_t>(percent); }
template <class T>
const T& pick(Rng& rng, const std::vector<T>& items) { return items[below(rng, items.size())]; }

constexpr std::size_t kHugeString = 50'000;
constexpr std::size_t kHugeArray = 1'000'000;

// ---- values (TOML text) -----------------------------------------------------------------------

const std::vector<std::string> kInts = {
    "0", "-1", "1", "2", "3", "7", "64", "65536", "1000000", "2000000000", "2147483647", "2147483648",
    "4294967296", "9223372036854775807", "-9223372036854775808", "9223372036854775808", "0x7fffffffffffffff",
    "-2", "1_000_000_000_000"};
const std::vector<std::string> kFloats = {
    "0.0", "-0.0", "1e308", "-1e308", "1e-300", "5e-324", "nan", "-nan", "inf", "-inf", "1e309", "2e9", "0.5",
    "-1.5", "1e18", "0.999999999999", "1.0000000001"};
const std::vector<std::string> kBools = {"true", "false"};
const std::vector<std::string> kDates = {"1979-05-27T07:32:00Z", "1979-05-27", "07:32:00", "1979-05-27T07:32:00"};
const std::vector<std::string> kTables = {"{}", "{ a = 1 }", "{ name = \"mlp\" }", "{ steps = 1 }"};
const std::vector<std::string> kStrings = {
    "\"\"", "\"x\"", "\"auto\"", "\"cpu\"", "\"cuda\"", "\"cuda:0\"", "\"cuda:-1\"", "\"cuda:127\"", "\"cuda:128\"",
    "\"cuda:99999999999999999999\"", "\"cuda:0x1\"", "\"cuda: 1\"", "\"nccl\"", "\"gloo\"", "\"none\"", "\"full\"",
    "\"cosine\"", "\"sgd\"", "\"adamw\"", "\"bfloat16\"", "\"float16\"", "\"float64\"", "\"int8\"", "\"byte\"",
    "\"safetensors\"", "\"pt\"", "\"longest\"", "\"  \"", "\"\\u00e9t\\u00e9\"", "'literal \\n'", "\"x\" \"y\"",
    "\"unterminated", "'''multi\nline'''"};
// "\nzz-newline" marks a newline inside a value: config_fuzz.cpp fails a case whose output holds
// it at the start of a line (the value's newline was echoed raw).
const std::vector<std::string> kControlStrings = {
    "\"a\\u0000b\"", "\"\\u001b[31mred\\u001b[0m\"", "\"line1\\nzz-newline\"", "\"\\r\\b\\f\\t\"",
    "\"\\u007f\\u0085\\u2028\\u202e\"", "\"\\ud800\"", "\"\\U0010FFFF\"", std::string("\"a\x01\x1b[2Jb\""),
    std::string("\"\xff\xfe\xc3\""), std::string("\"a\0b\"", 5), "\"\\e[1m\"", std::string("'\x7f'")};
const std::vector<std::string> kPaths = {
    "\"/dev/zero\"", "\"/dev/urandom\"", "\"/dev/null\"", "\"/\"", "\".\"", "\"..\"", "\"\"", "\"/proc/self/mem\"",
    "\"/proc/self/fd/0\"", "\"/nonexistent/dir\"", "\"/etc/passwd\"", "\"/usr/share/common-licenses\"", "\"~\"",
    "\"$HOME\"", "\"/proc\""};
const std::vector<std::string> kIntLists = {
    "[]", "[0]", "[-1]", "[1]", "[9223372036854775807]", "[2000000000]", "[1, 1]", "[1e308]", "[65536, 65536]",
    "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]", "[0, 0]", "[100000, 100000]", "[[1]]", "[\"1\"]"};
const std::vector<std::string> kFloatLists = {"[]", "[0.0]", "[nan, inf]", "[1e308, -1e308]", "[0.9, 0.999]",
                                              "[1, 2, 3]", "[1.0, 1.0]", "[-0.0, 5e-324]"};
const std::vector<std::string> kStringLists = {"[]", "[\"\"]", "[\"/dev/zero\"]", "[\"/\"]", "[\"a\", \"a\"]",
                                               "[\"\\u0000\"]", "[1]"};

std::string repeat(const std::string& unit, std::size_t n, const std::string& sep = "") {
  std::string out;
  out.reserve(n * (unit.size() + sep.size()));
  for (std::size_t i = 0; i < n; ++i) out += (i ? sep : "") + unit;
  return out;
}

std::string huge_string(Rng& rng) {
  static const std::vector<std::string> units = {"x", "9", "/", "a/", ".", "\\u0001", "\\\""};
  // Appended rather than "\"" + ... + "\"": GCC 12 warns falsely (-Wrestrict) on the latter.
  std::string out = "\"";
  out += repeat(pick(rng, units), kHugeString);
  return out += "\"";
}

std::string huge_array(Rng& rng) {
  static const std::vector<std::string> elements = {"0", "1", "-1", "1.5", "\"a\"", "true", "[]"};
  std::string out = "[";
  out += repeat(pick(rng, elements), kHugeArray, ",");
  return out += "]";
}

std::string deep_value(Rng& rng) {
  static const std::vector<std::size_t> depths = {64, 255, 256, 257, 1000, 100'000};
  const std::size_t depth = pick(rng, depths);
  switch (below(rng, 3)) {
    case 0: return repeat("[", depth) + "1" + repeat("]", depth);
    case 1: return repeat("{ a = ", depth) + "1" + repeat(" }", depth);
    default: return "{ " + repeat("a", depth, ".") + " = 1 }";  // dotted keys: tables without nesting
  }
}

/// A value for a key of `kind`: mostly of that kind (so that it passes the type check and reaches
/// the range checks and the plugins), sometimes of any kind.
std::string value_for(Rng& rng, ValueKind kind, bool typed = false) {
  if (!typed && chance(rng, 30)) {
    switch (below(rng, 10)) {
      case 0: return huge_string(rng);
      case 1: return deep_value(rng);
      case 2: return pick(rng, kDates);
      case 3: return pick(rng, kTables);
      case 4: return pick(rng, kControlStrings);
      case 5: return pick(rng, kBools);
      case 6: return pick(rng, kStrings);
      case 7: return pick(rng, kFloats);
      case 8: return pick(rng, kIntLists);
      default: return pick(rng, kInts);
    }
  }
  switch (kind) {
    case ValueKind::kBool: return chance(rng, 80) ? pick(rng, kBools) : "1";
    case ValueKind::kInt: return pick(rng, kInts);
    case ValueKind::kFloat: return chance(rng, 70) ? pick(rng, kFloats) : pick(rng, kInts);
    case ValueKind::kString:
      if (chance(rng, 5)) return huge_string(rng);
      return chance(rng, 30) ? pick(rng, kPaths) : chance(rng, 30) ? pick(rng, kControlStrings) : pick(rng, kStrings);
    case ValueKind::kIntList: return chance(rng, 2) ? huge_array(rng) : pick(rng, kIntLists);
    case ValueKind::kFloatList: return pick(rng, kFloatLists);
    case ValueKind::kStringList:
      if (chance(rng, 10)) return "[" + huge_string(rng) + "]";
      return pick(rng, kStringLists);
  }
  return "0";
}

// ---- the document as lines ------------------------------------------------------------------

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}

struct Entry {
  std::size_t line = 0;
  std::string section, key, value;
};

/// A TOML file seen as lines: section headers and `key = value` lines, enough to edit values.
struct Doc {
  std::vector<std::string> lines;
  std::vector<Entry> entries;
  std::vector<std::pair<std::size_t, std::string>> headers;  // line, section

  explicit Doc(const std::string& text) {
    std::string line;
    std::istringstream in(text);
    while (std::getline(in, line)) lines.push_back(line);
    std::string section;
    for (std::size_t i = 0; i < lines.size(); ++i) {
      const std::string t = trim(lines[i]);
      if (t.empty() || t[0] == '#') continue;
      if (t[0] == '[') {
        section = trim(t.substr(t.find_first_not_of('['), t.find(']') - t.find_first_not_of('[')));
        headers.emplace_back(i, section);
        continue;
      }
      const auto eq = t.find('=');
      if (eq == std::string::npos) continue;
      std::string value = trim(t.substr(eq + 1));
      if (!value.empty() && value[0] != '"' && value[0] != '\'') value = trim(value.substr(0, value.find('#')));
      entries.push_back({i, section, trim(t.substr(0, eq)), value});
    }
  }
  std::string str() const { return repeat_lines(); }
  std::string repeat_lines() const {
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
  }
  std::string value_of(const std::string& section, const std::string& key) const {
    for (const auto& e : entries)
      if (e.section == section && e.key == key) return e.value;
    return "";
  }
  /// Sets section.key to `value`: replaces its line, or adds it below the section's header
  /// (a new header at the end when the section is missing).
  void set(const std::string& section, const std::string& key, const std::string& value) {
    for (const auto& e : entries)
      if (e.section == section && e.key == key) {
        lines[e.line] = key + " = " + value;
        return;
      }
    for (const auto& [line, name] : headers)
      if (name == section) {
        lines.insert(lines.begin() + static_cast<std::ptrdiff_t>(line) + 1, key + " = " + value);
        return;
      }
    lines.push_back("[" + section + "]");
    lines.push_back(key + " = " + value);
  }
};

std::string plugin_name(const Doc& doc, const std::string& section) {
  std::string v = doc.value_of(section, "name");
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
  return v;
}

/// Keys of `section` for this document: its plugin's options, else any plugin's, else the core's.
std::vector<KnownKey> keys_of(const Catalog& catalog, const Doc& doc, const std::string& section) {
  if (auto p = catalog.plugins.find(section); p != catalog.plugins.end()) {
    std::vector<KnownKey> keys = {{"name", ValueKind::kString}};
    if (auto own = p->second.find(plugin_name(doc, section)); own != p->second.end())
      keys.insert(keys.end(), own->second.begin(), own->second.end());
    else
      for (const auto& [name, opts] : p->second) keys.insert(keys.end(), opts.begin(), opts.end());
    return keys;
  }
  if (auto s = catalog.sections.find(section); s != catalog.sections.end()) return s->second;
  return {};
}

std::vector<std::string> section_names(const Catalog& catalog) {
  std::vector<std::string> out;
  for (const auto& [name, keys] : catalog.sections) out.push_back(name);
  for (const auto& [name, plugins] : catalog.plugins) out.push_back(name);
  return out;
}

/// A key that `section` may hold and its kind (for the value), picked at random.
KnownKey random_key(Rng& rng, const Catalog& catalog, const Doc& doc, std::string& section) {
  const auto sections = section_names(catalog);
  section = sections.empty() ? "train" : pick(rng, sections);
  const auto keys = keys_of(catalog, doc, section);
  return keys.empty() ? KnownKey{"unknown_key", ValueKind::kInt} : pick(rng, keys);
}

ValueKind kind_of(const Catalog& catalog, const Doc& doc, const std::string& section, const std::string& key) {
  for (const auto& k : keys_of(catalog, doc, section))
    if (k.name == key) return k.kind;
  return ValueKind::kString;
}

bool is_path_key(const std::string& key) {
  for (const char* part : {"path", "dir", "init_from", "config_from", "tokenizer"})
    if (key.find(part) != std::string::npos) return true;
  return false;
}

// ---- mutations ------------------------------------------------------------------------------

/// Applies one mutation of the document and returns its description.
std::string mutate_doc(Rng& rng, Doc& doc, const Catalog& catalog, const std::vector<SeedFile>& seeds) {
  const bool has_entries = !doc.entries.empty();
  const Entry entry = has_entries ? pick(rng, doc.entries) : Entry{};
  const std::string at = entry.section + "." + entry.key;
  switch (below(rng, 12)) {
    case 0:
      if (!has_entries) break;
      doc.lines[entry.line] = entry.key + " = " + value_for(rng, ValueKind::kString);
      return "type swap " + at;
    case 1:
    case 2: {  // a value of the key's own kind: extremes that pass the type check
      if (!has_entries) break;
      doc.lines[entry.line] = entry.key + " = " + value_for(rng, kind_of(catalog, doc, entry.section, entry.key));
      return "extreme " + at;
    }
    case 3: {  // a known key, set or added, with a value of its kind
      std::string section;
      const KnownKey key = random_key(rng, catalog, doc, section);
      doc.set(section, key.name, value_for(rng, key.kind));
      return "known key " + section + "." + key.name;
    }
    case 4: {  // another registered plugin (or optimizer), or a name no plugin has
      static const std::vector<std::string> sections = {"model", "dataset", "strategy", "optimizer"};
      const std::string section = pick(rng, sections);
      static const std::vector<std::string> odd = {"\"\"", "\"MLP\"", "\"mlp \"", "\"../../etc/passwd\"",
                                                   "\"mlp\\u0000\"", "\"single\\n\"", "\"x\\u001b[2J\""};
      std::string name;
      if (auto n = catalog.names.find(section); n != catalog.names.end() && !n->second.empty() && chance(rng, 80))
        name = "\"" + pick(rng, n->second) + "\"";
      else
        name = chance(rng, 20) ? huge_string(rng) : pick(rng, odd);
      doc.set(section, "name", name);
      return "plugin " + section + ".name = " + name.substr(0, 40);
    }
    case 5: {  // an unknown key: a typo, a key of another section, a huge or control-character key
      static const std::vector<std::string> keys = {"unknown_key", "stepz", "\"\"", "\"a\\u0000b\"",
                                                    "\"\\u001b[31m\"", "\"tab\\there\"", "\"k\\nzz-newline\"", "a.b.c", "name.x"};
      const std::string key = chance(rng, 15) ? "\"" + std::string(kHugeString, 'k') + "\"" : pick(rng, keys);
      std::string section = has_entries ? entry.section : "train";
      if (chance(rng, 20)) section = chance(rng, 50) ? "bogus_section" : std::string(kHugeString, 's');
      doc.set(section, key, "1");
      return "unknown key in [" + section.substr(0, 40) + "]";
    }
    case 6: {  // a path-like key pointing somewhere odd
      std::vector<Entry> paths;
      for (const auto& e : doc.entries)
        if (is_path_key(e.key)) paths.push_back(e);
      static const std::vector<std::pair<std::string, std::string>> keys = {
          {"dataset", "path"}, {"train", "init_from"}, {"checkpoint", "dir"}, {"experiment", "out_dir"},
          {"dataset", "tokenizer"}, {"model", "config_from"}};
      auto [section, key] = paths.empty() || chance(rng, 50) ? pick(rng, keys) : std::pair{paths[0].section, paths[0].key};
      const std::string value = chance(rng, 10) ? "\"" + repeat("a/", 3000) + "\"" : pick(rng, kPaths);
      doc.set(section, key, value);
      return "path " + section + "." + key + " = " + value.substr(0, 40);
    }
    case 7: {  // huge strings where they are echoed: name, device, any string
      static const std::vector<std::pair<std::string, std::string>> keys = {
          {"experiment", "name"}, {"train", "device"}, {"strategy", "name"}, {"distributed", "backend"},
          {"experiment", "out_dir"}};
      auto [section, key] = pick(rng, keys);
      std::string value = key == "device" && chance(rng, 70) ? "\"cuda:" + std::string(kHugeString, '9') + "\""
                                                             : huge_string(rng);
      doc.set(section, key, value);
      return "huge string " + section + "." + key;
    }
    case 8:
      if (!has_entries) break;
      // A huge array takes toml++ seconds to parse: rarer than deep nesting.
      doc.lines[entry.line] = entry.key + " = " + (chance(rng, 25) ? huge_array(rng) : deep_value(rng));
      return "huge array or deep nesting at " + at;
    case 9: {  // deep keys and headers
      static const std::vector<std::size_t> depths = {255, 257, 10'000, 100'000};
      const std::string path = repeat("a", pick(rng, depths), ".");
      doc.lines.push_back(chance(rng, 50) ? "[" + path + "]" : path + " = 1");
      return "deep dotted key";
    }
    case 10:
      if (!has_entries) break;
      doc.lines[entry.line] = entry.key + " = " + pick(rng, kControlStrings);
      return "control characters at " + at;
    default: {  // structure: delete, duplicate, [[array]] header, a line of another seed
      const std::size_t line = below(rng, doc.lines.size());
      if (doc.lines.empty()) break;
      switch (below(rng, 4)) {
        case 0: doc.lines.erase(doc.lines.begin() + static_cast<std::ptrdiff_t>(line)); return "delete line";
        case 1: doc.lines.insert(doc.lines.begin() + static_cast<std::ptrdiff_t>(line), doc.lines[line]); return "duplicate line";
        case 2: doc.lines[line] = "[" + doc.lines[line] + "]"; return "bracket line";
        default: {
          const Doc other(pick(rng, seeds).text);
          if (other.lines.empty()) break;
          doc.lines.insert(doc.lines.begin() + static_cast<std::ptrdiff_t>(line), pick(rng, other.lines));
          return "splice line";
        }
      }
    }
  }
  doc.lines.push_back("[train]");
  return "append [train]";
}

/// Byte-level damage to the text: flips and truncation.
std::string mutate_bytes(Rng& rng, std::string& text) {
  if (text.empty()) return "empty";
  if (chance(rng, 40)) {
    text.resize(below(rng, text.size()));
    return "truncate at " + std::to_string(text.size());
  }
  static constexpr char kBytes[] = "\0\n\"'[]={}\\#.,\x1b\x7f\xff\xc3\x01\t";
  static const std::string interesting(kBytes, sizeof kBytes - 1);
  const std::size_t n = 1 + below(rng, 8);
  for (std::size_t i = 0; i < n; ++i) {
    const auto pos = below(rng, text.size());
    text[pos] = chance(rng, 50) ? interesting[below(rng, interesting.size())] : static_cast<char>(below(rng, 256));
  }
  return "flip " + std::to_string(n) + " bytes";
}

std::string override_for(Rng& rng, const Catalog& catalog, const Doc& doc) {
  static const std::vector<std::string> malformed = {
      "=", "a", "=1", ".=1", "train.=1", ".steps=1", "train..steps=1", "a.b.c.d.e.f=1", "train=1",
      "train.steps.x=1", "model.name.x=1", "train.steps", "train.steps==1", "train.steps=", "model=",
      "train.steps=[", "train.device=\"cuda:0", "model.hidden=[1,", "experiment.name=\x01\x1b[2J", "experiment.name=a\nzz-newline",
      "train.device=cuda\nzz-newline"};
  switch (below(rng, 10)) {
    case 0: return pick(rng, malformed);
    case 1: return std::string(kHugeString, 'k') + "=1";
    case 2: return "train." + std::string(kHugeString, 'k') + "=1";
    default: {
      std::string section;
      const KnownKey key = random_key(rng, catalog, doc, section);
      std::string value = value_for(rng, key.kind);
      if (chance(rng, 20) && value.size() > 2 && value.front() == '"') value = value.substr(1, value.size() - 2);
      return section + "." + key.name + "=" + value;
    }
  }
}

std::pair<std::string, std::string> env_for(Rng& rng) {
  static const std::vector<std::string> names = {
      "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
      "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NTASKS",
      "SLURM_LOCALID", "SLURM_NODEID", "SLURM_STEP_ID", "SLURM_STEPID", "SLURM_NODELIST", "SLURM_JOB_NODELIST",
      "SLURM_STEP_NODELIST", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE", "OMPI_COMM_WORLD_RANK",
      "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "PET_NNODES",
      "PET_NODE_RANK", "PET_NPROC_PER_NODE", "PET_MASTER_ADDR", "PET_MASTER_PORT", "STRATA_SPAWNED",
      "STRATA_PLUGIN_PATH", "STRATA_FASHION_MNIST_DIR", "STRATA_CIFAR10_DIR", "STRATA_MRPC_DIR", "STRATA_TEXT_PATH",
      "STRATA_CACHE_DIR", "STRATA_PROGRESS", "STRATA_RESTART_COUNT", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME",
      "TORCH_SHOW_CPP_STACKTRACES", "OMP_NUM_THREADS", "CUDA_VISIBLE_DEVICES", "TERM"};
  static const std::vector<std::string> values = {
      "", "0", "1", "2", "-1", "99999999999999999999", "2147483648", "abc", " 1", "1\nzz-newline", "0x10", "1:2", "2(x3)",
      "a[1-3]", "a[", "a[1-", "[[[[", "a[99999999999999999999-1]", "auto", "gpu", "/dev/zero", "/dev/null", "/",
      "/nonexistent", "::::", "\x01\x1b[2J", "dumb"};
  const std::string name = pick(rng, names);
  return {name, chance(rng, 5) ? std::string(kHugeString, '7') : pick(rng, values)};
}

/// One key of the document's own sections set to a value of its kind, nothing else: such cases
/// often pass validation and reach the plugins' constructors with extreme sizes.
std::string typed_mutation(Rng& rng, Doc& doc, const Catalog& catalog) {
  static const std::vector<std::string> sections = {"model", "dataset", "strategy", "train", "optimizer",
                                                    "eval", "distributed", "precision", "checkpoint", "log"};
  std::string section;
  std::vector<KnownKey> keys;
  for (int attempt = 0; attempt < 8 && keys.empty(); ++attempt) {  // [strategy] single has no options
    section = pick(rng, sections);
    for (const auto& k : keys_of(catalog, doc, section))
      if (k.name != "name") keys.push_back(k);
  }
  if (keys.empty()) return "none";
  const KnownKey& key = pick(rng, keys);
  const std::string value = value_for(rng, key.kind, true);
  doc.set(section, key.name, value);
  return "typed " + section + "." + key.name + " = " + value.substr(0, 40);
}

}  // namespace

std::string Case::label() const {
  std::string out = "case " + std::to_string(index) + " (seed " + std::to_string(seed) + ") from " + base + ":";
  for (std::size_t i = 0; i < mutations.size(); ++i) out += (i ? "; " : " ") + mutations[i];
  return out;
}

Case make_case(const std::vector<SeedFile>& seeds, const Catalog& catalog, std::uint64_t seed, int index) {
  Rng rng(seed * 0x9E3779B97F4A7C15ull + static_cast<std::uint64_t>(index));
  Case c;
  c.seed = seed;
  c.index = index;
  const SeedFile& base = pick(rng, seeds);
  c.base = base.name;
  Doc doc(base.text);
  if (chance(rng, 30)) {
    c.mutations.push_back(typed_mutation(rng, doc, catalog));
    c.text = doc.str();
    return c;
  }
  const int structural = 1 + static_cast<int>(below(rng, 10) < 6 ? 0 : below(rng, 10) < 7 ? 1 : 2);
  for (int i = 0; i < structural; ++i) {
    c.mutations.push_back(mutate_doc(rng, doc, catalog, seeds));
    doc = Doc(doc.str());
  }
  c.text = doc.str();
  if (chance(rng, 15)) c.mutations.push_back(mutate_bytes(rng, c.text));
  if (chance(rng, 25)) {
    const std::size_t n = 1 + below(rng, 3);
    for (std::size_t i = 0; i < n; ++i) c.overrides.push_back(override_for(rng, catalog, doc));
    c.mutations.push_back(std::to_string(n) + " --set");
  }
  if (chance(rng, 10)) {
    const std::size_t n = 1 + below(rng, 3);
    for (std::size_t i = 0; i < n; ++i) c.env.push_back(env_for(rng));
    c.mutations.push_back(std::to_string(n) + " env");
  }
  if (chance(rng, 5)) {
    static const std::vector<std::vector<std::string>> args = {
        {"--nproc", "0"}, {"--nproc", "-1"}, {"--nproc", "2147483648"}, {"--nproc", "99999999999999999999"},
        {"--nproc", "abc"}, {"--nproc", "1e3"}, {"--nproc", "1000000"}, {"--bogus"}, {"--set"}, {"--set", ""},
        {"--set", "="}, {"-h"}, {"--nproc"}, {"extra_positional"}, {"--out", "x"}, {"--nproc=1", "--nproc=2"},
        {"--"}, {"--file", "x"}, {"--set", "train.steps=1", "--set", "train.steps=2"}, {"--set", "\x1b[31m=1"}};
    c.extra_args = pick(rng, args);
    c.mutations.push_back("args " + c.extra_args.front());
  }
  if (chance(rng, 2)) {
    static const std::vector<std::string> files = {
        "/dev/zero", "/dev/null", "/", "/nonexistent.toml", "", "/proc/self/mem", "/dev/urandom", "/etc/passwd",
        std::string(5000, 'f') + ".toml", "bad\x01\x1b[2Jname.toml", "/proc/self/status"};
    c.file_override = pick(rng, files);
    c.mutations.push_back("file " + shell_quote(c.file_override.substr(0, 40)));
  }
  return c;
}

std::string shell_quote(const std::string& text) {
  bool plain = !text.empty();
  for (unsigned char ch : text)
    if (!(std::isalnum(ch) || std::string("/._-=:,+@%").find(static_cast<char>(ch)) != std::string::npos))
      plain = false;
  if (plain) return text;
  std::string out = "$'";
  for (unsigned char ch : text) {
    if (ch == '\'' || ch == '\\') {
      out += '\\';
      out += static_cast<char>(ch);
    } else if (ch < 0x20 || ch >= 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out + "'";
}

}  // namespace strata::fuzz
