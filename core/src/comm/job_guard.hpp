#pragma once
// Who may steer a job: where its store listens and connects, and the seal of the store messages
// that make ranks act (abort, verdicts, the run directory and resume, barriers, the hang watch).
// c10d's TCPStore admits any process that reaches its port and lets it list, read and write every
// key, so nothing in the store stays secret: a message counts only when it carries
// HMAC-SHA256(the job's secret, its scope, key and value), which only the job's ranks can make.
// Header-only, without c10d: comm/rendezvous.cpp, comm/store.cpp and launch/spawn.cpp use it.

#include <sys/stat.h>

#include <array>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

#include "job/world.hpp"
#include "strata/errors.hpp"

namespace strata::detail {

/// The variable strata's launcher sets for the ranks of one attempt of a job of one node: a value
/// of its own per attempt, part of the seal's scope (empty for a job of several nodes, whose
/// launchers would each draw another).
inline constexpr const char* kAttemptIdVariable = "STRATA_ATTEMPT_ID";

/// Whether `host` names loopback ("localhost", "::1", 127.x.y.z), as comm/backends.cpp tells it.
inline bool loopback_host(const std::string& host) {
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

/// Every rank of the job runs on this host: its store and Gloo listen on loopback, and the ranks
/// reach the store there, whatever MASTER_ADDR says. Known only where the launcher said how many
/// ranks run here (LOCAL_WORLD_SIZE, SLURM_NTASKS_PER_NODE, OMPI_COMM_WORLD_LOCAL_SIZE, strata's
/// own launcher of one node) and that is all of them, or where MASTER_ADDR is loopback (which no
/// other host reaches). A job started by hand with RANK, WORLD_SIZE and a real MASTER_ADDR but no
/// LOCAL_WORLD_SIZE may span hosts: it listens where MASTER_ADDR says.
inline bool one_host(const WorldInfo& w) {
  return w.world_size == 1 ||
         (w.local_world_size == w.world_size && (w.local_world_size_known || loopback_host(w.master_addr)));
}

/// Where this rank reaches the job's store: loopback for a job of one host whose store rank 0
/// hosts, else MASTER_ADDR (torchrun's agent listens where torchrun chose).
inline std::string store_host(const WorldInfo& w) {
  return one_host(w) && !w.agent_store ? std::string("127.0.0.1") : w.master_addr;
}

/// The job's secret: STRATA_JOB_SECRET, else the contents of the file STRATA_JOB_SECRET_FILE
/// (which only its owner may read); empty when neither is set. Messages never show it.
inline std::string read_job_secret() {
  std::string secret, origin = "STRATA_JOB_SECRET";
  if (const char* value = std::getenv("STRATA_JOB_SECRET"); value != nullptr && *value != '\0') {
    secret = value;
  } else if (const char* file = std::getenv("STRATA_JOB_SECRET_FILE"); file != nullptr && *file != '\0') {
    origin = std::string("the file STRATA_JOB_SECRET_FILE=") + file;
    struct stat info {};
    std::ifstream in(file, std::ios::binary);
    if (!in || ::stat(file, &info) != 0) {
      throw UsageError(std::string("cannot read the job's secret from STRATA_JOB_SECRET_FILE=") + file + ": " +
                           std::strerror(errno),
                       "give every rank a file only its user can read (chmod 600) that holds the job's secret, or "
                       "set STRATA_JOB_SECRET");
    }
    if ((info.st_mode & 077) != 0) {
      throw UsageError(std::string("the job's secret in STRATA_JOB_SECRET_FILE=") + file +
                           " is readable by other users (mode " + std::to_string((info.st_mode >> 6) & 7) +
                           std::to_string((info.st_mode >> 3) & 7) + std::to_string(info.st_mode & 7) + ")",
                       std::string("chmod 600 ") + file + ", and make a new secret if others may have read it");
    }
    secret.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    while (!secret.empty() && (secret.back() == '\n' || secret.back() == '\r' || secret.back() == ' '))
      secret.pop_back();
  } else {
    return {};
  }
  if (secret.size() < 16) {
    throw UsageError("the job's secret (" + origin + ") has " + std::to_string(secret.size()) +
                         " characters, too few to keep strangers out of the job",
                     "use at least 16 random characters, the same for every rank, e.g. from `openssl rand -hex 16`");
  }
  return secret;
}

/// SHA-256 (FIPS 180-4) of `data`.
inline std::array<std::uint8_t, 32> sha256(std::string_view data) {
  static constexpr std::uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
      0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
      0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
      0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
      0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
      0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};
  std::uint32_t h[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  auto rotr = [](std::uint32_t x, int n) { return (x >> n) | (x << (32 - n)); };
  // The message, a 1 bit, zeros to 56 mod 64 bytes, and its length in bits (big-endian).
  std::string m(data);
  const std::uint64_t bits = static_cast<std::uint64_t>(data.size()) * 8;
  m.push_back(static_cast<char>(0x80));
  while (m.size() % 64 != 56) m.push_back('\0');
  for (int i = 7; i >= 0; --i) m.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
  for (std::size_t block = 0; block < m.size(); block += 64) {
    std::uint32_t w[64];
    for (int i = 0; i < 16; ++i) {
      const auto* p = reinterpret_cast<const unsigned char*>(m.data() + block + 4 * i);
      w[i] = (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
    }
    for (int i = 16; i < 64; ++i) {
      const std::uint32_t s0 = rotr(w[i - 15], 7) ^ rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const std::uint32_t s1 = rotr(w[i - 2], 17) ^ rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], hh = h[7];
    for (int i = 0; i < 64; ++i) {
      const std::uint32_t t1 = hh + (rotr(e, 6) ^ rotr(e, 11) ^ rotr(e, 25)) + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const std::uint32_t t2 = (rotr(a, 2) ^ rotr(a, 13) ^ rotr(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
      hh = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    h[0] += a, h[1] += b, h[2] += c, h[3] += d, h[4] += e, h[5] += f, h[6] += g, h[7] += hh;
  }
  std::array<std::uint8_t, 32> out{};
  for (int i = 0; i < 32; ++i) out[static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(h[i / 4] >> (24 - 8 * (i % 4)));
  return out;
}

/// HMAC-SHA256 (RFC 2104) of `message` under `key`.
inline std::array<std::uint8_t, 32> hmac_sha256(std::string_view key, std::string_view message) {
  std::string block(64, '\0');
  if (key.size() > 64) {
    const auto digest = sha256(key);
    std::memcpy(block.data(), digest.data(), digest.size());
  } else {
    std::memcpy(block.data(), key.data(), key.size());
  }
  std::string inner(64, '\0'), outer(64, '\0');
  for (std::size_t i = 0; i < 64; ++i) {
    inner[i] = static_cast<char>(block[i] ^ 0x36);
    outer[i] = static_cast<char>(block[i] ^ 0x5c);
  }
  const auto first = sha256(inner.append(message));
  return sha256(outer.append(reinterpret_cast<const char*>(first.data()), first.size()));
}

/// Seals and opens the values of one namespace of the job's store. Without a secret it seals
/// nothing and opens everything (a job started without one, as before).
class JobSeal {
 public:
  /// Length of a seal: '|' and 64 hex digits after the value.
  static constexpr std::size_t kLength = 65;

  JobSeal() = default;
  /// `scope` keeps a message to its job attempt and namespace ("strata/0/kv"): a value recorded in
  /// one does not open in another.
  JobSeal(std::string secret, std::string scope) : secret_(std::move(secret)), scope_(std::move(scope)) {}

  bool active() const noexcept { return !secret_.empty(); }

  std::string seal(const std::string& key, const std::string& value) const {
    return active() ? value + "|" + mac(key, value) : value;
  }
  /// The value of a sealed `stored`; std::nullopt when the job's secret did not seal it for `key`.
  std::optional<std::string> open(const std::string& key, const std::string& stored) const {
    if (!active()) return stored;
    if (stored.size() < kLength || stored[stored.size() - kLength] != '|') return std::nullopt;
    std::string value = stored.substr(0, stored.size() - kLength);
    const std::string expected = mac(key, value);
    unsigned char differ = 0;  // constant time: the comparison leaks nothing of the expected seal
    for (std::size_t i = 0; i < expected.size(); ++i)
      differ |= static_cast<unsigned char>(expected[i] ^ stored[stored.size() - expected.size() + i]);
    if (differ != 0) return std::nullopt;
    return value;
  }

 private:
  std::string mac(const std::string& key, const std::string& value) const {
    std::string message = scope_;
    message.append(1, '\0').append(key).append(1, '\0').append(value);
    static constexpr char digits[] = "0123456789abcdef";
    std::string hex;
    for (auto byte : hmac_sha256(secret_, message)) {
      hex.push_back(digits[byte >> 4]);
      hex.push_back(digits[byte & 15]);
    }
    return hex;
  }

  std::string secret_;
  std::string scope_;
};

}  // namespace strata::detail
