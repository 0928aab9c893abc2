// The heartbeat (a counter per rank in the job's store; rank 0 watches every rank, the others
// watch rank 0) and the monitor thread (signals, a store that stopped answering). A stuck Gloo
// collective cannot be cancelled, so a verdict the training thread cannot write is written here
// and the process exits: the surviving ranks and the launcher see it end and follow.

#include "comm/job_monitor.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>
#include <cstdio>
#include <cstdlib>

#include <fmt/format.h>

#include "io/raw_stderr.hpp"
#include "text/errors_text.hpp"

namespace strata {
namespace {

using Clock = std::chrono::steady_clock;

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
std::atomic<int> g_pipe_write{-1};
std::atomic<int> g_first_signal{0};
std::atomic<bool> g_monitor_exists{false};

void on_stop_signal(int sig) {
  const int saved = errno;
  int none = 0;
  g_first_signal.compare_exchange_strong(none, sig);
  const auto byte = static_cast<unsigned char>(sig);
  [[maybe_unused]] auto n = ::write(g_pipe_write.load(), &byte, 1);
  errno = saved;
}

struct SignalState {
  int fds[2] = {-1, -1};
  struct sigaction old[std::size(kStopSignals)] {};
};
SignalState g_signals;

double seconds(std::chrono::milliseconds ms) { return static_cast<double>(ms.count()) / 1000.0; }

}  // namespace

JobMonitor::JobMonitor(JobMonitorOptions options) : options_(std::move(options)) {
  if (g_monitor_exists.exchange(true)) throw Error("a JobMonitor already watches this process");
  if (::pipe2(g_signals.fds, O_CLOEXEC | O_NONBLOCK) != 0) {
    g_monitor_exists = false;
    throw Error(std::string("cannot create the rank's signal pipe: ") + std::strerror(errno));
  }
  g_pipe_write = g_signals.fds[1];
  g_first_signal = 0;
  beacon_ = rank_beacon();
  record_crash_library(beacon_);
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i) {
    ::sigaction(kStopSignals[i], nullptr, &g_signals.old[i]);
    if (g_signals.old[i].sa_handler == SIG_IGN) continue;  // `nohup`, `cmd &` in a script: stays ignored
    struct sigaction action {};
    action.sa_handler = on_stop_signal;
    action.sa_flags = SA_RESTART;
    sigemptyset(&action.sa_mask);
    ::sigaction(kStopSignals[i], &action, nullptr);
  }
  monitor_ = std::thread([this] { monitor_loop(); });
}

JobMonitor::~JobMonitor() {
  // This rank's code returned (a failure too ends non-zero): an exit before this is a plugin's.
  if (beacon_ != nullptr) beacon_->done.store(1);
  stopping_threads_ = true;
  wake_.notify_all();
  const unsigned char byte = 0;
  [[maybe_unused]] auto n = ::write(g_signals.fds[1], &byte, 1);
  if (heartbeat_.joinable()) heartbeat_.join();
  if (monitor_.joinable()) monitor_.join();
  for (std::size_t i = 0; i < std::size(kStopSignals); ++i) ::sigaction(kStopSignals[i], &g_signals.old[i], nullptr);
  g_pipe_write = -1;
  ::close(g_signals.fds[0]);
  ::close(g_signals.fds[1]);
  g_monitor_exists = false;
}

void JobMonitor::attach(std::shared_ptr<JobStore> store, std::filesystem::path run_dir, std::string endpoint) {
  run_dir_ = std::move(run_dir);
  if (beacon_ != nullptr) {  // for the launcher's verdict, when it did not open the directory itself
    const std::string dir = run_dir_.string();
    const std::size_t n = std::min(dir.size(), sizeof beacon_->run_dir - 1);
    std::copy_n(dir.data(), n, beacon_->run_dir);
    beacon_->run_dir[n] = '\0';
  }
  endpoint_ = std::move(endpoint);
  store_ = std::move(store);
  if (!store_ || options_.heartbeat.count() <= 0 || options_.world_size < 2) return;
  last_beat_ns_ = now_ns();
  heartbeat_ = std::thread([this] { heartbeat_loop(); });
}

void JobMonitor::set_deadline(std::chrono::milliseconds limit, std::string error, std::string fix) {
  std::lock_guard lock(deadline_mutex_);
  deadline_ = Clock::now() + limit;
  deadline_error_ = std::move(error);
  deadline_fix_ = std::move(fix);
}

void JobMonitor::clear_deadline() {
  std::lock_guard lock(deadline_mutex_);
  deadline_.reset();
}

void JobMonitor::set_progress_source(std::function<JobProgress()> source) {
  std::lock_guard lock(progress_mutex_);
  progress_ = std::move(source);
}

namespace {
/// Runs `work` on a thread of its own and waits at most `limit` for it: whether it returned
/// (without throwing) in time. A call that blocks (a lost store, a held lock) is left behind, and
/// so is the work when no thread can be had.
bool finishes_within(std::chrono::milliseconds limit, std::function<void()> work) noexcept {
  struct State {
    std::mutex mutex;
    std::condition_variable ended;
    bool done = false;
  };
  try {
    auto state = std::make_shared<State>();
    std::thread([state, work = std::move(work)] {
      try {
        work();
      } catch (...) {
        return;
      }
      std::lock_guard lock(state->mutex);
      state->done = true;
      state->ended.notify_all();
    }).detach();
    std::unique_lock lock(state->mutex);
    return state->ended.wait_for(lock, limit, [&] { return state->done; });
  } catch (...) {
    return false;
  }
}
}  // namespace

void JobMonitor::set_flight_recorder(std::function<std::vector<std::string>()> in_flight, std::function<void()> dump) {
  {
    std::lock_guard lock(progress_mutex_);
    in_flight_ = std::move(in_flight);
  }
  std::lock_guard lock(writer_mutex_);
  dump_trace_ = std::move(dump);
}

void JobMonitor::dump_flight_record() {
  // c10d's record of this rank's last collectives, beside the verdict: the job ends before c10d's
  // own timeout would dump it. Once, at most two seconds: the recorder's lock may be held.
  std::lock_guard lock(writer_mutex_);
  if (dump_trace_ && !trace_dumped_) finishes_within(std::chrono::seconds(2), dump_trace_);
  trace_dumped_ = true;
}

void JobMonitor::set_verdict_writer(std::function<void(const FailureRecord&)> writer) {
  std::lock_guard lock(writer_mutex_);
  writer_ = std::move(writer);
}

void JobMonitor::monitor_loop() {
  std::optional<Clock::time_point> stop_deadline, first_signal;
  const auto period = std::chrono::milliseconds(200);
  auto woke = Clock::now();
  std::int64_t own_seen = -1;
  auto own_advanced = Clock::now();
  while (!stopping_threads_) {
    pollfd p{g_signals.fds[0], POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(period.count()));
    // This process itself was paused (SIGSTOP, a suspended VM): the store's silence meanwhile is
    // not the store's; give the heartbeat (and the hang watch) a fresh window.
    if (Clock::now() - woke > period + std::chrono::seconds(1)) {
      if (last_beat_ns_.load() != 0) last_beat_ns_ = now_ns();
      own_advanced = Clock::now();
    }
    woke = Clock::now();
    unsigned char buffer[16];
    int signals = 0;
    for (ssize_t n; (n = ::read(g_signals.fds[0], buffer, sizeof buffer)) > 0;)
      for (ssize_t i = 0; i < n; ++i) signals += buffer[i] != 0 ? 1 : 0;
    if (stopping_threads_) return;
    if (signals > 0) {
      // Ctrl-C reaches every process of the terminal's group and the launcher forwards it too:
      // a repeat within a second is that echo, a later one is a person who does not want to wait.
      const bool again = first_signal && Clock::now() - *first_signal > std::chrono::seconds(1);
      if (!first_signal) first_signal = Clock::now();
      stop_signal_ = g_first_signal.load();
      if (!stop_deadline) stop_deadline = Clock::now() + options_.stop_grace;
      if (again) stop_deadline = Clock::now();
    }
    if (stop_deadline && Clock::now() >= *stop_deadline && !finished_) {
      FailureRecord v{options_.rank, "interrupted",
                      fmt::format("interrupted by {} at step {}; the training thread did not stop within {:.0f} s "
                                  "(it waited for a peer)",
                                  signal_name(stop_signal_), step_.load(), seconds(options_.stop_grace)),
                      std::nullopt, unix_time_now()};
      fatal(v, 128 + stop_signal_, "");
    }
    {
      std::unique_lock lock(deadline_mutex_);
      if (deadline_ && Clock::now() >= *deadline_) {
        FailureRecord v{options_.rank, "failed", deadline_error_, options_.rank, unix_time_now()};
        const std::string fix = deadline_fix_;
        lock.unlock();
        fatal(v, 1, fix);
      }
    }
    if (options_.world_size == 1 && options_.hang.count() > 0) watch_own_hang(own_seen, own_advanced);
    const auto beat = last_beat_ns_.load();
    if (beat != 0 && !finished_ && !failing_ &&
        now_ns() - beat > std::chrono::duration_cast<std::chrono::nanoseconds>(options_.heartbeat).count()) {
      const bool root = options_.rank == 0;
      FailureRecord v{options_.rank, "failed",
                      fmt::format("rank {} lost contact with the job's store at {} (hosted by {}) for {:.1f} s: {}",
                                  options_.rank, endpoint_, root ? "this rank" : "rank 0",
                                  seconds(options_.heartbeat),
                                  root ? "the store stopped answering"
                                       : "rank 0 stopped, died or this host was cut off from it"),
                      root ? std::optional<int>() : std::optional<int>(0), unix_time_now()};
      fatal(v, 1, "check that rank 0's host is up and reachable from this one (MASTER_ADDR/MASTER_PORT), and the "
                  "network between them; raise [distributed] heartbeat_s if ranks pause for longer on purpose");
    }
  }
}

void JobMonitor::heartbeat_loop() {
  const auto period = std::clamp(options_.heartbeat / 5, std::chrono::milliseconds(100), std::chrono::milliseconds(2000));
  const int world = options_.world_size;
  std::vector<std::string> last(static_cast<std::size_t>(world));
  std::vector<Clock::time_point> changed(static_cast<std::size_t>(world), Clock::now());
  const std::string mine = "hb/" + std::to_string(options_.rank);
  // The hang watch: every rank publishes what it has done; rank 0 notes when any rank last
  // advanced, and ends the job when none has for options_.hang while all of them train.
  const bool watch_hangs = options_.hang.count() > 0;
  std::vector<std::string> progress_seen(static_cast<std::size_t>(world));
  std::vector<std::pair<std::int64_t, Clock::time_point>> progress_fresh(static_cast<std::size_t>(world),
                                                                         {-1, Clock::now()});
  auto advanced = Clock::now();
  std::int64_t beats = 0;
  while (!stopping_threads_) {
    try {
      // A beat is a new value, not an add: after a stranger stored a non-number there, the store
      // would drop this connection at the next add.
      store_->set(mine, std::to_string(++beats));
      last_beat_ns_ = now_ns();
      if (watch_hangs) {
        store_->set("pg/" + std::to_string(options_.rank), progress_json(beats).dump(0));
        if (options_.rank == 0) watch_hang(progress_seen, advanced, progress_fresh);
      }
      // Rank 0 watches every rank; the others watch rank 0 (whose store may be hosted elsewhere,
      // by torchrun's agent, and so stay up while rank 0 is stopped). Any change is a sign of
      // life: a stranger's writes can delay this verdict, never cause it.
      for (int r = 0; r < world; ++r) {
        if (r == options_.rank || (options_.rank != 0 && r != 0)) continue;
        const auto value = store_->stored("hb/" + std::to_string(r));
        const auto i = static_cast<std::size_t>(r);
        if (value != last[i]) {
          last[i] = value;
          changed[i] = Clock::now();
        } else if (Clock::now() - changed[i] > options_.heartbeat && !finished_ && !failing_) {
          FailureRecord v{options_.rank, "failed",
                          fmt::format("rank {} sent no heartbeat for {:.1f} s: it stopped, died or was cut off from "
                                      "the job's store at {}",
                                      r, seconds(options_.heartbeat), endpoint_),
                          r, unix_time_now()};
          try {
            store_->set("abort", v.to_json().dump(0));
          } catch (...) {
          }
          fatal(v, 1, "read rank " + std::to_string(r) +
                          "'s output and its host's state (a stopped process, the OOM killer, the network); raise "
                          "[distributed] heartbeat_s if ranks pause for longer on purpose");
        }
      }
      if (options_.rank != 0 && !finished_ && !failing_) {
        if (auto abort = store_->get_if_set("abort")) {  // the job's own only: sealed
          try {
            store_->set("abort_seen/" + std::to_string(options_.rank), "1");
          } catch (...) {
          }
          auto v = FailureRecord::from_json(Json::parse(*abort));
          const bool me = v.cause_rank == options_.rank;  // the detector found this rank behind
          v.error = "rank " + std::to_string(v.rank) + (me ? " found this rank stuck: " : " ended the job: ") + v.error;
          v.rank = options_.rank;
          fatal(v, 1, me ? "find where this rank waits (a plugin blocked in its step, a lock, I/O): the phase, step "
                           "and last collectives above say where it stopped"
                         : v.cause_rank ? "the rank named is the cause; this one only stopped with it"
                                        : "no rank is behind the others: the collective they all wait in does not "
                                          "complete (a link stalled, or the backend hangs); the last collectives "
                                          "above say which");
        }
      }
    } catch (const std::exception&) {
      // The store did not answer: the monitor thread decides once heartbeat_s has passed.
    }
    const auto slept = Clock::now();
    std::unique_lock lock(wake_mutex_);
    wake_.wait_for(lock, period, [this] { return stopping_threads_.load(); });
    if (Clock::now() - slept > period + std::chrono::seconds(1))  // this process was paused
      std::fill(changed.begin(), changed.end(), Clock::now());
  }
}

Json JobMonitor::progress_json(std::int64_t beat) {
  JobProgress progress;
  {
    std::lock_guard lock(progress_mutex_);
    if (progress_) progress = progress_();
  }
  Json j = Json::object();
  const auto advance = progress.issued + step_.load();
  j["advance"] = advance;
  // Stopped since the last beat: what c10d holds as not completed says where (on NCCL the device
  // runs behind the host, so the last collective issued need not be the one that hangs).
  // Read for at most a second: the beat must not wait on the recorder.
  if (advance == last_advance_) {
    std::function<std::vector<std::string>()> source;
    {
      std::lock_guard lock(progress_mutex_);
      source = in_flight_;
    }
    auto pending = std::make_shared<std::vector<std::string>>();
    if (source && finishes_within(std::chrono::seconds(1), [source, pending] { *pending = source(); })) {
      Json list = Json::array();
      for (const auto& c : *pending) list.push_back(Json(c));
      j["in_flight"] = list;
    }
  }
  last_advance_ = advance;
  j["beat"] = beat;
  j["phase"] = phase_.load();
  j["step"] = step_.load();
  Json last = Json::array();
  for (const auto& [comm, op] : progress.last) last.push_back(Json::Array{Json(comm), Json(op)});
  j["last"] = last;
  return j;
}

void JobMonitor::watch_hang(std::vector<std::string>& seen, Clock::time_point& advanced,
                            std::vector<std::pair<std::int64_t, Clock::time_point>>& fresh) {
  // Every rank rewrites its report each beat, so a beat number that has not risen for a few
  // periods is an old report written again (a replay): no evidence of a hang.
  const auto stale = 4 * std::clamp(options_.heartbeat / 5, std::chrono::milliseconds(100), std::chrono::milliseconds(2000));
  bool watched = !finished_ && !failing_;
  std::vector<Json> states;
  for (int r = 0; r < options_.world_size && watched; ++r) {
    const auto value = store_->get_if_set("pg/" + std::to_string(r));
    if (!value) {
      watched = false;
      break;
    }
    Json state = Json::parse(*value);
    auto& [beat, rose] = fresh[static_cast<std::size_t>(r)];
    const Json* number = state.find("beat");
    const auto now_beat = static_cast<std::int64_t>(number != nullptr ? number->number_or(-1) : -1);
    if (now_beat > beat) {
      beat = now_beat;
      rose = Clock::now();
    } else if (Clock::now() - rose > stale) {
      watched = false;
    }
    const std::string phase = state.find("phase") != nullptr ? state.find("phase")->string_or("") : "";
    if (phase != "train" && phase != "eval") watched = false;  // setting up, saving, ending: no hang watch
    const std::string key = state.find("advance") != nullptr ? state.find("advance")->dump(0) : "";
    if (key != seen[static_cast<std::size_t>(r)]) {
      seen[static_cast<std::size_t>(r)] = key;
      advanced = Clock::now();
    }
    states.push_back(std::move(state));
  }
  if (!watched) {
    advanced = Clock::now();
    return;
  }
  if (Clock::now() - advanced <= options_.hang) return;
  // The rank furthest behind (fewest steps and collectives) stopped first: the others went on to
  // the next collective and wait for it there. No one rank behind: the collective itself hangs.
  const auto advance_of = [&](std::size_t r) {
    const Json* a = states[r].find("advance");
    return a != nullptr ? a->number_or(0) : 0.0;
  };
  std::optional<std::size_t> behind;
  for (std::size_t r = 0; r < states.size(); ++r)
    if (!behind || advance_of(r) < advance_of(*behind)) behind = r;
  std::size_t tied = 0;
  for (std::size_t r = 0; r < states.size(); ++r) tied += advance_of(r) == advance_of(*behind) ? 1 : 0;
  if (tied > 1) behind.reset();
  std::string ranks;
  for (std::size_t r = 0; r < states.size(); ++r) {
    const Json& s = states[r];
    std::string last;
    if (const Json* l = s.find("last"); l != nullptr && l->elements() != nullptr)
      for (const auto& pair : *l->elements())
        last += fmt::format("{}{}: {}", last.empty() ? "" : "; ", (*pair.elements())[0].string_or("?"),
                            (*pair.elements())[1].string_or("?"));
    std::string pending;
    if (const Json* p = s.find("in_flight"); p != nullptr && p->elements() != nullptr) {
      for (const auto& c : *p->elements()) pending += (pending.empty() ? "" : "; ") + c.string_or("?");
      if (pending.empty()) pending = "none";
    }
    // note_step() holds the steps done before the one in progress.
    ranks += fmt::format("{}rank {} in {}, step {}, last collectives: {}{}", r == 0 ? "" : ". ", r,
                         s.find("phase")->string_or("?"), static_cast<std::int64_t>(s.find("step")->number_or(0)) + 1,
                         last.empty() ? "none" : last, pending.empty() ? "" : ", not completed: " + pending);
  }
  // The verdict is the job's, found here: this rank names it (a record the launcher keeps as the
  // cause), and waits a moment for the peers to read it, since they lose the store with rank 0.
  // No rank behind the others (all stuck at the same point, in one collective): the hang is the
  // job's, and no rank is blamed, least of all this one, which only found it.
  const std::optional<int> cause = behind ? std::optional<int>(static_cast<int>(*behind)) : std::nullopt;
  FailureRecord v{options_.rank, "failed",
                  fmt::format("{}: every rank is alive, but none has advanced (no step, no collective "
                              "issued) for {:.1f} s{}. {}",
                              kJobHangVerdict, seconds(options_.hang),
                              cause ? fmt::format("; rank {} stopped first (the others issued more)", *cause)
                                    : std::string("; every rank is at the same point (the same steps and collectives "
                                                  "issued): the collective itself does not complete"),
                              ranks),
                  cause, unix_time_now()};
  const auto where_of = [](const Json& s) {
    const Json* phase = s.find("phase");
    const Json* step = s.find("step");
    return std::make_pair(phase != nullptr ? phase->string_or("") : std::string(),
                          step != nullptr ? std::optional<std::int64_t>(static_cast<std::int64_t>(step->number_or(0)) + 1)
                                          : std::nullopt);
  };
  if (cause) {
    std::tie(v.phase, v.step) = where_of(states[static_cast<std::size_t>(*cause)]);
  } else {
    // Where the job is, when every rank is in the same phase at the same step.
    auto where = where_of(states.front());
    for (const auto& s : states)
      if (where_of(s) != where) where = {};
    std::tie(v.phase, v.step) = where;
  }
  // This rank's record first, while its collective still waits: once the peers read the verdict
  // and exit, the collective fails and the record no longer shows it pending.
  dump_flight_record();
  try {
    store_->set("abort", v.to_json().dump(0));
    std::vector<std::string> seen_by;
    for (int r = 1; r < options_.world_size; ++r) seen_by.push_back("abort_seen/" + std::to_string(r));
    const auto until = Clock::now() + std::chrono::seconds(3);
    while (Clock::now() < until && !store_->all_set(seen_by)) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } catch (...) {
  }
  fatal(v, 1, "the ranks disagree on the collectives they issue (a rank skipped or added one: compare the last "
              "collectives above), or a link stalled; raise [distributed] hang_timeout_s if a step legitimately "
              "issues no collective for that long");
}

void JobMonitor::watch_own_hang(std::int64_t& seen, Clock::time_point& advanced) {
  const std::string phase = phase_.load();
  std::int64_t advance = step_.load();
  {
    std::lock_guard lock(progress_mutex_);
    if (progress_) advance += progress_().issued;
  }
  // Only a training step is watched: at world size 1 progress is the step counter alone, so an
  // evaluation (the final one too), setup, a checkpoint or the final save, however long, restarts
  // the clock instead of passing for a hang.
  if (advance != seen || phase != "train" || finished_ || failing_) {
    seen = advance;
    advanced = Clock::now();
    return;
  }
  if (Clock::now() - advanced <= options_.hang) return;
  FailureRecord v{options_.rank, "failed",
                  fmt::format("rank {} stopped advancing: no step finished (and no collective was issued) for {:.1f} "
                              "s, in {} at step {}: the step, or a plugin it calls, hangs",
                              options_.rank, seconds(options_.hang), phase, step_.load() + 1),
                  options_.rank, unix_time_now()};
  note_where(v);
  fatal(v, 1, "find where it waits (a lock, I/O, an endless loop in a plugin: `gdb -p PID -batch -ex 'thread apply "
              "all bt'` while it hangs); raise [distributed] hang_timeout_s if a step legitimately takes longer");
}

void JobMonitor::note_where(FailureRecord& record) const {
  record.phase = phase_.load();
  record.step = record.phase == "setup" ? 0 : step_.load() + 1;
}

bool JobMonitor::publish(const FailureRecord& record) noexcept {
  write_failure_record(run_dir_, record);
  if (!store_) return false;
  // At most a second: the store may be what was lost, and a call to it then blocks on its
  // connection (and on the client's lock, which the heartbeat thread may hold).
  return finishes_within(std::chrono::seconds(1),
                         [store = store_, key = "failure/" + std::to_string(record.rank),
                          value = record.to_json().dump(0)] { store->set(key, value); });
}

std::vector<FailureRecord> JobMonitor::published_records() {
  std::vector<FailureRecord> records;
  if (!store_) return records;
  for (int r = 0; r < options_.world_size; ++r) {
    try {
      if (auto text = store_->get_if_set("failure/" + std::to_string(r)))
        records.push_back(FailureRecord::from_json(Json::parse(*text)));
    } catch (...) {
    }
  }
  return records;
}

FailureRecord JobMonitor::record_failure(const std::exception& error) {
  failing_ = true;
  std::string paragraph = detail::format_error(error);
  if (paragraph.rfind("error: ", 0) == 0) paragraph.erase(0, 7);
  FailureRecord own{options_.rank, "failed", paragraph, options_.rank, unix_time_now()};
  note_where(own);
  const auto* distributed = dynamic_cast<const DistributedError*>(&error);
  if (stop_signal_ != 0 || dynamic_cast<const Interrupted*>(&error) != nullptr) {
    own.status = "interrupted";
    own.cause_rank.reset();
  } else if (distributed != nullptr && distributed->op() != "rendezvous") {
    own.cause_rank.reset();  // a collective failed: a consequence of another rank's end
  }
  const bool reachable = publish(own);
  if (own.status != "failed" || own.cause_rank || !reachable) return own;
  // Whoever caused it recorded it before it exited (its exit is what broke the collective); give
  // a rank that is still writing a moment.
  for (int attempt = 0; attempt < 10; ++attempt) {
    if (auto cause = cause_of(published_records())) {
      FailureRecord verdict = own;
      verdict.cause_rank = cause->cause_rank;
      verdict.phase = cause->phase;
      verdict.step = cause->step;
      verdict.error = cause->rank == *cause->cause_rank
                          ? "rank " + std::to_string(cause->rank) + " failed: " + cause->error
                          : "rank " + std::to_string(cause->rank) + " named rank " + std::to_string(*cause->cause_rank) +
                                ": " + cause->error;
      return verdict;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return own;
}

void JobMonitor::fatal(const FailureRecord& verdict, int code, const std::string& fix) {
  static std::atomic<bool> once{false};
  if (once.exchange(true)) {
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));  // the first caller exits the process
  }
  FailureRecord record = verdict;
  if (record.phase.empty() && record.cause_rank == options_.rank) note_where(record);
  // Local first: the store may be what was lost, and a call to it can block on its connection.
  write_failure_record(run_dir_, record);
  {
    std::lock_guard lock(writer_mutex_);
    try {
      if (writer_) writer_(record);
    } catch (...) {
    }
  }
  // As the logger: a job of one rank has no prefix.
  std::string text = (options_.world_size > 1 ? fmt::format("[rank {}/{}] ", options_.rank, options_.world_size)
                                               : std::string()) +
                     "error: " + record.error + "\n";
  if (!fix.empty()) text += "  fix: " + fix + "\n";
  detail::write_stderr(text.data(), text.size());
  std::fflush(nullptr);
  dump_flight_record();
  // Then the peers, through the store, unless it is the store that is gone.
  if (!(record.cause_rank == 0 && options_.rank != 0)) publish(record);
  std::_Exit(code);
}

}  // namespace strata
