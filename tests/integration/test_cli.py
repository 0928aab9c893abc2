#!/usr/bin/env python3
"""The command line itself: help, version, usage errors and exit codes, `strata plugins` and
`strata describe`, plugins found at run time (never linked into the binary), and broken
plugin libraries on STRATA_PLUGIN_PATH or in [plugins] paths (tests/fixtures/plugins, built
into $STRATA_FIXTURE_PLUGIN_DIR)."""

import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import strata_test as st  # noqa: E402

BUILTIN = {"single": "strategy", "mlp": "model", "cnn": "model", "synthetic": "dataset", "fashion_mnist": "dataset"}


def plugin_rows(result):
    """{name: (kind, library)} from the table `strata plugins` prints (library: the last column)."""
    rows = {}
    table = result.stdout.split("\n\n")[0]  # the libraries that did not load follow a blank line
    for line in table.splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[0] == "KIND":
            continue
        rows[parts[1]] = (parts[0], parts[-1])
    return rows


# ---- help, version, usage ---------------------------------------------------------------------

def help_exits_0():
    for args in (["--help"], ["-h"]):
        result = st.strata(*args)
        st.expect_exit(result, 0)
        st.expect_stdout(result, "usage: strata")
        for command in ("run", "validate", "plugins", "describe"):
            st.expect_stdout(result, command)


# What `strata <command> --help` must name: its own options and the environment variables it reads.
RUN_ENVIRONMENT = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                   "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT", "SLURM_PROCID", "SLURM_NTASKS",
                   "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_STEP_ID", "SLURM_JOB_ID",
                   "SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                   "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE", "PET_NNODES", "PET_NPROC_PER_NODE",
                   "PET_NODE_RANK", "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "STRATA_PLUGIN_PATH", "STRATA_PROGRESS",
                   "bar|lines|auto", "STRATA_CACHE_DIR"]
COMMAND_HELP = {
    ("run",): ["--nproc", "--out", "--set", "--resume", "--max-restarts", "--standalone"] + RUN_ENVIRONMENT,
    ("validate",): ["--nproc", "--set", "STRATA_PLUGIN_PATH"],
    ("compare",): ["--out", "--set", "--dry-run", "STRATA_PLUGIN_PATH"],
    ("plot",): ["--out", "--baseline"],
    ("check",): ["--world-sizes", "--models", "--out", "STRATA_PLUGIN_PATH"],
    ("export",): ["--to", "STRATA_PLUGIN_PATH"],
    ("bench", "comms"): ["--nproc", "--backend", "--collective", "--max-bytes", "--iters", "MASTER_ADDR",
                         "GLOO_SOCKET_IFNAME"],
    ("bench", "gemm"): ["-m", "--dtype", "--steps", "--threads", "STRATA_CACHE_DIR"],
    ("plugins",): ["STRATA_PLUGIN_PATH"],
    ("describe",): ["STRATA_PLUGIN_PATH"],
}


def command_help_is_its_own():
    """`strata <command> --help`: its usage, its options (not the other commands'), its exit codes and the
    environment variables it reads."""
    for command, fragments in COMMAND_HELP.items():
        result = st.strata(*(list(command) + ["--help"]))
        st.expect_exit(result, 0)
        st.expect_stdout(result, "usage: strata %s" % " ".join(command))
        st.expect_not_in("commands:", result.stdout, result, "stdout (the general usage instead of the command's)")
        for fragment in fragments + ["options:", "exit codes:", "environment:"]:
            st.expect_stdout(result, fragment)
        for code in ("0 ", "2 ", "128+N"):
            st.check(re.search(r"^  %s" % re.escape(code), result.stdout, re.M), "no exit code %r line" % code, result)
        if command != ("plugins",) and command != ("describe",):
            st.check(re.search(r"^  1 ", result.stdout, re.M), "no exit code 1 line", result)
    # The file given by position is not listed as an option.
    result = st.strata("run", "--help")
    st.expect_not_in("--file", result.stdout, result, "stdout")


def parse_version(result):
    """{strata, commit, libtorch, cuda, nccl} from `strata --version`."""
    m = re.match(r"strata (\d+\.\d+\.\d+)\ncommit: (\S+)\nLibTorch: (\S+)\nCUDA: (\S+).*\nNCCL: (\S+)\n$", result.stdout)
    st.check(m, "--version should print strata X.Y.Z, then commit, LibTorch, CUDA and NCCL lines", result)
    return dict(zip(("strata", "commit", "libtorch", "cuda", "nccl"), m.groups()))


def version_exits_0():
    result = st.strata("--version")
    st.expect_exit(result, 0)
    st.check(re.search(r"\bstrata \d+\.\d+\.\d+", result.stdout), "--version should print `strata X.Y.Z`", result)
    v = parse_version(result)
    st.check(re.fullmatch(r"[0-9a-f]{7,40}(\+dirty)?|unknown", v["commit"]), "commit %r" % v["commit"], result)
    st.check(re.fullmatch(r"\d+\.\d+(\.\d+)?|none", v["cuda"]), "CUDA %r" % v["cuda"], result)
    st.check(re.fullmatch(r"\d+\.\d+\.\d+|none", v["nccl"]), "NCCL %r" % v["nccl"], result)
    # The commit is one of this checkout's (the binary is built from it).
    git = shutil.which("git")
    if git and v["commit"] != "unknown" and os.path.isdir(os.path.join(st.REPO, ".git")):
        known = subprocess.run([git, "-C", st.REPO, "cat-file", "-e", v["commit"].split("+")[0] + "^{commit}"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
        st.check(known, "commit %s is not a commit of %s" % (v["commit"], st.REPO), result)
    # The same LibTorch, CUDA and NCCL as the Python torch the build was configured with.
    try:
        import torch
    except ImportError:
        return
    st.check(torch.__version__.split("+")[0] == v["libtorch"], "LibTorch %s, torch %s" % (v["libtorch"], torch.__version__),
             result)
    st.check((torch.version.cuda or "none") == v["cuda"], "CUDA %s, torch.version.cuda %s" % (v["cuda"], torch.version.cuda),
             result)
    if torch.version.cuda:
        nccl = ".".join(str(x) for x in torch.cuda.nccl.version())
        st.check(v["nccl"] in (nccl, "none"), "NCCL %s, torch.cuda.nccl %s" % (v["nccl"], nccl), result)


def summary_records_versions_and_host():
    import socket
    version = parse_version(st.strata("--version"))
    out = st.temp_dir("versions")
    st.strata_run(st.GOOD_SYNTHETIC, out, "train.steps=2")
    summary = st.load_summary(out)
    st.check(summary.get("versions") == version, "summary.json versions %r, --version says %r"
             % (summary.get("versions"), version))
    st.check(summary.get("host") == socket.gethostname(), "summary.json host %r, this host %r"
             % (summary.get("host"), socket.gethostname()))


def warmup_longer_than_steps_is_clamped():
    """A smoke run of a real experiment: warmup_steps > steps trains with the warmup clamped, saying so once
    (not again in each rank of the job); the resolved config keeps the value as written, so that the run's
    config.toml resumes it with more steps (test_resume.py)."""
    out = st.temp_dir("warmup")
    result = st.strata_run(st.GOOD_SYNTHETIC, out, "train.steps=4", "train.warmup_steps=10", "strategy.name=ddp",
                           "distributed.nproc=2")
    lines = [l for l in (result.stdout + result.stderr).splitlines() if "warmup_steps" in l]
    st.check(len(lines) == 1, "expected one warmup warning, got %r" % lines, result)
    for fragment in ("warning:", "train.warmup_steps", "10", "train.steps", "4"):
        st.expect_in(fragment, lines[0], result, "the warning")
    with open(os.path.join(out, "config.toml")) as f:
        st.check(re.search(r"^warmup_steps = 10$", f.read(), re.M), "config.toml should record warmup_steps = 10")
    # Clamped to 4 steps, the last step trains at the full rate (unclamped it would be 4/10 of it).
    last = [l for l in result.stdout.splitlines() if "step 4/4" in l]
    st.check(last and "lr 1.00e-02" in last[-1], "the last step's learning rate: %r" % last, result)


# The keys of an experiment that say where its data is: without the files the experiment cannot be
# validated here, and the smoke check skips it.
DATA_KEYS = ("train.init_from", "dataset.path", "dataset.tokenizer")


def bundled_experiments_accept_20_steps():
    """Every experiments/*.toml passes `strata validate` with --set train.steps=20, where its data is present:
    an experiment, or a sweep and each of its combinations (a line each, nothing run). Without its data an
    experiment exits 2 naming the key that says where the data is (and the test says it skipped it)."""
    experiments = sorted(glob.glob(os.path.join(st.REPO, "experiments", "*.toml")))
    st.check(experiments, "no experiments/*.toml")
    skipped, checked = [], []
    for path in experiments:
        with open(path) as f:
            sweep = re.search(r"^\[compare\]", f.read(), re.M) is not None
        scratch = st.temp_dir("smoke")
        result = st.strata("validate", path, "--set", "train.steps=20", timeout=300, cwd=scratch)
        st.expect_no_crash(result)
        missing = re.search(r"^error: \S+: (%s): (.*)$" % "|".join(re.escape(k) for k in DATA_KEYS), result.stderr,
                            re.M)
        if result.returncode == 2 and missing:
            skipped.append("%s (%s: %s)" % (os.path.basename(path), missing.group(1), missing.group(2)[:120]))
            continue
        st.expect_exit(result, 0)
        if sweep:
            # One line per combination, a summary line, and nothing started (no run directory).
            combinations = re.findall(r"^  ok: (\S+) \(strategy ", result.stdout, re.M)
            summary = re.search(r"^\S+: ok \((\d+) combinations? valid", result.stdout, re.M)
            st.check(combinations and summary and int(summary.group(1)) == len(combinations),
                     "validate of the sweep %s should list each combination and count them" % path, result)
            st.check(not os.listdir(scratch), "validate of a sweep wrote %s" % os.listdir(scratch), result)
        checked.append(os.path.basename(path))
    for s in skipped:
        print("  skipped, its data is absent: %s" % s)
    print("  validated with train.steps=20: %s" % ", ".join(checked))
    st.check(checked, "no bundled experiment could be validated")


def no_arguments_exit_2():
    result = st.strata()
    st.expect_exit(result, 2)
    st.expect_no_crash(result)
    st.expect_stderr(result, "usage: strata")


def unknown_command_exit_2():
    result = st.strata("trian")
    st.expect_clean_failure(result, 2, "trian", "usage: strata")


def unknown_flag_exit_2():
    result = st.strata("run", st.GOOD_SYNTHETIC, "--bogus")
    st.expect_clean_failure(result, 2, "--bogus")
    st.check("did you mean" not in result.stderr, "a suggestion for --bogus", result)
    # A slip of a known flag is named.
    result = st.strata("run", st.GOOD_SYNTHETIC, "--nprocs", "2")
    st.expect_clean_failure(result, 2, "'--nprocs'; did you mean --nproc?")


def run_without_file_exit_2():
    for command in ("run", "validate"):
        result = st.strata(command)
        st.expect_clean_failure(result, 2, "needs an experiment file")


def option_without_value_exit_2():
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out")
    st.expect_exit(result, 2)
    st.expect_no_crash(result)
    st.expect_stderr(result, "--out")


def too_many_files_exit_2():
    result = st.strata("validate", st.GOOD_SYNTHETIC, st.GOOD_SYNTHETIC)
    st.expect_clean_failure(result, 2)


def out_is_a_file_exit_2():
    # An unusable --out is the user's input being wrong, found before any training: a usage error
    # (exit 2), not a training failure (exit 1).
    path = os.path.join(st.temp_dir("outfile"), "a_file")
    with open(path, "w") as f:
        f.write("not a directory\n")
    result = st.strata("run", st.GOOD_SYNTHETIC, "--out", path)
    st.expect_no_crash(result)
    st.expect_error_paragraph(result)
    st.expect_stderr(result, path)
    st.expect_exit(result, 2)


# ---- plugins and describe ----------------------------------------------------------------------

def plugins_lists_builtins():
    result = st.strata("plugins")
    st.expect_exit(result, 0)
    rows = plugin_rows(result)
    libraries = {}
    plugdir = os.path.realpath(st.plugins_dir())
    for name, kind in BUILTIN.items():
        st.check(name in rows, "`strata plugins` does not list %s" % name, result)
        got_kind, library = rows[name]
        st.check(got_kind == kind, "%s is listed as a %s, expected %s" % (name, got_kind, kind), result)
        st.check(os.path.isfile(library), "library %r of %s does not exist" % (library, name), result)
        st.check(os.path.dirname(os.path.realpath(library)) == plugdir,
                 "library of %s is %s, expected it in %s" % (name, library, plugdir), result)
        libraries[name] = os.path.realpath(library)
    st.check(len(set(libraries.values())) == len(libraries), "plugins should each come from their own library: %s"
             % libraries, result)


def output_fits_the_terminal():
    """On a terminal of 80 columns (a pseudo-terminal from script(1)), `plugins` and `describe` wrap
    their lines at its width and keep every plugin and option; to a pipe they keep one plugin a
    line, as before."""
    script = shutil.which("script")
    if script is None:
        raise st.Skip("script(1) is not installed (bsdutils): no pseudo-terminal to print to")
    for args in (["plugins"], ["describe", "fsdp"], ["describe", "llama"]):
        command = "stty cols 80; %s %s" % (shlex.quote(st.strata_bin()), " ".join(args))
        result = st.run_command([script, "-qec", command, "/dev/null"])
        st.expect_exit(result, 0)
        lines = result.stdout.replace("\r", "").splitlines()
        # A path is never broken: a line may only exceed the width by being one whole path.
        long = [l for l in lines if len(l) > 80 and not l.strip().startswith("/")]
        st.check(not long, "strata %s on an 80-column terminal printed %d longer lines, e.g. %r"
                 % (" ".join(args), len(long), long[:1]), result)
        piped = st.strata(*args)
        skip = 1 if args == ["plugins"] else 0  # the table's header says where the library went
        words = lambda text: sorted(" ".join(text.replace("\r", "").splitlines()[skip:]).split())
        st.check(words(result.stdout) == words(piped.stdout),
                 "strata %s on a terminal says other words than to a pipe" % " ".join(args), result)
    piped = st.strata("plugins")
    st.check(len(plugin_rows(piped)) >= len(BUILTIN), "piped, `strata plugins` is no longer one plugin a line", piped)


def binary_does_not_link_plugins():
    result = st.strata("plugins")
    st.expect_exit(result, 0)
    names = {os.path.basename(lib) for _, lib in plugin_rows(result).values()}
    st.check(names, "no plugin libraries listed", result)
    linked = ""
    tool = None
    for candidate in (["ldd", st.strata_bin()], ["readelf", "-d", st.strata_bin()]):
        if shutil.which(candidate[0]):
            proc = subprocess.run(candidate, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
            if proc.returncode == 0:
                linked = proc.stdout.decode("utf-8", "replace")
                tool = " ".join(candidate)
                break
    if tool is None:
        raise st.Skip("neither ldd nor readelf works here")
    for name in sorted(names):
        st.check(name not in linked, "%s links %s; plugins must only be loaded at run time:\n%s" % (tool, name, linked))
    st.check("libc.so" in linked, "sanity: %s lists no libc, so its output is not what this check expects:\n%s"
             % (tool, linked))


def describe_mlp():
    result = st.strata("describe", "mlp")
    st.expect_exit(result, 0)
    st.check(re.search(r"^\s+hidden\s+.*default \[\d+(, \d+)*\]", result.stdout, re.M),
             "`strata describe mlp` should show option `hidden` with its default", result)
    st.expect_stdout(result, "libstrata_model_mlp")


def describe_core_section():
    result = st.strata("describe", "train")
    st.expect_exit(result, 0)
    for option in ("steps", "global_batch_size", "micro_batches", "seed", "lr_schedule"):
        st.check(re.search(r"^\s+%s\s" % option, result.stdout, re.M), "`describe train` lacks %s" % option, result)


def describe_compare():
    """`strata describe compare`: the keys of a sweep file with types, defaults and docs, from the schema the
    sweep is validated against (the bound of repeats it prints is the one an override is refused with)."""
    result = st.strata("describe", "compare")
    st.expect_exit(result, 0)
    for key, text in (("base", "string"), ("scaling", "string"), ("repeats", "integer"), ("baseline", "table"),
                      ("axes", "table"), ("set", "table"), ("strategy", "array of strings"),
                      ("world_size", "array of integers")):
        st.check(re.search(r"^\s+%s\s+%s" % (key, text), result.stdout, re.M),
                 "`describe compare` lacks %s (%s)" % (key, text), result)
    for fragment in ("[compare.axes]", "[compare.set]", "one of: strong, weak", "default \"strong\"",
                     'compare.axes."optimizer.lr"'):
        st.expect_stdout(result, fragment)
    bound = re.search(r"^\s+repeats\s.*\n.*\((>= 1 and <= \d+)\)$", result.stdout, re.M)
    st.check(bound, "`describe compare` should print the bound of repeats", result)
    sweep = os.path.join(st.temp_dir("describe"), "sweep.toml")
    with open(sweep, "w") as f:
        f.write('[compare]\nbase = "%s"\n' % st.GOOD_SYNTHETIC)
    refused = st.strata("validate", sweep, "--set", "compare.repeats=1000")
    st.expect_clean_failure(refused, 2, "--set compare.repeats=1000", bound.group(1))


def describe_unknown():
    result = st.strata("describe", "mpl")
    st.expect_clean_failure(result, 2, "Did you mean 'mlp'")
    # Other capitals are the likeliest slip: FSDP for fsdp.
    result = st.strata("validate", st.GOOD_SYNTHETIC, "--set", "strategy.name=FSDP")
    st.expect_clean_failure(result, 2, "Did you mean 'fsdp'?")


def describe_lists_what_it_describes():
    result = st.strata("describe")
    st.expect_exit(result, 0)
    for fragment in ("core sections: experiment, optimizer, train", "a sweep file: compare", "models: cnn, llama, mlp",
                     "strategies: ddp"):
        st.expect_stdout(result, fragment)


# ---- fixture plugins ---------------------------------------------------------------------------

def broken_plugin(case, *fragments):
    """A directory holding one broken library: commands that do not need it still work; `strata plugins`
    lists it with the reason after the table, the others warn naming it (test_plugin_path.py has more)."""
    def run():
        libs = st.fixture_libraries(case)
        env = {"STRATA_PLUGIN_PATH": st.fixture_plugin_dir(case)}
        for args, stream in ((["plugins"], "stdout"), (["validate", st.GOOD_SYNTHETIC], "stderr")):
            result = st.strata(*args, env=env)
            st.expect_exit(result, 0)
            st.expect_no_crash(result)
            text = getattr(result, stream)
            st.check(any(os.path.basename(lib) in text for lib in libs),
                     "%s should name the library (%s)" % (stream, ", ".join(libs)), result)
            for fragment in fragments:
                st.expect_in(fragment, text, result, stream)
        st.check(BUILTIN.keys() <= plugin_rows(st.strata("plugins", env=env)).keys(),
                 "the built-in plugins should still be listed")
    return "plugin_" + case, run


def good_fixture_plugin():
    libs = st.fixture_libraries("good")
    env = {"STRATA_PLUGIN_PATH": st.fixture_plugin_dir("good")}
    result = st.strata("plugins", env=env)
    st.expect_exit(result, 0)
    rows = plugin_rows(result)
    for name in ("fixture_echo_a", "fixture_echo_b"):
        st.check(name in rows, "`strata plugins` does not list %s" % name, result)
        st.check(rows[name][0] == "strategy", "%s should be a strategy" % name, result)
        st.check(os.path.realpath(rows[name][1]) in [os.path.realpath(l) for l in libs],
                 "%s should come from %s" % (name, libs), result)
    for name in BUILTIN:
        st.check(name in rows, "the built-in %s disappeared when STRATA_PLUGIN_PATH was set" % name, result)
    result = st.strata("describe", "fixture_echo_b", env=env)
    st.expect_exit(result, 0)
    st.check(re.search(r"^\s+answer\s+.*default 42", result.stdout, re.M), "describe should show answer = 42", result)
    # Without the variable the fixture names are unknown again.
    result = st.strata("validate", st.GOOD_SYNTHETIC, "--set", "strategy.name=fixture_echo_a")
    st.expect_exit(result, 2)
    st.expect_stderr(result, "unknown strategy 'fixture_echo_a'")
    result = st.strata("validate", st.GOOD_SYNTHETIC, "--set", "strategy.name=fixture_echo_a", env=env)
    st.expect_exit(result, 0)


def good_fixture_through_plugins_paths():
    good = st.fixture_plugin_dir("good")
    st.fixture_libraries("good")
    work = st.temp_dir("paths")
    with open(st.GOOD_SYNTHETIC, encoding="utf-8") as f:
        text = f.read()
    text = text.replace('name = "single"', 'name = "fixture_echo_b"\nanswer = 7')
    # A path relative to the experiment file, as docs/user-guide.md promises.
    os.symlink(good, os.path.join(work, "my_plugins"))
    config = os.path.join(work, "experiment.toml")
    with open(config, "w", encoding="utf-8") as f:
        f.write(text + '\n[plugins]\npaths = ["my_plugins"]\n')
    result = st.strata("validate", config)
    st.expect_exit(result, 0)
    st.expect_stdout(result, "fixture_echo_b")
    result = st.strata("validate", config, "--set", "strategy.answer=-1")
    st.expect_exit(result, 2)
    st.expect_stderr(result, "--set strategy.answer=-1")


def throwing_factory():
    st.fixture_libraries("throwing_factory")
    env = {"STRATA_PLUGIN_PATH": st.fixture_plugin_dir("throwing_factory")}
    result = st.strata("plugins", env=env)
    st.expect_exit(result, 0)
    st.check("fixture_throwing" in plugin_rows(result), "fixture_throwing is not listed", result)
    for args in (["validate", st.GOOD_SYNTHETIC], ["run", st.GOOD_SYNTHETIC, "--out", st.temp_dir("throwing")]):
        result = st.strata(*(args + ["--set", "strategy.name=fixture_throwing"]), env=env)
        st.expect_clean_failure(result, 2, "fixture factory failure", "fixture_throwing")


def nonexistent_plugin_path_is_ignored():
    # Like PATH: a directory on STRATA_PLUGIN_PATH that does not exist is skipped, with a warning.
    env = {"STRATA_PLUGIN_PATH": os.path.join(st.temp_dir("nopath"), "does_not_exist")}
    result = st.strata("validate", st.GOOD_SYNTHETIC, env=env)
    st.expect_exit(result, 0)
    st.expect_stderr(result, "STRATA_PLUGIN_PATH entry")


if __name__ == "__main__":
    st.main([
        help_exits_0, command_help_is_its_own, version_exits_0, summary_records_versions_and_host,
        warmup_longer_than_steps_is_clamped, bundled_experiments_accept_20_steps, no_arguments_exit_2, unknown_command_exit_2, unknown_flag_exit_2,
        run_without_file_exit_2, option_without_value_exit_2, too_many_files_exit_2, out_is_a_file_exit_2,
        plugins_lists_builtins, output_fits_the_terminal, binary_does_not_link_plugins, describe_mlp, describe_core_section, describe_compare,
        describe_unknown, describe_lists_what_it_describes,
        broken_plugin("missing_symbol", "not a Strata plugin"),
        broken_plugin("abi_mismatch", "ABI"),
        broken_plugin("duplicate", "'single'"),
        broken_plugin("register_throws", "fixture register failure"),
        broken_plugin("torch_mismatch", "LibTorch"),
        broken_plugin("undefined_symbol", "strata_fixture_function_that_does_not_exist"),
        broken_plugin("wrong_names", "fixture_declared"),
        good_fixture_plugin, good_fixture_through_plugins_paths, throwing_factory,
        nonexistent_plugin_path_is_ignored,
    ])
