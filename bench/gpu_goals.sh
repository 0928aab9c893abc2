#!/usr/bin/env bash
# The one-GPU goals of BENCHMARKS.md in one call, ordered so that what matters most is measured
# first and an interrupted call keeps what it measured:
#   1. build (scripts/gpu_check.sh --build-only: the staged Debian packages, the CUDA kernels);
#   2. tests: `ctest -L gpu` (the fused kernels against the unfused ops, the loader's copy stream,
#      the checkpoint's staging buffers, every strategy against single on the GPU);
#   3. llama: bench/gpu_peers.py on TinyLlama-1.1B (bf16, seq 2048, 2 x 4): Strata's plain single,
#      its fused ops with the fused loss, fsdp and zero3 at world size 1 over NCCL, against the
#      torch.compile peer;
#   4. vit: the ViT in float32 and bfloat16 at micro-batch 256: plain and fused, against eager and
#      compiled PyTorch;
#   5. trace: TinyLlama under zero2, zero3 and fsdp with forced collectives over NCCL, two steps
#      traced ([train] trace_steps), and bench/trace_overlap.py's table of them: how much of each
#      step's communication ran beside its computation (overlap.md; the traces, gzipped, beside it);
#   6. table: scripts/gpu_table.py (every strategy against single, forced collectives, Gloo ranks).
# Each stage writes its log (and gpu_peers' JSON) into the output directory and prints its wall
# time; `goals.md` collects the gpu_peers tables. `bench/gpu_goals.sh --help` lists the options.
set -uo pipefail

usage() {
  cat <<'USAGE'
Usage: bench/gpu_goals.sh [--out DIR] [--stages tests,llama,vit,trace,table] [--repeats N] [--smoke]

  --out DIR      where logs, JSON and goals.md go (default: gpu-goals; on a device machine: $OUT)
  --stages LIST  which stages run, in this order (default: tests,llama,vit,trace,table)
  --repeats N    gpu_peers.py repeats of every cell (default 2: each side runs twice, alternating)
  --smoke        check this script on the CPU: no build (STRATA_BIN or build/bin/strata), quick
                 shapes, 3 steps, one repeat, vit at micro-batch 16, no compiled peer,
                 experiments/llama_text.toml traced; the tests and table stages are left out
Environment: STRATA_GPU_BUILD_DIR (default build-gpu), STRATA_GPU_PYTHON (default python3) as for
scripts/gpu_check.sh; STRATA_GOALS_LLAMA_STEPS (20), STRATA_GOALS_VIT_STEPS (100),
STRATA_GOALS_LOSS_CHUNK (4096: llama's loss_chunk_tokens in the fused runs).
USAGE
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUTDIR="${OUT:-gpu-goals}"
STAGES="tests,llama,vit,trace,table"
REPEATS=2
SMOKE=0
while (($#)); do
  case "$1" in
    -h|--help) usage; exit 0 ;;
    --out) OUTDIR="${2:?--out takes a directory}"; shift 2 ;;
    --stages) STAGES="${2:?--stages takes a list}"; shift 2 ;;
    --repeats) REPEATS="${2:?--repeats takes a number}"; shift 2 ;;
    --smoke) SMOKE=1; shift ;;
    *) echo "gpu_goals: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
for s in ${STAGES//,/ }; do
  case "$s" in tests|llama|vit|trace|table) ;; *) echo "gpu_goals: unknown stage '$s' (tests, llama, vit, trace, table)" >&2; exit 2 ;; esac
done
[[ "$REPEATS" =~ ^[1-9][0-9]*$ ]] || { echo "gpu_goals: --repeats takes a positive integer" >&2; exit 2; }
cd "$ROOT"
say() { printf 'gpu_goals: %s\n' "$*"; }
# Nothing is created before the GPU is found (a CPU machine's refusal leaves no gpu-goals/ behind).
if ((!SMOKE)) && { ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; }; then
  say "no NVIDIA GPU on this machine (nvidia-smi -L finds none); --smoke checks this script on the CPU."
  exit 1
fi
mkdir -p "$OUTDIR"
OUTDIR="$(realpath -- "$OUTDIR")"
has_stage() { [[ ",$STAGES," == *",$1,"* ]]; }

PY="${STRATA_GPU_PYTHON:-python3}"
CHUNK="${STRATA_GOALS_LOSS_CHUNK:-4096}"
PEERS=(--repeats "$REPEATS")
TRACED=examples/tinyllama_text.toml
VIT_MICRO=256
if ((SMOKE)); then
  STRATA="${STRATA_BIN:-$ROOT/build/bin/strata}"
  PY="${STRATA_GPU_PYTHON:-${STRATA_PYTHON:-python3}}"
  PEERS=(--device cpu --quick --steps 3 --repeats 1 --no-compile)
  CHUNK=16
  VIT_MICRO=16  # the CPU's step at 256 (1.4 s in bfloat16) proves nothing more about the script
  TRACED=experiments/llama_text.toml
  STAGES="$(echo ",$STAGES," | sed -e 's/,tests,/,/' -e 's/,table,/,/' -e 's/^,//' -e 's/,$//')"
else
  BUILD="$(realpath -ms -- "${STRATA_GPU_BUILD_DIR:-build-gpu}")"
  t0=$SECONDS
  STRATA_GPU_BUILD_DIR="$BUILD" STRATA_GPU_PYTHON="$PY" scripts/gpu_check.sh --build-only >"$OUTDIR/build.log" 2>&1
  rc=$?
  say "build: exit $rc in $((SECONDS - t0)) s (log: build.log)"
  if ((rc != 0)); then tail -40 "$OUTDIR/build.log"; exit 1; fi
  STRATA="$BUILD/bin/strata"
  DEPS="${STRATA_GPU_DEPS:-$BUILD/deps}"
  if [[ -z "${STRATA_FASHION_MNIST_DIR:-}" && -d "$DEPS/usr/share/datasets/fashion-mnist" ]]; then
    export STRATA_FASHION_MNIST_DIR="$DEPS/usr/share/datasets/fashion-mnist"
  fi
fi

status=0
stage() {  # stage NAME COMMAND...: runs it with its output in NAME.log, a line with its exit and time
  local name="$1" t=$SECONDS rc
  shift
  "$@" >"$OUTDIR/$name.log" 2>&1
  rc=$?
  say "$name: exit $rc in $((SECONDS - t)) s (log: $name.log)"
  if ((rc != 0)); then status=1; tail -25 "$OUTDIR/$name.log"; fi
  return 0
}

if has_stage tests; then
  stage tests ctest --test-dir "$BUILD" -L gpu --output-on-failure
  grep -E "tests passed|Passed|Failed|Skipped|skipped" "$OUTDIR/tests.log" | tail -15
fi
FUSED=(--variant "fused model.fused_ops=true llama:model.loss_chunk_tokens=$CHUNK")
if has_stage llama; then
  stage llama "$PY" bench/gpu_peers.py --strata "$STRATA" --python "$PY" --workloads llama \
    --steps "${STRATA_GOALS_LLAMA_STEPS:-20}" --no-eager "${PEERS[@]}" "${FUSED[@]}" \
    --variant "fsdp strategy.name=fsdp" --variant "zero3 strategy.name=zero3" --json "$OUTDIR/llama.json"
fi
if has_stage vit; then
  stage vit "$PY" bench/gpu_peers.py --strata "$STRATA" --python "$PY" --workloads vit,vit_bf16 \
    --micro-batches "$VIT_MICRO" --steps "${STRATA_GOALS_VIT_STEPS:-100}" "${PEERS[@]}" "${FUSED[@]}" \
    --json "$OUTDIR/vit.json"
fi
if has_stage trace; then
  traces=()
  for strategy in zero2 zero3 fsdp; do
    stage "trace-$strategy" "$STRATA" run "$TRACED" --out "$OUTDIR/trace-$strategy" --set "strategy.name=$strategy" \
      --set distributed.force_collectives=true --set train.steps=6 --set 'train.trace_steps=[4,5]' \
      --set eval.batches=1
    [[ -f "$OUTDIR/trace-$strategy/trace/rank_0.pt.trace.json" ]] && traces+=("$OUTDIR/trace-$strategy/trace/rank_0.pt.trace.json")
  done
  if ((${#traces[@]})); then
    stage overlap "$PY" bench/trace_overlap.py "${traces[@]}" --json "$OUTDIR/overlap.json"
    sed -e "s|$OUTDIR/||" "$OUTDIR/overlap.log" | tee "$OUTDIR/overlap.md"
    gzip -f "${traces[@]}"
  fi
fi
if has_stage table; then
  stage table "$PY" scripts/gpu_table.py --strata "$STRATA" --out "$OUTDIR/table" --steps 20
  sed -n '/^|/,$p' "$OUTDIR/table.log"
fi
present=()
for j in "$OUTDIR"/llama.json "$OUTDIR"/vit.json; do [[ -f "$j" ]] && present+=("$j"); done
if ((${#present[@]})); then
  "$PY" bench/gpu_peers.py --report "${present[@]}" >"$OUTDIR/goals.md" 2>&1
  cat "$OUTDIR/goals.md"
fi
if ((status == 0)); then say "every stage passed"; else say "some stage FAILED (see above)"; fi
exit "$status"
