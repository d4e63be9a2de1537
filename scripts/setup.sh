#!/usr/bin/env bash
# Fresh machine -> .venv with torch (CUDA build, brings cuDNN and its headers) and the
# built extension cudnn_explorer._C. Works without a GPU. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
.venv/bin/python -m pip install -q -r requirements.txt
# Build against the torch just installed (no build isolation: the extension must match it).
.venv/bin/python -m pip install -q --no-build-isolation --no-deps -e . \
  || { echo "cudnn_explorer: building the extension failed (see above)" >&2; exit 1; }
.venv/bin/python -c "import cudnn_explorer.measure.native as n; n.load(); print('cudnn_explorer: extension built:', n.build_info())"
