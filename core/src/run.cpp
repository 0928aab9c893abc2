#include "run.hpp"

#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <optional>
#include <tuple>

#include <ATen/Context.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <c10/util/Logging.h>
#include <fmt/format.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include "config/experiment.hpp"
#include "comm/job_monitor.hpp"
#include "comm/process_group.hpp"
#include "device/host_memory.hpp"
#include "device/named_devices.hpp"
#include "device/cpu_float.hpp"
#include "estimate/fit_experiment.hpp"
#include "launch/child.hpp"
#include "launch/device_choice.hpp"
#include "launch/env_checks.hpp"
#include "train/run_checks.hpp"
#include "launch/run_place.hpp"
#include "launch/spawn.hpp"
#include "job/world.hpp"
#include "io/run_dir.hpp"
#include "plugin_loader.hpp"
#include "prepare.hpp"
#include "strata/dataset.hpp"
#include "strata/errors.hpp"
#include "strata/logger.hpp"
#include "strata/model.hpp"
#include "strata/strategy.hpp"
#include "text/errors_text.hpp"
#include "text/suggest.hpp"
#include "text/units.hpp"
#include "train/saved_model.hpp"
#include "train/checkpointer.hpp"
#include "train/device_memory.hpp"
#include "train/tensor_memory.hpp"
#include "train/rank_run.hpp"
#include "train/trainer.hpp"

namespace strata {

namespace fs = std::filesystem;

namespace {

/// How a process settles a run (settle()): a rank of the job, or strata's launcher before it
/// starts the ranks.
struct Settling {
  Purpose purpose = Purpose::kRun;  ///< kValidate: the launcher (the ranks build their own)
  bool places = true;               ///< it plans the place (a node of rank-0-elsewhere without --out does not)
  bool share = false;               ///< a node whose rank 0 runs elsewhere: it only creates the directory
  bool opens = true;                ///< it will open the run directory (takes its lock while planning)
  /// The whole resumed checkpoint is read against its checksums: where no rank waits meanwhile.
  bool verify_data = false;
};

/// What a process has settled before anything is written: where the run lives (when it places
/// it) and what a rank needs; `run` is null when the resumed checkpoint left nothing to train.
struct Settled {
  std::optional<RunPlace> place;
  std::unique_ptr<RankRun> run;
};

/// The run's place and what it builds, decided once for a rank and for the launcher: plans the
/// place (plan_run_place), prepares, then makes every check a resume can fail (the checkpoint
/// against the model, strategy and data; the checkpoint's space; a finished run), writing
/// nothing: a refused run leaves an existing run directory as it was. open_run_place() follows,
/// where each caller opens.
Settled settle(const RunRequest& request, Experiment experiment, const WorldInfo& world, const Settling& how) {
  Settled s;
  if (how.places) s.place = plan_run_place(request, experiment, how.share, how.opens);
  const bool resuming = s.place && s.place->resume;
  s.run = prepare(std::move(experiment), world, how.purpose, resuming);
  if (!s.place) return s;
  const RankRun& p = *s.run;
  if (resuming) {
    const DataSpec data = p.dataset->spec();
    ResumeSubject subject{p.model.get(), p.strategy.get(), &data};
    subject.verify_data = how.verify_data;
    check_resume(p.experiment, *s.place->resume, subject);
  }
  if (world.rank == 0) check_checkpoint_space(p, *s.place);
  if (nothing_left(*s.place, p.experiment, world.rank)) s.run.reset();
  return s;
}
}  // namespace

void check_experiment(const Experiment& experiment) {
  WorldInfo world;
  world.world_size = world.local_world_size = static_cast<int>(experiment.distributed.nproc);
  prepare(experiment, world, Purpose::kValidate);
}

void load_registry(Registry& registry, const Experiment* experiment) { load_plugins(registry, experiment); }

/// The run directories go under out_dir: its nearest existing ancestor must be a directory this
/// process can write in (`run` creates the rest).
void check_out_dir_writable(const Experiment& e) {
  std::error_code ec;
  fs::path dir = fs::absolute(e.experiment.out_dir, ec).lexically_normal();
  while (!dir.empty() && !fs::exists(dir, ec) && dir != dir.parent_path()) dir = dir.parent_path();
  const bool usable = fs::is_directory(dir, ec) && ::access(dir.c_str(), W_OK | X_OK) == 0;
  if (!usable)
    throw e.error("experiment.out_dir",
                  fmt::format("run directories cannot be created under out_dir \"{}\": {} is {}.",
                              detail::shown(e.experiment.out_dir, 200), detail::shown(dir.string(), 200),
                              fs::is_directory(dir, ec) ? "not writable" : "not a directory"),
                  "Choose a writable out_dir (or pass --out DIR to `strata run`).");
}

void validate_experiment(const RunRequest& request) {
  if (!request.device_name.empty()) require_named_device(request.device_name);  // before any work
  WorldInfo world = world_from_environment().value_or(WorldInfo{});
  auto experiment = load_experiment(request.file, request.overrides);
  check_out_dir_writable(experiment);
  if (world.launcher == "none") world.world_size = world.local_world_size = static_cast<int>(experiment.distributed.nproc);
  auto p = prepare(std::move(experiment), world, Purpose::kValidate, /*resuming=*/false, request.device_name);
  const auto& e = p->experiment;
  const std::string parameters =
      p->model ? std::to_string(p->model->parameter_count()) + " parameters"
               : fmt::format("about {:.4g} parameters (estimated, {} as float32; only run builds it)",
                             *p->estimated_parameters, gib(*p->estimated_parameters * kFloat32Bytes));
  std::cout << fmt::format("{}: ok (model {} with {}, dataset {}, strategy {}, {} steps, world {} on {})\n",
                           detail::shown(request.file.string(), 200), e.model.name, parameters, e.dataset.name,
                           e.strategy.name, e.train.steps, world.world_size, p->device.str());
  if (!p->memory_fit.empty()) std::cout << p->memory_fit << "\n";
  if (!p->memory_warning.empty()) std::cerr << "warning: " << p->memory_warning << "\n";
  if (!p->device_note.empty()) std::cout << "note: " << p->device_note << "\n";
}

namespace {

/// One rank of a job: joins the process group, agrees on the run directory, trains.
/// c10d logs each broken socket of a lost peer as a warning with C++ frames; Strata reports the
/// failure itself, as one paragraph. TORCH_CPP_LOG_LEVEL, when set, wins.
void quiet_torch_logging() {
  ::setenv("TORCH_CPP_LOG_LEVEL", "ERROR", /*overwrite=*/0);
  c10::initLogging();
}

void run_rank(const RunRequest& request, Experiment experiment, WorldInfo world) {
  // `ps`, `top` and /proc/PID/comm name the rank (a forked rank's /proc/PID/environ is its
  // launcher's); the threads it starts inherit the name.
  if (world.world_size > 1) {
    std::string name = fmt::format("strata rank {}", world.rank);
    if (name.size() > 15) name = fmt::format("strata r{}", world.rank);  // the kernel keeps 15 bytes
    ::prctl(PR_SET_NAME, name.c_str());
  }
  quiet_torch_logging();
  keep_flight_record();  // setenv: before the monitor's threads start
  tensor_memory::install();  // before the model exists: every tensor of training is counted
  const auto& d = experiment.distributed;
  JobMonitorOptions watch;
  watch.rank = world.rank;
  watch.world_size = world.world_size;
  watch.heartbeat = std::chrono::milliseconds(static_cast<std::int64_t>(d.heartbeat_s * 1000));
  // By default half the collective timeout, so that the verdict comes before c10d aborts; a job of one
  // rank has no collective to beat and waits the whole timeout.
  const double hang_s = d.hang_timeout_s > 0 ? d.hang_timeout_s : world.world_size == 1 ? d.timeout_s : d.timeout_s / 2;
  watch.hang = std::chrono::milliseconds(static_cast<std::int64_t>(hang_s * 1000));
  JobMonitor monitor(watch);  // from here SIGINT/SIGTERM stop the run at a step boundary
  // Where the run lives and what it resumes is decided first, and every check a resume can fail
  // runs before the run directory is opened: a refused resume leaves it as it was. The whole
  // checkpoint is read against its checksums where nobody waits for this process: in a job of one
  // rank (strata's launcher verifies for its ranks). Under torchrun, srun or mpirun the other
  // ranks wait at the rendezvous meanwhile, so there damage is found as each rank loads.
  Settling how;
  how.opens = world.rank == 0;
  how.verify_data = world.launcher == "none";
  auto [planned, p] = settle(request, std::move(experiment), world, how);
  if (!p) return;
  RunPlace place = std::move(*planned);
  const auto& e = p->experiment;
  // This rank's GPU is the current device for the whole run: raw allocations and streams that
  // take the current device (Gloo on CUDA tensors sets none itself) land on it.
  if (p->device.is_cuda()) c10::impl::getDeviceGuardImpl(p->device.type())->setDevice(p->device);
  std::string backend = "none";
  std::shared_ptr<JobStore> store;
  // A named backend, or forced collectives, runs a real process group even on one rank (a
  // one-GPU NCCL check, say).
  if (world.world_size > 1 || e.distributed.backend != "auto" || e.distributed.force_collectives) {
    backend = resolve_backend(e, p->device);
    if (world.launcher == "none") world.master_port = free_port(world.master_addr);
    ProcessGroupOptions options;
    options.world = world;
    options.backend = backend;
    options.device = p->device;
    options.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(e.distributed.timeout_s * 1000));
    options.force_collectives = e.distributed.force_collectives;
    // c10d bounds the store's rendezvous by the timeout but not Gloo's connection retries (a
    // peer listening where this rank cannot reach it held rank 0 for 150 s with a 30 s timeout).
    monitor.set_deadline(options.timeout + std::chrono::seconds(5),
                         fmt::format("rank {} of {} did not connect to its peers within [distributed] timeout_s = {:g} "
                                     "s (the store at {}:{})",
                                     world.rank, world.world_size, e.distributed.timeout_s, world.master_addr,
                                     world.master_port),
                         "start every rank, and check that the ranks reach one another: MASTER_ADDR must be rank 0's "
                         "address as the other hosts see it, and where hosts share another network set "
                         "GLOO_SOCKET_IFNAME (and NCCL_SOCKET_IFNAME) to its interface");
    auto group = make_process_group_comm(options);
    // Rank 0 opens the run directory (naming a new one by the UTC time) and tells the others,
    // with the checkpoint it resumes.
    if (world.rank == 0) {
      place = open_run_place(std::move(place), e);
      group->store_set("run_dir", place.run_dir.string());
      group->store_set("resume", place.resume ? place.resume->string() : std::string());
    } else {
      place.run_dir = group->store_get("run_dir");
      place.opened = true;
      place.resume.reset();
      if (const auto r = group->store_get("resume"); !r.empty()) place.resume = fs::path(r);
    }
    if (watch.heartbeat.count() > 0 && world.world_size > 1) store = group->connect_store(watch.heartbeat);
    monitor.clear_deadline();
    // Rank-0-only work (saves) is waited for through the store, with a deadline of its own.
    const auto save_deadline = std::chrono::milliseconds(static_cast<std::int64_t>(e.distributed.save_timeout_s * 1000));
    p->barrier = [pg = group.get(), save_deadline](const std::string& name) { pg->store_barrier(name, save_deadline); };
    monitor.set_progress_source(group->progress_source());
    p->comm = std::move(group);
  } else {
    place = open_run_place(std::move(place), e);
    p->comm = make_local_comm(p->device);
  }
  p->backend = backend;
  p->place = std::move(place);
  p->monitor = &monitor;
  p->log = Logger(world.rank, world.world_size);
  const fs::path& run_dir = p->place.run_dir;
  monitor.attach(store, run_dir, world.master_addr + ":" + std::to_string(world.master_port));
  // c10d's flight recorder names the collectives that did not complete (the hang watch's report),
  // and its record lands beside the verdict: the monitor's dump when it ends the job, NCCL's
  // watchdog's when a collective times out.
  if (backend != "none") {
    const fs::path trace = backend == "nccl" ? direct_flight_recorder(run_dir, world.rank)
                                             : flight_record_file(run_dir, world.rank);
    monitor.set_flight_recorder([backend] { return collectives_in_flight(backend); },
                                [backend, trace] { dump_flight_recorder(backend, trace); });
  }
  const Logger& log = p->log;
  if (!p->device_note.empty()) log.info("note: " + p->device_note);
  // strata's launcher said the fit check's warning before it started the ranks.
  if (world.rank == 0 && world.launcher != "strata" && !p->memory_warning.empty()) log.warn(p->memory_warning);
  if (world.rank == 0)
    for (const auto& w : environment_warnings(process_environment(), backend == "nccl", p->device.is_cuda()))
      log.warn(w);
  if (e.train.deterministic) log.info("deterministic kernels ([train] deterministic = true)");
  if (e.distributed.force_collectives)
    log.info(fmt::format("forced collectives: every collective is issued over {}, even at world size {} "
                         "([distributed] force_collectives = true)",
                         backend, world.world_size));
  if (world.launcher != "none" && world.launcher != "strata" && e.distributed.nproc != 1 &&
      e.distributed.nproc != world.local_world_size)
    log.info(fmt::format("note: [distributed] nproc = {} is not used: {} started this job ({})", e.distributed.nproc,
                         world.launcher, world.source));
  if (request.resume == "auto" && !p->place.resume)
    log.info("--resume auto: no checkpoint in " + checkpoint_root(e, run_dir).string() + " yet; starting at step 0");
  if (world.rank == 0) write_text_file(run_dir / "config.toml", resolved_toml(e));
  try {
    train(*p);
  } catch (const Interrupted&) {
    throw;
  } catch (const std::exception& error) {
    // A collective that failed because the peers stopped on the same signal is an interruption.
    if (const int sig = monitor.stop_signal()) throw Interrupted(sig, "(" + detail::exception_text(error) + ")");
    throw;
  }
  monitor.finished();
  // Nobody tears the group down while a peer still needs it, nor while rank 0 still writes the
  // final model: through the store, so a long final save never races the collective timeout.
  p->barrier("end");
}

/// `--nproc N` against the ranks a launcher started on this host.
void check_nproc_agrees(const RunRequest& request, int launcher_nproc, const std::string& launcher,
                        const std::string& source) {
  if (request.nproc <= 0 || request.nproc == launcher_nproc) return;
  throw UsageError(fmt::format("`--nproc {}` conflicts with the launcher: {} starts {} rank(s) on this host ({}).",
                               request.nproc, launcher, launcher_nproc, source),
                   "Drop --nproc: the launcher starts the ranks (torchrun --nproc-per-node, srun -n or "
                   "--ntasks-per-node, mpirun -np, a PyTorchJob's nprocPerNode); or pass --standalone to ignore the "
                   "launcher's variables and start the ranks here.");
}

}  // namespace

int run_experiment(const RunRequest& request) {
  const auto env = process_environment();
  // --standalone: as torchrun's, a job of this host only, whatever the environment says.
  const auto node = request.standalone ? std::nullopt : node_launch_from_environment(env);
  const auto launched = request.standalone ? std::nullopt : world_from_environment(env);
  const auto allocation = request.standalone ? std::nullopt : slurm_allocation(env);
  auto e = load_experiment(request.file, request.overrides);
  if (launched) {
    check_nproc_agrees(request, launched->local_world_size, launched->launcher, launched->source);
    run_rank(request, std::move(e), *launched);
    return 0;
  }
  if (allocation && request.nproc > 1) {
    const std::string tasks = allocation->ntasks > 0 ? fmt::format("SLURM_NTASKS={}", allocation->ntasks)
                                                     : std::string("SLURM_NTASKS unset");
    throw UsageError(fmt::format("`--nproc {}` inside {} ({}): this process is not one of the job's tasks, and ranks it "
                                 "started would bypass Slurm's placement.",
                                 request.nproc, allocation->where, tasks),
                     "Start the ranks with srun: `srun strata run " + request.file.string() +
                         "` (one rank per task); or pass --standalone to start the ranks on this node anyway.");
  }
  // Not started by a launcher: validate once here and spawn the ranks (also one, when failed ranks
  // are to be restarted).
  SpawnOptions spawn;
  int nproc = static_cast<int>(e.distributed.nproc);
  if (node) {
    nproc = node->nproc_per_node > 0 ? node->nproc_per_node
                                     : std::max(1, static_cast<int>(torch::cuda::device_count()));
    check_nproc_agrees(request, nproc, "the PyTorchJob", node->source);
    spawn.nnodes = node->nnodes;
    spawn.node_rank = node->node_rank;
    spawn.master_addr = node->master_addr;
    spawn.master_port = node->master_port;
    if (node->nnodes > 1 && e.distributed.max_restarts > 0)
      throw e.error("distributed.max_restarts",
                    "strata's launcher restarts the ranks of one node; a job of several nodes restarts as a whole.",
                    "Set max_restarts = 0 and let the PyTorchJob's restartPolicy (or torchrun --max-restarts) restart it.");
  }
  WorldInfo world;
  world.world_size = nproc * spawn.nnodes;
  world.local_world_size = nproc;
  check_job_secret();  // a secret the ranks would refuse is named once, before anything is written
  // A job of one rank runs in a fork of this process (no second start of the program), supervised
  // as the ranks of larger jobs are: a crash, an exit mid-run or a kill still leaves a verdict. The
  // child carries on here as the rank; where no fork is possible, the rank is spawned below.
  if (!node && nproc == 1 && e.distributed.max_restarts == 0) {
    SpawnOptions one;
    int local_rank = 0;
    if (const int code = fork_and_supervise(one, local_rank); code != kForkUnavailable) {
      if (code != kForkChild) {
        // This process only supervised: nothing of its own to tear down (its libraries' static
        // destructors alone took 0.2 s).
        std::fflush(nullptr);
        std::_Exit(code);
      }
      run_rank(request, std::move(e), world);
      return 0;
    }
  }
  // The node of rank 0 names and claims the run directory, for its ranks too (kRunClaimVariable:
  // its rank 0 finds the launcher's claim its own); the ranks of other nodes take rank 0's.
  // Every configuration error, and every check a resume can fail, surfaces once, before the run
  // directory is opened and before any rank starts.
  Settling how;
  how.purpose = Purpose::kValidate;
  how.places = spawn.node_rank == 0 || !request.out.empty();
  how.share = spawn.node_rank != 0;
  how.verify_data = spawn.node_rank == 0;
  auto [place, prepared] = settle(request, e, world, how);
  if (!prepared) return 0;
  if (!prepared->memory_warning.empty()) std::cerr << "warning: " << prepared->memory_warning << "\n";
  const bool on_cpu = prepared->device.is_cpu();
  prepared.reset();  // the ranks build their own: no copy of the model stays here while they train
  std::vector<std::string> common = {"run", request.file.string()};
  std::optional<fs::path> checkpoint;
  if (place) {
    place = open_run_place(std::move(*place), e);
    checkpoint = place->resume;
    spawn.env.emplace_back(kRunClaimVariable, run_claim());
    common.insert(common.end(), {"--out", place->run_dir.string()});
    if (spawn.node_rank == 0) spawn.run_dir = place->run_dir;
  }
  spawn.nproc = nproc;
  spawn.max_restarts = static_cast<int>(e.distributed.max_restarts);
  spawn.beacons = true;
  for (const auto& o : request.overrides) common.insert(common.end(), {"--set", o});
  spawn.args = common;
  // What the ranks resume: the checkpoint this process resolved, unless the ranks are to find it.
  const std::string rank_resume =
      request.resume.empty() || request.resume == "auto" || !checkpoint ? request.resume : checkpoint->string();
  if (!request.resume.empty()) spawn.args.insert(spawn.args.end(), {"--resume", rank_resume});
  // A restart continues from the run's latest checkpoint, or from the one this run started from.
  spawn.restart_args = common;
  spawn.restart_args.insert(spawn.restart_args.end(), {"--resume", "auto"});
  if (checkpoint && request.resume != "auto") spawn.env.emplace_back("STRATA_RESUME_FALLBACK", checkpoint->string());
  // CPU ranks of one thread each (the usual case of several ranks on a host's cores) run in forks
  // of this process, which has read and checked everything they need: no second start of the
  // program per rank. A rank of several threads is started afresh, with OMP_WAIT_POLICY=PASSIVE
  // (its OpenMP runtime must read it at load), as is any rank where LibTorch's CUDA library is
  // loaded (CUDA, once initialized, does not survive a fork: a CPU rank's seeding would touch it).
  if (on_cpu && nproc > 1 && cpu_threads_per_rank(e, nproc) == 1 && may_fork_in_image("STRATA_FORK_RANKS")) {
    int local_rank = 0;
    if (const int code = fork_and_supervise(spawn, local_rank); code != kForkUnavailable) {
      if (code != kForkChild) {
        std::fflush(nullptr);
        std::_Exit(code);
      }
      RunRequest rank_request = request;  // what an exec'd rank's command line says
      if (place) rank_request.out = place->run_dir;
      rank_request.resume = rank_resume;
      const auto world_of_rank = world_from_environment(process_environment());
      if (!world_of_rank) throw Error("a forked rank found no RANK and WORLD_SIZE in its environment");
      run_rank(rank_request, std::move(e), *world_of_rank);
      return 0;
    }
  }
  return spawn_and_supervise(spawn);
}

}  // namespace strata
