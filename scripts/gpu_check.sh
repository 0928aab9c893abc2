#!/usr/bin/env bash
# One-command GPU check: on a machine with an NVIDIA GPU and PyTorch 2.11 in python3 but no package
# registry, builds Strata against that PyTorch, runs the README's quick start as it is (device "auto"
# must pick the GPU), the whole test suite (CPU tests hide the GPU themselves; the `gpu` tests use
# it), then prints the table of scripts/gpu_table.py: every strategy on one GPU over NCCL against
# `single`, also with forced collectives, and two ranks sharing the GPU over Gloo (step time,
# allocator and driver memory, final model compared tensor by tensor, deterministic kernels, host
# syncs audited). Without a GPU it says so and exits 0. `scripts/gpu_check.sh --help` lists its
# variables.
set -euo pipefail

usage() {
  cat <<'USAGE'
Usage: scripts/gpu_check.sh [--build-only | --help]

Builds into STRATA_GPU_BUILD_DIR, runs `strata run experiments/quickstart.toml` with no --set (it
must run on cuda:0), the whole `ctest` suite (STRATA_GPU_TESTS=gpu: only `ctest -L gpu`), then the
strategy table. --build-only stops after the build (bench/gpu_goals.sh builds this way).
Dependencies (Boost, TOML++, fmt, doctest, Gloo headers) come from the Debian packages staged in
.device/debs (unpacked into STRATA_GPU_DEPS), or from the system when none are staged.

Environment variables:
  STRATA_GPU_PYTHON     interpreter with torch 2.11 (default: python3)
  STRATA_GPU_BUILD_DIR  build directory (default: build-gpu)
  STRATA_GPU_DEPS       prefix the staged .deb files are unpacked into (default: deps in the build
                        directory, outside .device: a device call that carries .device again replaces
                        that folder, and with it the libraries the build links to)
  STRATA_GPU_STEPS      training steps per run of the table (default: 20)
  STRATA_GPU_TESTS      all (default) or gpu: which ctest labels to run
  STRATA_JOBS           parallel build jobs (default: nproc)
USAGE
}
BUILD_ONLY=0
case "${1:-}" in
  -h|--help) usage; exit 0 ;;
  --build-only) BUILD_ONLY=1 ;;
  "") ;;
  *) echo "gpu_check: unknown argument '$1' (see --help)" >&2; exit 2 ;;
esac

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
say() { printf 'gpu_check: %s\n' "$*"; }

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  say "no NVIDIA GPU on this machine (nvidia-smi -L finds none): nothing to check here."
  exit 0
fi
PY="${STRATA_GPU_PYTHON:-python3}"
if ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  say "a GPU is present but $PY's torch cannot use it (torch.cuda.is_available() is false)."
  exit 1
fi
BUILD="$(realpath -ms -- "${STRATA_GPU_BUILD_DIR:-build-gpu}")"
DEPS="$(realpath -ms -- "${STRATA_GPU_DEPS:-$BUILD/deps}")"
JOBS="${STRATA_JOBS:-$(nproc)}"
nvidia-smi -L

# Dependencies: the Debian packages staged in .device/debs, unpacked once.
PREFIX="$("$PY" -c 'import torch; print(torch.utils.cmake_prefix_path)')"
if compgen -G ".device/debs/*.deb" >/dev/null; then
  if [[ ! -f "$DEPS/.unpacked" ]]; then
    mkdir -p "$DEPS"
    for f in .device/debs/*.deb; do dpkg -x "$f" "$DEPS"; done
    touch "$DEPS/.unpacked"
  fi
  PREFIX="$PREFIX;$DEPS/usr;$DEPS/usr/lib/x86_64-linux-gnu/cmake"
  if [[ -d "$DEPS/usr/share/datasets/fashion-mnist" && -z "${STRATA_FASHION_MNIST_DIR:-}" ]]; then
    export STRATA_FASHION_MNIST_DIR="$DEPS/usr/share/datasets/fashion-mnist"
  fi
fi

say "building into $BUILD"
GEN=()
command -v ninja >/dev/null 2>&1 && GEN=(-G Ninja)
cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DSTRATA_PYTHON="$(command -v "$PY")" \
  -DCMAKE_PREFIX_PATH="$PREFIX" >/dev/null
cmake --build "$BUILD" -j "$JOBS"
if ((BUILD_ONLY)); then say "built $BUILD/bin/strata"; exit 0; fi

status=0
say "LibTorch's CUDA library, which strata loads at start where a GPU shows (libstrata_cuda)"
version="$("$BUILD/bin/strata" --version)" || status=1
printf '%s\n' "$version"
if grep -qE "not loaded|^NCCL: none" <<<"$version"; then
  say "FAILED: strata did not load LibTorch's CUDA library and NCCL (strata --version says why)"; status=1
fi
say "the quick start as the README gives it (device auto)"
QUICK="$BUILD/gpu-check/quickstart"
rm -rf "$QUICK"
if [[ ! -d "${STRATA_FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}" ]]; then
  say "FAILED: Fashion-MNIST is not here (install dataset-fashion-mnist, or point STRATA_FASHION_MNIST_DIR at its files)"; status=1
elif "$BUILD/bin/strata" run experiments/quickstart.toml --out "$QUICK"; then
  device=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1]))["device"])' "$QUICK/summary.json")
  if [[ "$device" != cuda:0 ]]; then say "FAILED: the quick start ran on $device, not cuda:0"; status=1; fi
else
  say "FAILED: strata run experiments/quickstart.toml"; status=1
fi
if [[ "${STRATA_GPU_TESTS:-all}" == all ]]; then
  say "the whole test suite"
  ctest --test-dir "$BUILD" -j "$JOBS" --output-on-failure || status=1
fi
say "gpu tests"
ctest --test-dir "$BUILD" -L gpu --output-on-failure -V | grep -E "^[0-9]+: (MESSAGE|.*returned after|skipped)|Test +#|tests passed" || true
ctest --test-dir "$BUILD" -L gpu --output-on-failure >/dev/null || status=1
say "strategies on this GPU"
"$PY" scripts/gpu_table.py --strata "$BUILD/bin/strata" --out "$BUILD/gpu-check" \
  --steps "${STRATA_GPU_STEPS:-20}" || status=1
if ((status == 0)); then say "all checks passed"; else say "some checks FAILED (see above)"; fi
exit "$status"
