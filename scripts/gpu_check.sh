#!/usr/bin/env bash
# On a GPU machine (e.g. the H200): build the extension against the machine's torch, run
# the whole test suite (GPU tests included) and the main commands. Logs go to $OUT when
# set (else /tmp/cudnn_explorer_check). Exit status: that of the test suite.
# GPU_CHECK_PARTS="tests main engines" (default) picks the parts, so that the check can be split
# over two calls where one machine call is time-limited; GPU_CHECK_BENCH=1 adds the
# benchmarks under scripts/.
set -uo pipefail
cd "$(dirname "$0")/.."
LOG=${OUT:-/tmp/cudnn_explorer_check}
mkdir -p "$LOG"
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
PARTS=${GPU_CHECK_PARTS:-tests main engines}
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

# Note [compiler on the GPU machine]: there CXX points at /opt/gcc/bin/g++, a wrapper whose
# link put a private copy of libstdc++'s iostreams into _C.so; the first std::ostream use
# then crashed (SIGSEGV in Problem's constructor). The system g++ of the same version
# links libstdc++ dynamically and works. Override with CE_CXX.
if [ -n "${CE_CXX:-}" ]; then export CXX="$CE_CXX";
elif [ -x /usr/bin/g++ ]; then export CXX=/usr/bin/g++ CC=/usr/bin/gcc; fi
echo "== build (CXX=${CXX:-default})"
start=$(date +%s)
# build_ext --inplace: no pip, no build isolation (the machine may have no internet).
if ! "$PY" setup.py build_ext --inplace > "$LOG/build.log" 2>&1; then
  tail -40 "$LOG/build.log"; echo "BUILD FAILED"; exit 1
fi
echo "built in $(( $(date +%s) - start )) s"

rc=0
if [[ " $PARTS " == *" tests "* ]]; then
  echo "== tests"
  # The engine-config tests run last, in their own step (below).
  "$PY" -m pytest -q -rs tests --ignore=tests/test_gpu_engines.py 2>&1 | tee "$LOG/tests.txt"
  rc=${PIPESTATUS[0]}
fi

if [[ " $PARTS " == *" main "* ]]; then
  echo "== main commands"
  {
    echo '$ python -m cudnn_explorer --info'
    "$PY" -m cudnn_explorer --info
    echo
    echo '$ python -m cudnn_explorer --shape 32,3,224,224 --kernel 3'
    "$PY" -m cudnn_explorer --shape 32,3,224,224 --kernel 3 --quiet --json "$LOG/default.json"
    echo "exit: $?"
    "$PY" -m cudnn_explorer --load "$LOG/default.json" > /tmp/reloaded.txt \
      && echo "--load of the saved JSON renders without a GPU: exit $?"
    echo
    echo '$ python -m cudnn_explorer --shape 8,32,8,28,28 --out-channels 64 --groups 4 --layout nhwc --dtype float16'
    "$PY" -m cudnn_explorer --shape 8,32,8,28,28 --out-channels 64 --groups 4 --layout nhwc \
      --dtype float16 --quiet
    echo "exit: $?"
    echo
    echo '$ python -m cudnn_explorer --shape 32,64,56,56 --out-channels 64 --kernel 3 --dtype float16 --layout nhwc'
    "$PY" -m cudnn_explorer --shape 32,64,56,56 --out-channels 64 --kernel 3 --dtype float16 \
      --layout nhwc --quiet
    echo "exit: $?"
    for extra in "${GPU_CHECK_EXTRA[@]:-}"; do
      [ -n "$extra" ] || continue
      echo; echo "\$ python -m cudnn_explorer $extra"
      # shellcheck disable=SC2086
      "$PY" -m cudnn_explorer $extra; echo "exit: $?"
    done
  } 2>&1 | tee "$LOG/main.txt"
fi

if [[ " $PARTS " == *" engines "* ]]; then
  # Issue 5's runs: every engine config of the default problem and of a depthwise float16
  # channels_last problem, each under its own time limit (output and progress in one file,
  # JSON beside it). ENGINE_CLI_ARGS adds options (e.g. --engine-budget-s 60).
  for run in "default:--shape 32,3,224,224 --kernel 3" \
             "depthwise:--shape 32,64,56,56 --out-channels 64 --groups 64 --dtype float16 --layout nhwc"; do
    name=${run%%:*}; args=${run#*:}
    echo "== \$ python -m cudnn_explorer $args --engines ${ENGINE_CLI_ARGS:-}"
    # shellcheck disable=SC2086
    timeout -s ABRT "${ENGINE_RUN_TIMEOUT:-400}" "$PY" -X faulthandler -m cudnn_explorer $args \
      --engines --verbose ${ENGINE_CLI_ARGS:-} --json "$LOG/eng_$name.json" \
      > "$LOG/eng_$name.txt" 2>&1
    echo "exit: $?"
    sed -n '/^== summary/,$p' "$LOG/eng_$name.txt"
  done
  # The engine tests last, with -s so that progress shows, a stack dump of every thread
  # when one test runs past faulthandler_timeout, and a time limit of their own.
  echo "== engine-config tests (progress in $LOG/engines.txt)"
  timeout -s ABRT "${ENGINE_TEST_TIMEOUT:-900}" "$PY" -m pytest -q -rs -s \
    -o faulthandler_timeout="${ENGINE_TEST_STALL_S:-90}" tests/test_gpu_engines.py \
    > "$LOG/engines.txt" 2>&1
  erc=$?
  tail -25 "$LOG/engines.txt"
  echo "engine-config tests exit status: $erc"
  [ "$erc" = 0 ] || rc=$erc
fi

if [ -n "${GPU_CHECK_BENCH:-}" ]; then
  echo "== benchmarks"
  {
    echo '$ python scripts/bench_fidelity.py'; "$PY" scripts/bench_fidelity.py --json "$LOG/fidelity.json"
    echo; echo '$ python scripts/bench_overhead.py'; "$PY" scripts/bench_overhead.py
    echo; echo '$ python scripts/bench_repeat.py'; "$PY" scripts/bench_repeat.py
  } 2>&1 | tee "$LOG/bench.txt"
fi
echo "tests exit status: $rc"
exit "$rc"
