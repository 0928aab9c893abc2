#pragma once
// How long a collective takes: an alpha-beta model per collective, hierarchical across nodes.
//
// A level (the links inside a node, or between nodes) has a bandwidth and a latency. A
// collective of S bytes over k ranks of one level takes latency x steps + S x factor(k) / busbw,
// with nccl-tests' bus factors (all_reduce 2(k-1)/k, reduce_scatter and all_gather (k-1)/k,
// broadcast 1) and a ring's steps (2(k-1), k-1, k-1, 1). Across nodes (more ranks than GPUs per
// node) a collective is done in stages: all_reduce = reduce_scatter inside each node, all_reduce of
// the node's 1/g share between the nodes, all_gather inside the node; reduce_scatter and all_gather
// likewise with the inter-node stage on S/g.
//
// A measured table (`strata bench comms --json`) replaces the intra-node level's figures: its
// busbw for the collective, interpolated in log(size) between the measured sizes (the nearest end
// beyond them), gives the time S x factor(k) / busbw, latency included (busbw at small sizes is
// latency-bound). Several tables (one `bench comms` run per world size: on a shared host, or
// through a switch, bus bandwidth depends on how many ranks take part) are kept by the world size
// they were measured at, and a collective over k ranks reads the table measured nearest to k.

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "strata/schedule.hpp"

namespace strata::estimate {

/// The collectives and their bus factors are the contract's (strata/schedule.hpp).
using strata::bus_factor;
using strata::Collective;
using strata::collective_name;

struct Link {
  double bandwidth_gbps = 0;  ///< bus bandwidth, GB/s (1e9 bytes per second)
  double latency_us = 0;      ///< per ring step
};

/// Measured bus bandwidth of one collective by size.
struct BusbwTable {
  std::vector<std::pair<double, double>> points;  ///< (size bytes, busbw GB/s), by size
  double busbw_gbps(double bytes) const;
};

struct Network {
  std::string name;          ///< where it came from ("cluster spec FILE", "bench comms FILE", "default ...")
  std::string description;   ///< one line: what it assumes
  int gpus_per_node = 8;     ///< ranks per node; 0: every rank on one node
  Link intra;
  Link inter;
  /// Intra-node, from `bench comms`, by the world size each table was measured at (may be empty).
  std::map<int, std::map<Collective, BusbwTable>> measured;
  std::string measured_with;  ///< what `bench comms` measured with ("gloo cpu"), for the description
  /// The kind of device it links: "cpu" (`bench comms` of CPU tensors), "gpu" (of CUDA tensors, or
  /// a cluster spec: [cluster] device, "gpu" by default); "" for the assumed default network.
  std::string device_kind;

  /// Seconds for collective `c` of `bytes` (S, as nccl-tests counts it) over `n` ranks: consecutive
  /// ranks packed on nodes of gpus_per_node, or `per_node` of the group on each node (1: every rank
  /// on a node of its own, as the replicas of a hybrid-sharded model are).
  double seconds(Collective c, double bytes, int n, int per_node = 0) const;
  /// The same inside one node (n <= gpus_per_node).
  double intra_seconds(Collective c, double bytes, int n) const;
  double inter_seconds(Collective c, double bytes, int nodes) const;
};

/// A network from a file: the JSON `strata bench comms --json FILE` writes, or a TOML cluster
/// spec ([cluster] gpus_per_node, intra_node_gbps, intra_node_latency_us, inter_node_gbps,
/// inter_node_latency_us). Throws ConfigError naming the file and what is wrong.
Network load_network(const std::filesystem::path& file);
/// Several files: `bench comms` JSON files (of different world sizes) merge into one network; a
/// cluster spec stands alone. Throws UsageError for a mix, or two tables of one world size.
Network load_network(const std::vector<std::filesystem::path>& files);
Network network_from_bench_json(const std::string& text, const std::string& source);
Network network_from_toml(const std::string& text, const std::string& source);

}  // namespace strata::estimate
