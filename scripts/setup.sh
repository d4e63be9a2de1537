#!/usr/bin/env bash
# Fresh machine -> .venv with torch (CUDA build, brings cuDNN and its headers) and the
# built extension cudnn_explorer._C. Works without a GPU. Idempotent: a second run installs
# nothing new and rebuilds the extension only when its sources, setup.py or torch changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
say() { echo "cudnn_explorer setup: $*" >&2; }

if [ ! -x .venv/bin/python ]; then
  say "creating .venv"
  "$PY" -m venv .venv
fi
if ! .venv/bin/python -c "import torch, numpy, tabulate, pybind11, ninja" >/dev/null 2>&1; then
  say "installing torch with CUDA and cuDNN and the build tools (downloads about 6 GB the first time; several minutes)"
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q --progress-bar on -r requirements.txt

# The extension is rebuilt only when what it is built from changed: its sources, setup.py,
# and the torch it is compiled against.
stamp=.venv/cudnn_explorer.build-stamp
want=$( { cat setup.py csrc/*; .venv/bin/python -c "import torch; print(torch.__version__)"; } \
        | sha256sum | cut -d' ' -f1)
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] && ls cudnn_explorer/_C*.so >/dev/null 2>&1 \
   && .venv/bin/python -c "import cudnn_explorer.measure.native as n; n.load()" >/dev/null 2>&1; then
  say "extension up to date (sources and torch unchanged): not rebuilt"
else
  say "building the extension (about 1.5 minutes)"
  start=$(date +%s)
  # Against the torch just installed (no build isolation: the extension must match it).
  .venv/bin/python -m pip install -q --no-build-isolation --no-deps -e . \
    || { say "building the extension failed (see above)"; exit 1; }
  echo "$want" > "$stamp"
  say "built in $(( $(date +%s) - start )) s"
fi
.venv/bin/python -c "import cudnn_explorer.measure.native as n; n.load(); print('cudnn_explorer: extension built:', n.build_info())"
