// The text of `strata --help` and `strata <command> --help` (app/help.hpp): the usage, and per
// command its usage lines, what it does, its exit codes and the environment it reads.

#include "help.hpp"

namespace strata::cli {

namespace {
constexpr const char* kUsageText = R"(usage: strata <command> [options]

commands:
  run FILE [--nproc N] [--out DIR] [--set KEY=VALUE]... [--resume PATH|auto] [--max-restarts R]
      [--standalone]                          train the experiment in FILE (N ranks on this host);
                                              --resume continues from a checkpoint (a step_N
                                              directory, or the latest of a run directory; auto:
                                              the latest in --out, if any); --max-restarts restarts
                                              every rank from the latest checkpoint when one fails
  export CHECKPOINT --to FILE                 write the checkpoint's model, consolidated, as FILE:
                                              *.safetensors, *.pt, or a directory (Hugging Face layout)
  validate FILE [--set KEY=VALUE]...          check FILE, its plugins and data without training; for
                                              a sweep file, every combination `compare` would run
  compare SWEEP [--out DIR | --resume DIR] [--set KEY=VALUE]... [--dry-run] [--until-tight REL] [--budget SECONDS] [--estimate]
                                              run every combination of the sweep file SWEEP in
                                              interleaved rounds and write results.csv, results.json,
                                              results.md and report.html (charts and tables in one page)
  plot RUN_DIR... [--out FILE] [--baseline DIR]
                                              report.html (or FILE) from run directories made by
                                              `strata run`: time, speedup, efficiency, memory,
                                              communication, loss; baseline: DIR, else `single`,
                                              else the smallest world size
  estimate FILE [--world-sizes 1,2,4,8] [--network FILE] [--strategies a,b] [--out DIR] [--profile RUN_DIR]
                                              predict every strategy's step time, speedup, memory
                                              per rank and bus bytes at each world size from one
                                              short profiled run and a network description
  check NAME[,NAME...] [--world-sizes 1,2,3] [--models standard|transformers] [--out DIR]
                                              conformance suite of each strategy named on small
                                              CPU models (equivalence with single, memory,
                                              communication, state dict, bad options)
  bench comms [--nproc N] [--backend gloo|nccl] [--device cpu|cuda] [--collective NAME|all]
              [--min-bytes 8] [--max-bytes 64M] [--factor 2] [--iters 20] [--warmup 5]
              [--dtype float32] [--op sum|avg|max] [--csv FILE] [--json FILE] [--timeout-s 300]
                                              bandwidth of all_reduce, all_gather, reduce_scatter,
                                              broadcast and all_to_all by size, as nccl-tests prints it
  bench gemm [-m LIST -n LIST -k LIST] [--dtype float32|tf32|bfloat16|float16] [--device cpu|cuda]
             [--steps N] [--warmup 5] [--threads N] [--csv FILE] [--json FILE]
                                              matmul time and TFLOP/s by shape; records the best
                                              rate as this device's measured peak (for MFU)
  plugins                                     list the plugins found (kind, name, description, library)
  describe NAME                               options of a plugin, a core section (e.g. train), or
                                              compare (the keys of a sweep file)

options:
  -h, --help      this text; `strata <command> --help`: the command's options, exit codes and
                  environment variables
  --version       strata's version and git commit, and the LibTorch, CUDA and NCCL it runs on

exit codes: 0 ok, 1 a run or check failed, 2 configuration or usage error, 128+N ended by signal N

plugins are searched in ../plugins and ../lib/strata/plugins next to this program (build/plugins
in a build tree), in each directory of STRATA_PLUGIN_PATH, and in [plugins] paths of the experiment;
a library that does not load is skipped with a warning, and fails only the commands that need it.
)";

// ---- `strata <command> --help` -------------------------------------------------------------------

constexpr const char* kLauncherEnvironment = R"(  RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE MASTER_ADDR MASTER_PORT
                  torchrun (and strata's own spawner): this process is rank RANK of WORLD_SIZE;
                  rank 0's store at MASTER_ADDR:MASTER_PORT
  TORCHELASTIC_USE_AGENT_STORE
                  True: torchrun's agent hosts the store; every rank connects to it
  TORCHELASTIC_RESTART_COUNT
                  torchrun's restart attempt (recorded as summary.json's restarts)
  SLURM_PROCID SLURM_NTASKS SLURM_LOCALID SLURM_NTASKS_PER_NODE SLURM_TASKS_PER_NODE
                  a task of an srun step (with SLURM_STEP_ID, not the batch or interactive step)
  SLURM_STEP_ID SLURM_JOB_ID SLURM_STEP_NODELIST/SLURM_JOB_NODELIST
                  the step; the store's port derives from SLURM_JOB_ID and its host is the first
                  node of the node list unless MASTER_PORT / MASTER_ADDR say otherwise
  OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE OMPI_COMM_WORLD_LOCAL_RANK OMPI_COMM_WORLD_LOCAL_SIZE
                  a rank of mpirun (MASTER_ADDR needed when the ranks span hosts)
  PET_NNODES PET_NPROC_PER_NODE PET_NODE_RANK
                  a Kubeflow PyTorchJob pod: strata starts PET_NPROC_PER_NODE ranks on this node
  GLOO_SOCKET_IFNAME NCCL_SOCKET_IFNAME
                  the network interface(s) the ranks talk over (Gloo: GLOO_SOCKET_IFNAME, else
                  NCCL_SOCKET_IFNAME's names)
  STRATA_JOB_SECRET STRATA_JOB_SECRET_FILE
                  the job's secret (or a file only its owner can read holding it): the messages
                  that steer the job carry it, so nobody else who reaches its store can; give
                  every rank of a job of several hosts the same fresh one (strata run --nproc N
                  on one host draws its own)
  STRATA_CUDA
                  0: never load LibTorch's CUDA library (kernels, cuBLAS, cuDNN, NCCL); 1: load
                  it even where no NVIDIA GPU shows; unset: load it where the machine shows
                  one (/dev/nvidia0, ...) and CUDA_VISIBLE_DEVICES does not hide them all
)";

constexpr const char* kPluginEnvironment = R"(  STRATA_PLUGIN_PATH
                  more plugin directories or libraries, ':'-separated (an entry that does
                  not exist is skipped with a warning)
)";

constexpr const char* kDataEnvironment = R"(  STRATA_FASHION_MNIST_DIR STRATA_CIFAR10_DIR STRATA_MRPC_DIR STRATA_TEXT_PATH
                  where the datasets' files are when [dataset] path is not set
)";
}  // namespace

const char* usage() { return kUsageText; }

const std::vector<CommandHelp>& command_helps() {
  static const std::string run_env = std::string(kLauncherEnvironment) + kPluginEnvironment + kDataEnvironment +
                                     R"(  STRATA_PROGRESS
                  bar|lines|auto (default auto): redraw one progress line on a terminal, or log a
                  line every [log] every steps
  STRATA_CACHE_DIR
                  where `strata bench gemm` recorded measured peaks, for MFU (default
                  $XDG_CACHE_HOME/strata, else ~/.cache/strata)
  STRATA_FORK_RANKS
                  0: start every rank of --nproc N afresh (exec), as a GPU rank or one of
                  several threads is; unset: CPU ranks of one thread each are forks of the
                  launcher (no second start; not where LibTorch's CUDA library is loaded),
                  named "strata rank R" (/proc/PID/comm)
)";
  static const std::vector<CommandHelp> helps{
      {"run", "strata run FILE [--nproc N] [--out DIR] [--set KEY=VALUE]... [--resume PATH|auto] [--max-restarts R]\n"
              "           [--standalone]",
       "Trains the experiment in FILE. Under a launcher (torchrun, srun, mpirun, a PyTorchJob) this process is one\n"
       "rank of its job; otherwise it runs N ranks on this host (--nproc, else [distributed] nproc) and supervises\n"
       "them. Writes summary.json, config.toml, TensorBoard events and checkpoints into the run directory.",
       "  0       the run finished (summary.json status \"ok\")\n"
       "  1       the run failed: a rank's error, a non-finite loss, a lost peer (summary.json says which)\n"
       "  2       configuration or usage error: nothing was trained\n"
       "  128+N   ended by signal N (130: Ctrl-C, 143: SIGTERM); the run directory keeps what was written",
       run_env},
      {"validate", "strata validate FILE [--nproc N] [--device NAME] [--set KEY=VALUE]...",
       "Checks FILE, its overrides, plugins and data (builds the model and reads the dataset) without training.\n"
       "The memory each rank needs is checked against its device's ([train] fit_check), or with --device NAME\n"
       "against a named device's (h100-80gb, a100-40gb, a100-80gb, h200-141gb, b200-180gb, l4-24gb, ...).\n"
       "A sweep file (a [compare] table) is checked whole: every combination's experiment as `strata compare`\n"
       "builds it (base + [compare.set] + --set + axis values), a line each; --set compare.KEY=VALUE changes the\n"
       "sweep (`strata describe compare`), any other --set every run.",
       "  0       valid\n"
       "  1       an unexpected failure while preparing\n"
       "  2       configuration or usage error (the message names file:line:column and the key)\n"
       "  128+N   ended by signal N",
       std::string(kPluginEnvironment) + kDataEnvironment +
           "  RANK WORLD_SIZE ... (as `strata run --help` lists)\n"
           "                  under a launcher, the world the experiment is checked for\n"},
      {"compare", "strata compare SWEEP [--out DIR | --resume DIR] [--set KEY=VALUE]... [--dry-run]\n"
                  "               [--until-tight REL] [--max-repeats N] [--budget SECONDS] [--estimate [--network FILE]]",
       "Runs every combination of the sweep file SWEEP as a `strata run` of its own below DIR and writes\n"
       "results.csv, results.json, results.md and report.html, and the HPARAMS experiment of TensorBoard.\n"
       "A short warm-up run (discarded) comes first, then `repeats` rounds (default 3): round r of every\n"
       "combination, in a shuffled order (compare.seed), before round r + 1. Timings are steady-state with\n"
       "their spread over the rounds; results whose ranges overlap are \"within noise\", and identical work\n"
       "that differs by more than compare.noise_threshold is warned about. --until-tight REL adds rounds\n"
       "until every range is within REL (up to --max-repeats, within --budget). --estimate then runs\n"
       "`strata estimate` of the sweep (from the baseline's median run when it is on one device) into\n"
       "DIR/estimate and writes accuracy.md and accuracy.csv: each cell's predicted step time and peak memory\n"
       "beside the measured medians, with the error of each, their medians and the worst cases.\n"
       "--set compare.KEY=VALUE changes the sweep (compare.repeats=3, compare.axes.world_size=[1,2],\n"
       "'compare.axes.\"optimizer.lr\"=[0.1]'); any other --set KEY=VALUE is applied to every run.\n"
       "--resume DIR goes on with an interrupted or partly failed comparison (DIR/comparison.json records its\n"
       "combinations; the same sweep and --set are required): runs that ended ok are kept as they are, the\n"
       "others run again, and results.md notes which runs an earlier session measured.",
       "  0       every run finished\n"
       "  1       some run failed (results.* record its status and cause)\n"
       "  2       the sweep or a run's configuration is invalid, or usage error: nothing was started\n"
       "  128+N   interrupted by signal N (130: Ctrl-C); the runs that finished are kept",
       std::string(kPluginEnvironment) + kDataEnvironment +
           "  STRATA_PROGRESS STRATA_CACHE_DIR\n"
           "                  passed on to the runs (see `strata run --help`); launcher variables are refused:\n"
           "                  compare starts its own jobs on this host\n"},
      {"plot", "strata plot RUN_DIR... [--out FILE] [--baseline DIR]",
       "Writes report.html (or FILE) from run directories made by `strata run`: time, speedup, efficiency,\n"
       "memory, communication, loss.",
       "  0       the report was written\n"
       "  1       an unexpected failure\n"
       "  2       a directory without a readable summary.json, or usage error\n"
       "  128+N   ended by signal N",
       "  (none)\n"},
      {"estimate", "strata estimate FILE [--world-sizes 1,2,4,8] [--network FILE] [--strategies a,b] [--out DIR]\n"
                   "                [--profile RUN_DIR] [--device-memory GIB] [--set KEY=VALUE]...",
       "Predicts, for each strategy and world size, the step time (a simulation of the strategy's schedule of compute\n"
       "and collectives), speedup and efficiency against single at 1, memory per rank (model state by the strategy's\n"
       "sharding, activations, gathered units, buffers), bus bytes per step, and whether it fits the device's memory.\n"
       "The profile is a short run of the experiment on one device that estimate starts itself (below --out), or\n"
       "--profile RUN_DIR of one. The network is the JSON of `strata bench comms --json FILE` or a TOML cluster spec\n"
       "(examples/clusters). Writes estimate.json and estimate.csv into --out. Figures are predictions, not measurements.\n"
       "FILE may be a sweep file of `strata compare`: its base experiment with [compare.set] is estimated over the\n"
       "sweep's strategies, world sizes, scaling and baseline (--strategies and --world-sizes replace them); `strata\n"
       "compare --estimate` puts the predictions beside the measurements.",
       "  0       estimated\n"
       "  1       the profile run failed\n"
       "  2       unknown strategy, bad network file or profile, or usage error\n"
       "  128+N   ended by signal N",
       std::string(kPluginEnvironment) + kDataEnvironment},
      {"check", "strata check NAME[,NAME...] [--world-sizes 1,2,3] [--models standard|transformers] [--out DIR]",
       "Conformance suite of strategy NAME on small CPU models: equivalence with single, memory, communication,\n"
       "state dict, bad options. Several names, separated by commas, are checked in turn (each in --out DIR/NAME).",
       "  0       every check passed\n"
       "  1       some check failed (the table says which)\n"
       "  2       unknown strategy (any of those named, before any run) or usage error\n"
       "  128+N   ended by signal N",
       kPluginEnvironment},
      {"export", "strata export CHECKPOINT --to FILE",
       "Writes the checkpoint's model, consolidated, as FILE: *.safetensors, *.pt, or a directory (Hugging Face\n"
       "layout).",
       "  0       written\n"
       "  1       reading or writing failed\n"
       "  2       not a checkpoint, or usage error\n"
       "  128+N   ended by signal N",
       kPluginEnvironment},
      {"bench", "strata bench comms|gemm [options]",
       "Benchmarks: `strata bench comms --help` (collectives) and `strata bench gemm --help` (matmul).",
       "  0       done\n"
       "  1       the benchmark failed (a wrong result, a failed rank)\n"
       "  2       usage error\n"
       "  128+N   ended by signal N",
       "  (see each benchmark's --help)\n"},
      {"bench comms",
       "strata bench comms [--nproc N] [--backend gloo|nccl] [--device cpu|cuda] [--collective NAME|all] [options]",
       "Bandwidth of all_reduce, all_gather, reduce_scatter, broadcast and all_to_all by size, as nccl-tests prints it.",
       "  0       done, every result checked\n"
       "  1       a collective returned a wrong result, or a rank failed\n"
       "  2       usage error\n"
       "  128+N   ended by signal N",
       kLauncherEnvironment},
      {"bench gemm", "strata bench gemm [-m LIST -n LIST -k LIST] [--dtype float32|tf32|bfloat16|float16] [options]",
       "Matmul time and TFLOP/s by shape; records the best rate as this device's measured peak (for MFU).",
       "  0       done\n"
       "  1       the benchmark failed\n"
       "  2       usage error\n"
       "  128+N   ended by signal N",
       "  STRATA_CACHE_DIR\n"
       "                  where the measured peaks are recorded (gemm_peaks.json; default\n"
       "                  $XDG_CACHE_HOME/strata, else ~/.cache/strata)\n"},
      {"plugins", "strata plugins",
       "Lists the plugins found: kind, name, description, library; then the libraries that did not load, and why.",
       "  0       listed (some libraries may not have loaded: they are listed after the table)\n"
       "  2       no plugin loaded at all\n"
       "  128+N   ended by signal N",
       kPluginEnvironment},
      {"describe", "strata describe NAME",
       "Options of a plugin, a core section (e.g. train) or of a sweep file (compare): type, default,\n"
       "constraint and meaning.",
       "  0       described\n"
       "  2       nothing has that name (the message suggests one, or names the library that did not load)\n"
       "  128+N   ended by signal N",
       kPluginEnvironment},
  };
  return helps;
}

}  // namespace strata::cli
