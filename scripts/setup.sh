#!/usr/bin/env bash
# Strata setup: system packages, Python venv with LibTorch, CMake configure and build.
# Idempotent: on a ready machine it only checks and runs the build tool's no-op check.
# Run `scripts/setup.sh --help` for the variables it honours.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/setup.sh [--help]

Installs the Debian packages Strata needs (as root), creates a Python venv with the pinned
torch/tensorboard (scripts/requirements.txt), configures CMake against the venv's LibTorch and
builds. Each step is skipped when already done, so a second run takes seconds.

Environment variables:
  STRATA_VENV        venv location (default: ${XDG_CACHE_HOME:-$HOME/.cache}/strata/venv)
  STRATA_BASE_PYTHON interpreter used to create the venv (default: python3)
  STRATA_BUILD_DIR   build directory; relative paths are taken from the repository root
                     (default: build)
  STRATA_BUILD_TYPE  CMAKE_BUILD_TYPE (default: Release)
  STRATA_CMAKE_ARGS  extra arguments for the CMake configure step, split on whitespace
                     (e.g. "-DSTRATA_USE_PCH=OFF -DSTRATA_BUILD_TESTS=OFF")
  STRATA_JOBS        parallel build jobs (default: nproc)
  STRATA_SKIP_APT    set to 1 to skip the Debian package step (dependencies then come from
                     CMAKE_PREFIX_PATH)
  CMAKE_PREFIX_PATH  extra prefixes (colon-separated); the venv's torch prefix is appended
  CMAKE_GENERATOR    CMake generator; default Ninja when ninja is installed
  PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_FIND_LINKS, ...  passed through to pip untouched

The build is reconfigured when the build directory has no CMakeCache.txt, when its STRATA_PYTHON
is not this venv's interpreter (a fresh configure), or when the requirements, build type,
STRATA_CMAKE_ARGS or CMAKE_PREFIX_PATH changed since setup last configured it.
USAGE
}

case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  "") ;;
  *) echo "setup: unknown argument '$1' (see --help)" >&2; exit 2 ;;
esac

START_SECONDS=$SECONDS
STEP="start"
REPORTED=0
log() { printf 'setup: %s\n' "$*" >&2; }
die() { REPORTED=1; printf 'setup: FAILED (%s): %s\n' "$STEP" "$*" >&2; exit 1; }
apt_install() { DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "$@"; }
on_exit() {
  local rc=$?
  # Never leave apt running behind us: a dpkg stopped halfway breaks the package database.
  if [[ -n "${TEST_APT_PID:-}" ]]; then
    printf 'setup: waiting for the test packages'"'"' install to finish (log: %s)\n' "$TEST_APT_LOG" >&2
    wait "$TEST_APT_PID" || true
  fi
  if ((rc != 0 && REPORTED == 0)); then
    printf 'setup: FAILED in step "%s" (exit code %d); see the output above.\n' "$STEP" "$rc" >&2
  fi
}
trap on_exit EXIT

# Paths: relative STRATA_VENV is taken from the caller's directory, then work from the repo root.
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# realpath -ms: absolute and normalised (no //, ..) like CMake stores FILEPATHs, symlinks kept.
VENV="$(realpath -ms -- "${STRATA_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/strata/venv}")"
cd "$ROOT"
BUILD="$(realpath -ms -- "${STRATA_BUILD_DIR:-build}")"
BUILD_TYPE="${STRATA_BUILD_TYPE:-Release}"
REQUIREMENTS="$ROOT/scripts/requirements.txt"
PY="$VENV/bin/python"

# ---------------------------------------------------------------------------------------------
# a. Debian packages
STEP="packages"
# For the tests only (without them those tests skip, saying why): openmpi-bin: mpirun for
# test_launchers.py (strata does not link MPI; it reads mpirun's rank variables). slurm-wlm:
# slurmctld, slurmd, srun and sbatch for test_slurm.py, which starts its own one-node cluster from a
# temporary directory (the packaged services are not used; where an init system starts them, they
# fail for want of /etc/slurm/slurm.conf). chromium: the headless render of report.html in
# test_report.py. iproute2: `ip netns` for test_multihost.py; procps: pgrep (strata_test.py).
# chromium and slurm-wlm add about 126 MB of downloads and 22 s to a fresh install (Debian 12).
# When setup runs as root, missing TEST_PACKAGES are installed while the build compiles (nothing
# in the build needs them; setup waits for them before it ends, and fails if they fail); without
# root, missing ones are named and the tests that need them skip, saying why.
PACKAGES=(build-essential cmake ninja-build ccache libboost-dev libboost-program-options-dev
          libtomlplusplus-dev doctest-dev libfmt-dev libgloo-dev zlib1g-dev dataset-fashion-mnist
          libsentencepiece-dev
          python3-venv python3-pip)
TEST_PACKAGES=(openmpi-bin slurm-wlm chromium iproute2 procps)
# Set when the test packages are to be installed during the build; the install's pid and log.
DEFERRED_PACKAGES=()
APT_UPDATED=0
TEST_APT_PID=""
TEST_APT_LOG=""
if [[ "${STRATA_SKIP_APT:-0}" == 1 ]]; then
  log "packages skipped (STRATA_SKIP_APT=1): dependencies must come from CMAKE_PREFIX_PATH"
elif ! command -v dpkg-query >/dev/null 2>&1; then
  log "packages skipped (no dpkg-query): Boost, toml++, fmt, Gloo headers, zlib, doctest and ninja/ccache must come from CMAKE_PREFIX_PATH/PATH"
else
  declare -A installed=()
  # One query for all packages; unknown packages print nothing (and make dpkg-query exit 1).
  while IFS=$'\t' read -r pkg status; do
    [[ "$status" == "install ok installed" ]] && installed[$pkg]=1
  done < <(dpkg-query -W -f='${Package}\t${Status}\n' "${PACKAGES[@]}" "${TEST_PACKAGES[@]}" 2>/dev/null || true)
  missing=()
  for pkg in "${PACKAGES[@]}"; do
    [[ -n "${installed[$pkg]:-}" ]] || missing+=("$pkg")
  done
  missing_tests=()
  for pkg in "${TEST_PACKAGES[@]}"; do
    [[ -n "${installed[$pkg]:-}" ]] || missing_tests+=("$pkg")
  done
  if [[ "$(id -u)" == 0 ]] && ((${#missing_tests[@]} > 0)); then
    DEFERRED_PACKAGES=("${missing_tests[@]}")
    missing_tests=()
  elif ((${#missing_tests[@]} > 0)); then
    log "not installed (not root): ${missing_tests[*]}; the tests that need them will report Skipped"
  fi
  if ((${#missing[@]} > 0)); then
    if [[ "$(id -u)" == 0 ]]; then
      log "installing Debian packages: ${missing[*]}"
      apt-get update || die "apt-get update failed"
      APT_UPDATED=1
      apt_install "${missing[@]}" || die "apt-get install ${missing[*]} failed"
    else
      REPORTED=1
      cat >&2 <<MSG
setup: FAILED (packages): these Debian packages are missing and setup is not running as root:
  ${missing[*]}
Install them with
  sudo apt-get update && sudo apt-get install -y --no-install-recommends ${missing[*]}
then run scripts/setup.sh again (or set STRATA_SKIP_APT=1 if they come from CMAKE_PREFIX_PATH).
MSG
      exit 1
    fi
  fi
  log "packages ok${DEFERRED_PACKAGES[*]:+ (for the tests, installed during the build: ${DEFERRED_PACKAGES[*]})}"
fi

# ---------------------------------------------------------------------------------------------
# b. Python venv with the pinned torch/tensorboard
STEP="venv"
[[ -f "$REQUIREMENTS" ]] || die "missing $REQUIREMENTS"
if [[ ! -x "$PY" ]]; then
  BASE_PY="${STRATA_BASE_PYTHON:-python3}"
  command -v "$BASE_PY" >/dev/null 2>&1 || die "'$BASE_PY' not found (install python3 and python3-venv)"
  log "creating venv $VENV"
  mkdir -p "$(dirname "$VENV")"
  "$BASE_PY" -m venv "$VENV" || die "'$BASE_PY -m venv $VENV' failed (is python3-venv installed?)"
fi
REQ_HASH="$(sha256sum "$REQUIREMENTS" | cut -d' ' -f1)"
STAMP="$VENV/.strata-requirements.sha256"
if [[ ! -f "$STAMP" || "$(<"$STAMP")" != "$REQ_HASH" ]]; then
  log "installing scripts/requirements.txt into $VENV (the torch wheel and its CUDA libraries are several GB: this can take a while)"
  # --no-compile: pip would byte-compile the venv's 10,500 Python files one after the other (about
  # 50 s of CPU on a slow 2-core machine), where a test run imports about 2,500 of them. Python
  # compiles a module the first time it is imported instead; the tests keep what it compiles in
  # build/pycache (PYTHONPYCACHEPREFIX, tests/integration/CMakeLists.txt).
  "$PY" -m pip install --no-compile -r "$REQUIREMENTS" || die "pip install -r scripts/requirements.txt failed"
  printf '%s\n' "$REQ_HASH" > "$STAMP"
fi
# importlib.metadata is fast; `import torch` (seconds) is only needed when configuring.
TORCH_VERSION="$("$PY" -c 'import importlib.metadata as m; print(m.version("torch"))' 2>/dev/null)" \
  || die "torch is not installed in $VENV (remove $STAMP and run setup again)"
log "venv ok (torch $TORCH_VERSION)"

# ---------------------------------------------------------------------------------------------
# c. CMake configure
STEP="configure"
CACHE="$BUILD/CMakeCache.txt"
EXTRA_ARGS=()
[[ -z "${STRATA_CMAKE_ARGS:-}" ]] || read -r -a EXTRA_ARGS <<<"$STRATA_CMAKE_ARGS"
GENERATOR=()
if [[ -z "${CMAKE_GENERATOR:-}" ]] && command -v ninja >/dev/null 2>&1; then
  GENERATOR=(-G Ninja)
fi
# What setup configured with last time (written only after a successful configure).
CONFIG_STAMP="$BUILD/.strata-configure"
CONFIG_KEY="python=$PY
requirements=$REQ_HASH
build_type=$BUILD_TYPE
prefix=${CMAKE_PREFIX_PATH:-}
generator=${GENERATOR[*]:-${CMAKE_GENERATOR:-default}}
args=${EXTRA_ARGS[*]:-}"

cached_python=""
have_cache=0
if [[ -f "$CACHE" ]]; then
  have_cache=1
  while IFS= read -r line; do
    case "$line" in
      STRATA_PYTHON:*=*) cached_python="${line#*=}"; break ;;
    esac
  done <"$CACHE"
fi

configure=0
fresh=()
if ((have_cache == 0)); then
  configure=1
elif [[ "$cached_python" != "$PY" ]]; then
  configure=1
  fresh=(--fresh)  # a different Python means a different LibTorch: drop every cached find result
  log "build dir was configured with STRATA_PYTHON='$cached_python': reconfiguring from scratch"
elif [[ ! -f "$CONFIG_STAMP" || "$(<"$CONFIG_STAMP")" != "$CONFIG_KEY" ]]; then
  configure=1
elif [[ ! -f "$BUILD/build.ninja" && ! -f "$BUILD/Makefile" ]]; then
  configure=1  # an earlier configure stopped before generating
fi

if ((configure)); then
  TORCH_PREFIX="$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')" \
    || die "'import torch' failed in $PY"
  PREFIX_PATH="$TORCH_PREFIX"
  if [[ -n "${CMAKE_PREFIX_PATH:-}" ]]; then
    PREFIX_PATH="${CMAKE_PREFIX_PATH//:/;};$TORCH_PREFIX"
  fi
  # Keep the generator of an existing build tree (CMake refuses to switch it in place).
  if ((have_cache == 1 && ${#fresh[@]} == 0)); then GENERATOR=(); fi
  cmake -S "$ROOT" -B "$BUILD" "${fresh[@]}" "${GENERATOR[@]}" \
    -DCMAKE_BUILD_TYPE="$BUILD_TYPE" \
    -DSTRATA_PYTHON:FILEPATH="$PY" \
    -DCMAKE_PREFIX_PATH="$PREFIX_PATH" \
    "${EXTRA_ARGS[@]}" \
    || die "CMake configure failed (build dir $BUILD)"
  printf '%s\n' "$CONFIG_KEY" >"$CONFIG_STAMP"
  log "configured ($BUILD, $BUILD_TYPE)"
else
  log "configured (up to date: $BUILD)"
fi

# ---------------------------------------------------------------------------------------------
# d. Build
STEP="build"
JOBS="${STRATA_JOBS:-$(nproc)}"
if ((${#DEFERRED_PACKAGES[@]} > 0)); then
  # The tests' packages download and unpack while the compiler has the CPUs (about 20 s of a fresh
  # set-up saved). Its output goes to a log, shown if it fails.
  TEST_APT_LOG="$BUILD/.strata-test-packages.log"
  (
    if ((APT_UPDATED == 0)); then apt-get update || exit 1; fi
    apt_install "${DEFERRED_PACKAGES[@]}"
  ) >"$TEST_APT_LOG" 2>&1 </dev/null &
  TEST_APT_PID=$!
fi
BUILD_START=$SECONDS
cmake --build "$BUILD" -j "$JOBS" || die "build failed (build dir $BUILD)"
log "built in $((SECONDS - BUILD_START))s"
if [[ -n "$TEST_APT_PID" ]]; then
  STEP="test packages"
  pid=$TEST_APT_PID
  TEST_APT_PID=""
  if ! wait "$pid"; then
    tail -n 20 "$TEST_APT_LOG" >&2
    die "apt-get install ${DEFERRED_PACKAGES[*]} failed (its output: $TEST_APT_LOG)"
  fi
  log "test packages installed: ${DEFERRED_PACKAGES[*]}"
fi
log "setup total $((SECONDS - START_SECONDS))s"
