#!/usr/bin/env bash
# On a GPU machine (e.g. the H200): build the extension against the machine's torch, run
# the whole test suite (GPU tests included) and the main commands. Logs go to $OUT when
# set (else /tmp/cudnn_explorer_check). Exit status: 0 when every part passed, else that
# of the last part that failed.
# GPU_CHECK_PARTS="tests main depthwise engine-tests fuzz targets model" (default) picks the parts; on a machine
# with several GPUs they run side by side, part i on GPU i mod N (each part's steps in
# order on its own GPU); GPU_CHECK_GPUS=N uses at most N GPUs. The benchmark parts run
# the modules of benchmarks/ (docs/benchmarks.md), each writing its JSON result to $LOG.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${OUT:-/tmp/cudnn_explorer_check}
mkdir -p "$LOG"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
PARTS=${GPU_CHECK_PARTS:-tests main depthwise engine-tests fuzz targets model}
if ls .whl/*.whl >/dev/null 2>&1; then  # wheels carried to a machine without internet
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu,utilization.gpu --format=csv
  "$PY" -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version())"
} > "$LOG/machine.txt" 2>&1
cat "$LOG/machine.txt"

# Note [compiler]: a g++ wrapper that links a private copy of libstdc++'s iostreams into
# _C.so makes the first std::ostream use crash (SIGSEGV in Problem's constructor); the
# system g++ links libstdc++ dynamically and works, so it is preferred. Override: CE_CXX.
if [ -n "${CE_CXX:-}" ]; then export CXX="$CE_CXX";
elif [ -x /usr/bin/g++ ]; then export CXX=/usr/bin/g++ CC=/usr/bin/gcc; fi
echo "== build (CXX=${CXX:-default})"
start=$(date +%s)
# A machine kept warm between calls keeps the extension built by the last one: the build is
# skipped when the sources, the compiler and torch are the ones it was built from.
stamp=$( { cat setup.py csrc/*; echo "${CXX:-}"; "$PY" -c 'import torch; print(torch.__version__)'; } \
  | sha256sum | cut -c1-16)
if [ -f build/.gpu_check_stamp ] && [ "$(cat build/.gpu_check_stamp)" = "$stamp" ] \
   && ls cudnn_explorer/_C*.so > /dev/null 2>&1; then
  echo "extension already built from these sources (stamp $stamp)"
# build_ext --inplace: no pip, no build isolation (the machine may have no internet).
elif ! "$PY" setup.py build_ext --inplace > "$LOG/build.log" 2>&1; then
  tail -40 "$LOG/build.log"; echo "BUILD FAILED"; exit 1
else
  mkdir -p build && echo "$stamp" > build/.gpu_check_stamp
  echo "built in $(( $(date +%s) - start )) s"
fi


# -v: each test's outcome as it ends (a call cut short still shows how far it got); a
# stack dump of every thread when one test runs past faulthandler_timeout.
export CE_TEST_TIMES="$LOG/test_times.txt"  # each test's seconds as it ends (tests/conftest.py)
PYTEST=(-m pytest -v -rs --durations=25 -o faulthandler_timeout="${TEST_STALL_S:-180}")
part_tests() {
  # The engine-config tests are a part of their own (engine-tests).
  "$PY" "${PYTEST[@]}" tests --ignore=tests/test_gpu_engines.py \
    > "$LOG/tests.txt" 2>&1
}
gpu_test_files() {  # the GPU test files but the engine configs' (a part of their own)
  ls tests/test_gpu*.py | grep -v '^tests/test_gpu_engines.py$'
}
# The same tests in two halves, for two GPUs or two calls: the GPU test files, the rest.
part_tests-gpu() {
  local files; files=$(gpu_test_files)
  # shellcheck disable=SC2086
  "$PY" "${PYTEST[@]}" $files \
    > "$LOG/tests-gpu.txt" 2>&1
}
# The same GPU test files under pytest-xdist (TEST_WORKERS processes, default 6), then
# those that hold most of the GPU's memory (marked gpu_alone; they skip among parallel
# workers) alone. Each half is a part of its own too, for calls of limited length
# (docs/gpu-check.md has how long they take).
part_tests-gpu-shared() {
  local files; files=$(gpu_test_files)
  # shellcheck disable=SC2086
  "$PY" "${PYTEST[@]}" -n "${TEST_WORKERS:-6}" $files > "$LOG/tests-gpu-shared.txt" 2>&1
}
part_tests-gpu-alone() {
  local files; files=$(gpu_test_files)
  # shellcheck disable=SC2086
  "$PY" "${PYTEST[@]}" -m gpu_alone $files > "$LOG/tests-gpu-alone.txt" 2>&1
}
part_tests-gpu-parallel() {
  local r=0
  part_tests-gpu-shared || r=$?
  part_tests-gpu-alone || r=$?
  return $r
}
# The model and advise GPU tests alone (a first look at a change to either).
part_tests-pinning() {  # the pinned convolution op: numerics, autograd, compile, graphs
  # -s: the autograd checks print their measured errors and counts
  "$PY" "${PYTEST[@]}" -s tests/test_gpu_pinning.py tests/test_gpu_pinning_autograd.py \
    tests/test_gpu_pinning_ahead.py \
    > "$LOG/tests-pinning.txt" 2>&1
}
part_tests-gpu-problem() {  # the GPU test files but the model's, engines' and pinning's
  local files
  files=$(ls tests/test_gpu*.py | grep -v -E '^tests/test_gpu_(engines|model|pinning|pinning_autograd).py$')
  "$PY" "${PYTEST[@]}" $files > "$LOG/tests-gpu-problem.txt" 2>&1
}
part_tests-kernels() {  # kernel names from captured graphs against the profiler's
  "$PY" "${PYTEST[@]}" tests/test_gpu_kernels.py > "$LOG/tests-kernels.txt" 2>&1
}
part_tests-pytorch() {  # PyTorch's children: every mode, started ahead, a hung one
  "$PY" "${PYTEST[@]}" tests/test_gpu_pytorch.py > "$LOG/tests-pytorch.txt" 2>&1
}
main_job() {  # LOGNAME: the main job alone, with its wall-time breakdown (--verbose)
  "$PY" -m cudnn_explorer --shape 32,3,224,224 --kernel 3 --verbose --no-store \
    --json "$LOG/$1.json" > "$LOG/$1.txt" 2>&1
}
part_main-job() { main_job main-job; }
part_main-job-bench() {  # the main job cold and warm, in turns (benchmarks/main_job.py)
  "$PY" -m benchmarks.main_job --json "$LOG/main_job.json" > "$LOG/main-job-bench.txt" 2>&1
}
# The same with an empty CUDA JIT cache (CUDA_CACHE_PATH a new folder), as on a machine
# that never built the run-time compiled plans: after other GPU work their builds took
# 0.1 s, on fresh machines 1.0-1.8 s (docs/benchmarks.md).
part_main-job-cold() {
  local cache r; cache=$(mktemp -d)
  ( export CUDA_CACHE_PATH=$cache; main_job main-job-cold ); r=$?
  rm -rf "$cache"; return $r
}
part_tests-model() {
  "$PY" "${PYTEST[@]}" tests/test_gpu_model.py > "$LOG/tests-model.txt" 2>&1
}
part_tests-rest() {
  local files; files=$(ls tests/test_*.py | grep -v '^tests/test_gpu')
  # shellcheck disable=SC2086
  "$PY" "${PYTEST[@]}" $files > "$LOG/tests-rest.txt" 2>&1
}

part_main() {
  {
    echo '$ python -m cudnn_explorer --info'
    "$PY" -m cudnn_explorer --info
    echo
    echo '$ python -m cudnn_explorer --shape 32,3,224,224 --kernel 3'
    "$PY" -m cudnn_explorer --shape 32,3,224,224 --kernel 3 --quiet --json "$LOG/default.json"
    local r=$?; echo "exit: $r"
    "$PY" -m cudnn_explorer --load "$LOG/default.json" > /tmp/reloaded_$$.txt \
      && echo "--load of the saved JSON renders without a GPU: exit $?"
    # every engine config of the default problem, from the saved file
    "$PY" -m cudnn_explorer --load "$LOG/default.json" --engines > "$LOG/default_engines.txt"
    echo
    # the same command again answers from the results store: its wall time, process start
    # and imports included, beside that of importing torch alone
    echo '$ python -m cudnn_explorer --shape 32,3,224,224 --kernel 3   (again)'
    local t0 t1
    t0=$(date +%s%N)
    "$PY" -m cudnn_explorer --shape 32,3,224,224 --kernel 3 > "$LOG/default_again.txt" 2>&1
    echo "exit: $?"
    t1=$(date +%s%N)
    grep -i 'store' "$LOG/default_again.txt" | head -2
    echo "second run: $(( (t1 - t0) / 1000000 )) ms wall"
    t0=$(date +%s%N); "$PY" -c 'import torch, cudnn_explorer._C'; t1=$(date +%s%N)
    echo "python -c 'import torch, cudnn_explorer._C' alone: $(( (t1 - t0) / 1000000 )) ms wall"
    echo
    # A 3-D grouped problem, engine configs left out to keep the check within one call
    # (the depthwise part explores a second problem's engine configs).
    echo '$ python -m cudnn_explorer --shape 8,32,8,28,28 --out-channels 64 --groups 4 --layout nhwc --dtype float16 --no-engines'
    "$PY" -m cudnn_explorer --shape 8,32,8,28,28 --out-channels 64 --groups 4 --layout nhwc \
      --dtype float16 --quiet --no-engines
    echo "exit: $?"
    echo
    # kernels under 20 us: the eager column beside the graph median
    echo '$ python -m cudnn_explorer --shape 8,32,14,14 --out-channels 32 --dtype float16 --layout nhwc --direction fwd --engine-configs 2 --engine-budget-s 20'
    "$PY" -m cudnn_explorer --shape 8,32,14,14 --out-channels 32 --dtype float16 --layout nhwc \
      --direction fwd --engine-configs 2 --engine-budget-s 20 --quiet --json "$LOG/small.json"
    echo "exit: $?"
    echo
    # bfloat16: Find under every math type (tensor-core rows listed), a fair summary
    echo '$ python -m cudnn_explorer --shape 32,64,56,56 --out-channels 64 --dtype bfloat16 --layout nhwc --direction fwd --engine-configs 2 --engine-budget-s 30'
    "$PY" -m cudnn_explorer --shape 32,64,56,56 --out-channels 64 --dtype bfloat16 --layout nhwc \
      --direction fwd --engine-configs 2 --engine-budget-s 30 --quiet --json "$LOG/bf16.json"
    echo "exit: $?"
    for extra in "${GPU_CHECK_EXTRA[@]:-}"; do
      [ -n "$extra" ] || continue
      echo; echo "\$ python -m cudnn_explorer $extra"
      # shellcheck disable=SC2086
      "$PY" -m cudnn_explorer $extra; echo "exit: $?"
    done
    return $r
  } > "$LOG/main.txt" 2>&1
}

part_depthwise() {
  # A second problem: every engine config of a depthwise float16 channels_last
  # convolution, listed (--engines), progress with timestamps in the same file.
  local args="--shape 32,64,56,56 --out-channels 64 --groups 64 --dtype float16 --layout nhwc"
  echo "\$ python -m cudnn_explorer $args --engines ${ENGINE_CLI_ARGS:-}" > "$LOG/eng_depthwise.txt"
  # shellcheck disable=SC2086
  timeout -s ABRT "${ENGINE_RUN_TIMEOUT:-500}" "$PY" -X faulthandler -m cudnn_explorer $args \
    --engines --verbose ${ENGINE_CLI_ARGS:-} --json "$LOG/eng_depthwise.json" \
    >> "$LOG/eng_depthwise.txt" 2>&1
}

part_targets() {
  # Deviceless heuristics from this GPU's dumped profile vs the device's own ranking.
  "$PY" -m cudnn_explorer --dump-device-profile "$LOG/device_profile.json" > "$LOG/targets.txt" 2>&1
  "$PY" scripts/check_targets.py --json "$LOG/targets.json" >> "$LOG/targets.txt" 2>&1
}

# ResNet-50 (batch 32, AMP fp16, channels_last, training step), quick profile: the sweep
# against PyTorch's own first iteration, and the tool's GPU memory (benchmarks/model_sweep.py).
part_model() {
  "$PY" -m benchmarks.model_sweep --json "$LOG/model_sweep.json" > "$LOG/model.txt" 2>&1
}

# Pinning a model (benchmarks/pinned_step.py): its sweep (quick profile; PIN_BUDGET_MS
# re-timing budget, default the profile's), the plan file written from it (policy best),
# then off, on and pinned in fresh processes, in turns. PIN_SWEEPS=DIR uses
# DIR/NAME.sweep.json, a sweep carried along, where it exists.
pin_bench() {  # NAME MODEL-ARGS...
  local name=$1; shift
  local sweep=$LOG/$name.sweep.json
  if [ -n "${PIN_SWEEPS:-}" ] && [ -f "$PIN_SWEEPS/$name.sweep.json" ]; then
    sweep=$PIN_SWEEPS/$name.sweep.json
  else
    "$PY" -m cudnn_explorer model "$@" --no-store --json "$sweep" \
      ${PIN_BUDGET_MS:+--budget-ms "$PIN_BUDGET_MS"} > "$LOG/$name.sweep.txt" 2>&1 || return 1
  fi
  "$PY" -m cudnn_explorer plans write "$sweep" -o "$LOG/$name.plans.json" \
    > "$LOG/$name.plans.txt" 2>&1 || return 1
  "$PY" -m cudnn_explorer plans check "$LOG/$name.plans.json" >> "$LOG/$name.plans.txt" 2>&1
  "$PY" -m benchmarks.pinned_step --plans "$LOG/$name.plans.json" --model "$@" \
    --json "$LOG/$name.bench.json" > "$LOG/$name.bench.txt" 2>&1
}
part_pin-resnet50() { pin_bench pin-resnet50 resnet50 --batch 32 --amp fp16 --channels-last; }
part_pin-mobilenet() {
  pin_bench pin-mobilenet mobilenet_v3_large --batch 16 --amp fp16 --channels-last --eval
}

# The quick profile against the thorough one (benchmarks/search.py; SEARCH_ARGS picks the
# problems and repeats, e.g. "--problems default,bf16-1x1-s2-nhwc --repeats 2").
part_search() {
  "$PY" -m benchmarks.search ${SEARCH_ARGS:-} --json "$LOG/search.json" > "$LOG/search.txt" 2>&1
}

# What the tool's processes cost in GPU memory, and the main job with MEMORY_FREE_MIB (default
# 2048) of the GPU free, as on a GPU shared with a training job (benchmarks/memory.py).
part_memory() {
  "$PY" -m benchmarks.memory --leave-free "${MEMORY_FREE_MIB:-2048}" \
    --json "$LOG/memory.json" > "$LOG/memory.txt" 2>&1
}

# A timm model's sweep (quick profile; PIN_BUDGET_MS as for the pinning sweeps).
part_timm-sweep() {
  "$PY" -m cudnn_explorer model timm:${TIMM_MODEL:-convnext_atto} --batch 32 --amp bf16 \
    --channels-last --no-store --json "$LOG/timm.sweep.json" \
    ${PIN_BUDGET_MS:+--budget-ms "$PIN_BUDGET_MS"} > "$LOG/timm.txt" 2>&1
}

# The pinned op's host cost per call against ATen's (benchmarks/pin_host.py).
part_pin-host() {
  "$PY" -m benchmarks.pin_host --json "$LOG/pin-host.json" > "$LOG/pin-host.txt" 2>&1
}

part_torchrun() {
  # Needs every GPU of the machine, so run it alone (GPU_CHECK_PARTS=torchrun): the
  # ResNet-50 sweep on one GPU and under torchrun on all (benchmarks/model_sweep.py --gpus).
  local n; n=$(nvidia-smi -L | grep -c '^GPU')
  if [ "$n" -lt 2 ]; then
    echo "torchrun: needs 2 GPUs or more, this machine has $n" >> "$LOG/torchrun.txt"; return 2
  fi
  env -u CUDA_VISIBLE_DEVICES "$PY" -m benchmarks.model_sweep --gpus "$n" \
    --json "$LOG/torchrun.json" >> "$LOG/torchrun.txt" 2>&1
}

# PyTorch's first calls of one convolution per mode, each process its own empty JIT cache
# or one shared per round (benchmarks/cold_start.py --first-calls; FIRST_CALLS_ARGS picks
# the problem and repeats).
part_first-calls() {
  # shellcheck disable=SC2086
  "$PY" -m benchmarks.cold_start --first-calls ${FIRST_CALLS_ARGS:-} \
    --json "$LOG/first-calls.json" > "$LOG/first-calls.txt" 2>&1
}

# A fresh process's first output and first training step per mode: benchmark on and off,
# pinned plans built on first call, ahead, and kept (benchmarks/cold_start.py;
# COLD_START_ARGS picks the models and repeats).
part_cold-start() {
  # shellcheck disable=SC2086
  "$PY" -m benchmarks.cold_start ${COLD_START_ARGS:-} --json "$LOG/cold-start.json" \
    > "$LOG/cold-start.txt" 2>&1
}

# A training script recorded, tuned and run pinned with no change to its code, against
# benchmark on and off (benchmarks/zero_code.py; ZERO_CODE_ARGS picks configs and repeats).
# record and run need the start-up hook: installed into this Python first.
part_zero-code() {
  "$PY" -m cudnn_explorer hook install > "$LOG/zero-code.txt" 2>&1 || return 1
  # shellcheck disable=SC2086
  "$PY" -m benchmarks.zero_code ${ZERO_CODE_ARGS:-} --json "$LOG/zero-code.json" \
    >> "$LOG/zero-code.txt" 2>&1
}

part_fuzz() {
  # Random valid and invalid problems through the API: only the project's errors, no crash.
  timeout -s INT "${FUZZ_TIMEOUT_S:-400}" "$PY" scripts/fuzz_api.py --count "${FUZZ_COUNT:-10000}" \
    --out "$LOG/fuzz_api.jsonl" > "$LOG/fuzz.txt" 2>&1
}

engine_tests() {  # LOGNAME [pytest args]
  # -s: progress shows; a stack dump of every thread when one test runs past
  # faulthandler_timeout; a time limit of their own.
  local log=$1; shift
  timeout -s ABRT "${ENGINE_TEST_TIMEOUT:-500}" "$PY" -m pytest -q -rs -s \
    -o faulthandler_timeout="${ENGINE_TEST_STALL_S:-120}" tests/test_gpu_engines.py "$@" \
    > "$LOG/$log.txt" 2>&1
}
part_engine-tests() { engine_tests engines; }
# The same tests in two halves, for two GPUs: the dense problem's and the problem-free
# tests, then the depthwise problem's.
part_engine-tests-dense() { engine_tests engines-dense -k "dense or not fp16"; }
part_engine-tests-depthwise() { engine_tests engines-depthwise -k depthwise; }

show_part() {  # what each part's log says, for the call's output
  case $1 in
    tests*) grep -E '^(FAILED|ERROR)' "$LOG/$1.txt"; tail -4 "$LOG/$1.txt" ;;
    main) cat "$LOG/main.txt" ;;
    main-job|main-job-cold) grep -v ': engine [0-9]*/' "$LOG/$1.txt" | tail -25 ;;
    depthwise) sed -n '/^== summary/,$p' "$LOG/eng_depthwise.txt"; tail -3 "$LOG/eng_depthwise.txt" ;;
    engine-tests*) tail -25 "$LOG/engines${1#engine-tests}.txt" | sed 's/^/  /' ;;
    fuzz) grep -v '^fuzz: ' "$LOG/fuzz.txt" | tail -25 ;;
    targets) tail -4 "$LOG/targets.txt" ;;
    model) tail -40 "$LOG/model.txt" ;;
    memory|first-calls|search|pin-host|main-job-bench|cold-start|zero-code) tail -30 "$LOG/$1.txt" ;;
    torchrun) tail -30 "$LOG/torchrun.txt" ;;
  esac
}

ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
[ "${ngpu:-0}" -ge 1 ] || ngpu=1
[ -z "${GPU_CHECK_GPUS:-}" ] || [ "$GPU_CHECK_GPUS" -ge "$ngpu" ] || ngpu=$GPU_CHECK_GPUS
read -r -a parts <<< "$PARTS"
echo "== parts: ${parts[*]} on $ngpu GPU(s)"
declare -A lane_of
pids=()
rm -f /tmp/gpu_check_rc_*
for ((g = 0; g < ngpu; g++)); do
  lane=()
  for ((i = g; i < ${#parts[@]}; i += ngpu)); do lane+=("${parts[$i]}"); lane_of[${parts[$i]}]=$g; done
  [ ${#lane[@]} -gt 0 ] || continue
  (
    export CUDA_VISIBLE_DEVICES=$g
    for part in "${lane[@]}"; do
      start=$(date +%s)
      if declare -F "part_$part" > /dev/null; then "part_$part"; r=$?; else echo "unknown part $part"; r=2; fi
      echo "$r $(( $(date +%s) - start ))" > "/tmp/gpu_check_rc_$part"
    done
  ) &
  pids+=($!)
done
wait "${pids[@]}"

rc=0
for part in "${parts[@]}"; do
  read -r r secs < "/tmp/gpu_check_rc_$part" || { r=1; secs=?; }
  echo "== part $part (GPU ${lane_of[$part]}): exit $r after $secs s"
  show_part "$part"
  [ "$r" = 0 ] || rc=$r
done

echo "gpu_check exit status: $rc"
exit "$rc"
