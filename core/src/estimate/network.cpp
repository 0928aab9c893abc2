#include "estimate/network.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <toml++/toml.h>

#include "config/checks.hpp"
#include "strata/errors.hpp"
#include "text/suggest.hpp"
#include "strata/json.hpp"

namespace strata::estimate {

namespace {

/// A ring's latency-bound steps.
double ring_steps(Collective c, int n) {
  if (n <= 1) return 0.0;
  return c == Collective::kAllReduce ? 2.0 * (n - 1) : c == Collective::kBroadcast ? 1.0 : n - 1.0;
}

double level_seconds(const Link& link, Collective c, double bytes, int n) {
  if (n <= 1 || bytes <= 0) return 0.0;
  const double bw = link.bandwidth_gbps * 1e9;
  return link.latency_us * 1e-6 * ring_steps(c, n) + (bw > 0 ? bytes * bus_factor(c, n) / bw : 0.0);
}

}  // namespace

double BusbwTable::busbw_gbps(double bytes) const {
  if (points.empty()) return 0.0;
  if (bytes <= points.front().first) return points.front().second;
  if (bytes >= points.back().first) return points.back().second;
  const auto hi = std::lower_bound(points.begin(), points.end(), bytes,
                                   [](const auto& p, double b) { return p.first < b; });
  const auto lo = hi - 1;
  const double t = (std::log(bytes) - std::log(lo->first)) / (std::log(hi->first) - std::log(lo->first));
  return lo->second + t * (hi->second - lo->second);
}

double Network::intra_seconds(Collective c, double bytes, int n) const {
  if (n <= 1 || bytes <= 0) return 0.0;
  // The table measured at the world size nearest to n (the larger of two as near).
  const std::map<Collective, BusbwTable>* tables = nullptr;
  int nearest = 0;
  for (const auto& [ranks, t] : measured)
    if (tables == nullptr || std::abs(ranks - n) <= std::abs(nearest - n)) tables = &t, nearest = ranks;
  if (tables == nullptr) return level_seconds(intra, c, bytes, n);
  auto it = tables->find(c);
  if (it == tables->end() && c != Collective::kAllReduce) it = tables->find(Collective::kAllReduce);
  if (it != tables->end()) {
    const double busbw = it->second.busbw_gbps(bytes);
    if (busbw > 0) return bytes * bus_factor(c, n) / (busbw * 1e9);
  }
  return level_seconds(intra, c, bytes, n);
}

double Network::inter_seconds(Collective c, double bytes, int nodes) const {
  return level_seconds(inter, c, bytes, nodes);
}

double Network::seconds(Collective c, double bytes, int n, int per_node) const {
  if (n <= 1 || bytes <= 0) return 0.0;
  if (gpus_per_node <= 0) return intra_seconds(c, bytes, n);
  const int g = per_node > 0 ? std::min(per_node, gpus_per_node) : gpus_per_node;
  if (per_node <= 0 && n <= g) return intra_seconds(c, bytes, n);
  if (g >= n) return intra_seconds(c, bytes, n);
  if (g <= 1) return inter_seconds(c, bytes, n);
  const int nodes = (n + g - 1) / g;
  const double share = bytes / g;  // what each node's rank owns after the intra-node stage
  switch (c) {
    case Collective::kAllReduce:
      return intra_seconds(Collective::kReduceScatter, bytes, g) + inter_seconds(Collective::kAllReduce, share, nodes) +
             intra_seconds(Collective::kAllGather, bytes, g);
    case Collective::kReduceScatter:
      return intra_seconds(Collective::kReduceScatter, bytes, g) + inter_seconds(Collective::kReduceScatter, share, nodes);
    case Collective::kAllGather:
      return inter_seconds(Collective::kAllGather, share, nodes) + intra_seconds(Collective::kAllGather, bytes, g);
    case Collective::kBroadcast:
      return inter_seconds(Collective::kBroadcast, bytes, nodes) + intra_seconds(Collective::kBroadcast, bytes, g);
    case Collective::kAllToAll:
      // Of the S bytes a rank sends, S (g-1)/n stay in its node and S (n-g)/n cross: the intra
      // stage an all-to-all of S g/n over g ranks, the inter one of S over the nodes, in turn.
      return intra_seconds(Collective::kAllToAll, bytes * g / n, g) + inter_seconds(Collective::kAllToAll, bytes, nodes);
  }
  return 0.0;
}

namespace {

/// "measured by `strata bench comms` (gloo cpu, 2, 3 ranks): ..." for a network of bench tables.
std::string measured_description(const Network& net) {
  std::vector<int> ranks;
  for (const auto& [n, tables] : net.measured) ranks.push_back(n);
  return fmt::format("measured by `strata bench comms` ({}, {} ranks): bus bandwidth by collective and size, every rank "
                     "on one host",
                     net.measured_with, fmt::join(ranks, ", "));
}

[[noreturn]] void bad_network(const std::string& source, const std::string& what) {
  throw UsageError(
      fmt::format("network description {}: {}", source, what),
      "Give the JSON `strata bench comms --json FILE` writes, or a TOML cluster spec with [cluster] gpus_per_node, "
      "intra_node_gbps, intra_node_latency_us, inter_node_gbps and inter_node_latency_us (see "
      "examples/clusters/8xh100_nvlink_ib400.toml).");
}

}  // namespace

Network network_from_bench_json(const std::string& text, const std::string& source) {
  Json j;
  try {
    j = Json::parse(text);
  } catch (const std::exception& e) {
    bad_network(source, std::string("not valid JSON: ") + e.what());
  }
  const Json* rows = j.find("rows");
  if (rows == nullptr || rows->elements() == nullptr || rows->elements()->empty())
    bad_network(source, "no `rows` (the measurements of `strata bench comms --json`).");
  Network net;
  net.name = "bench comms " + source;
  net.gpus_per_node = 0;  // one host: every rank on one level
  const Json* world = j.find("world_size");
  const int ranks = world != nullptr ? static_cast<int>(world->number_or(0)) : 0;
  auto& measured = net.measured[ranks];
  for (const Json& row : *rows->elements()) {
    const std::string name = row.find("collective") ? row.find("collective")->string_or("") : "";
    const double size = row.find("size_bytes") ? row.find("size_bytes")->number_or(0) : 0;
    const double busbw = row.find("busbw_gbps") ? row.find("busbw_gbps")->number_or(0) : 0;
    Collective c;
    if (name == "all_reduce") c = Collective::kAllReduce;
    else if (name == "reduce_scatter") c = Collective::kReduceScatter;
    else if (name == "all_gather") c = Collective::kAllGather;
    else if (name == "broadcast") c = Collective::kBroadcast;
    else if (name == "all_to_all") c = Collective::kAllToAll;
    else bad_network(source, fmt::format("a row names collective '{}'.", name));
    if (!(size > 0) || !(busbw > 0) || !std::isfinite(busbw)) continue;  // one rank or an empty size: nothing to learn
    measured[c].points.emplace_back(size, busbw);
  }
  if (measured.empty())
    bad_network(source, "no row with a positive size and bus bandwidth (a benchmark at world size 1 measures none).");
  for (auto& [c, table] : measured) std::sort(table.points.begin(), table.points.end());
  const Json* backend = j.find("backend");
  const Json* device = j.find("device");
  net.measured_with = fmt::format("{} {}", backend ? backend->string_or("?") : "?", device ? device->string_or("?") : "?");
  const std::string on = device ? device->string_or("") : "";
  net.device_kind = on.rfind("cuda", 0) == 0 ? "gpu" : on == "cpu" ? "cpu" : "";
  net.description = measured_description(net);
  // The intra level's figures for a collective the table lacks come from all_reduce's table.
  return net;
}

Network network_from_toml(const std::string& text, const std::string& source) {
  toml::table t;
  detail::check_key_depth(text, source);
  try {
    t = toml::parse(text, source);
  } catch (const toml::parse_error& e) {
    bad_network(source, fmt::format("line {}: {}", e.source().begin.line, detail::shown(std::string(e.description()), 400)));
  }
  const auto* cluster = t["cluster"].as_table();
  if (cluster == nullptr) bad_network(source, "no [cluster] table.");
  const std::vector<std::string> known{"name",           "description",           "source",
                                       "gpus_per_node",  "intra_node_gbps",       "intra_node_latency_us",
                                       "inter_node_gbps", "inter_node_latency_us", "device"};
  for (const auto& [key, value] : *cluster)
    if (std::find(known.begin(), known.end(), std::string(key.str())) == known.end())
      bad_network(source, fmt::format("unknown key '{}' in [cluster] (known: gpus_per_node, intra_node_gbps, "
                                      "intra_node_latency_us, inter_node_gbps, inter_node_latency_us, device, name, source).",
                                      key.str()));
  auto number = [&](const char* key, bool required) -> double {
    const auto node = (*cluster)[key];
    if (!node) {
      if (required) bad_network(source, fmt::format("[cluster] {} is missing.", key));
      return 0.0;
    }
    const auto v = node.value<double>();
    if (!v || !(*v >= 0) || !std::isfinite(*v)) bad_network(source, fmt::format("[cluster] {} must be a number >= 0.", key));
    return *v;
  };
  Network net;
  net.name = (*cluster)["name"].value_or(std::string("cluster spec")) + " (" + source + ")";
  net.device_kind = (*cluster)["device"].value_or(std::string("gpu"));
  if (net.device_kind != "gpu" && net.device_kind != "cpu")
    bad_network(source, fmt::format("[cluster] device = \"{}\": the devices it links are \"gpu\" or \"cpu\".",
                                    detail::shown(net.device_kind)));
  const double g = number("gpus_per_node", true);
  if (g < 1 || g != std::floor(g)) bad_network(source, "[cluster] gpus_per_node must be a whole number >= 1.");
  net.gpus_per_node = static_cast<int>(g);
  net.intra = {number("intra_node_gbps", true), number("intra_node_latency_us", false)};
  net.inter = {number("inter_node_gbps", false), number("inter_node_latency_us", false)};
  if (net.intra.bandwidth_gbps <= 0) bad_network(source, "[cluster] intra_node_gbps must be > 0.");
  net.description = (*cluster)["source"].value_or(std::string());
  if (net.description.empty())
    net.description = fmt::format("{} GPUs per node, {} GB/s {} us inside a node, {} GB/s {} us between nodes",
                                  net.gpus_per_node, net.intra.bandwidth_gbps, net.intra.latency_us,
                                  net.inter.bandwidth_gbps, net.inter.latency_us);
  return net;
}

Network load_network(const std::filesystem::path& file) {
  std::ifstream in(file, std::ios::binary);
  if (!in) bad_network(file.string(), "cannot be read (no such file, or no permission).");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') return network_from_bench_json(text, file.string());
  return network_from_toml(text, file.string());
}

Network load_network(const std::vector<std::filesystem::path>& files) {
  if (files.size() == 1) return load_network(files.front());
  Network net;
  std::vector<std::string> names;
  for (const auto& file : files) {
    Network one = load_network(file);
    if (one.measured.empty())
      bad_network(file.string(), "a cluster spec describes the whole network: give it alone, not with other files.");
    for (auto& [ranks, tables] : one.measured) {
      if (net.measured.count(ranks))
        bad_network(file.string(), fmt::format("a second table measured at {} ranks: give one per world size.", ranks));
      net.measured[ranks] = std::move(tables);
    }
    if (names.empty()) net.measured_with = one.measured_with, net.device_kind = one.device_kind;
    names.push_back(file.string());
  }
  net.gpus_per_node = 0;
  net.name = fmt::format("bench comms {}", fmt::join(names, ", "));
  net.description = measured_description(net);
  return net;
}

}  // namespace strata::estimate
