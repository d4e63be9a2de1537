#!/usr/bin/env bash
# One device call: the parts of scripts/gpu_check.sh named in $1 under a deadline of $2 s,
# then every log packed into $OUT/logs.tgz (only a few files come back from a call).
set -u
parts=$1; deadline=${2:-540}
export GPU_CHECK_PARTS="$parts" OUT_LOGS=/tmp/ce_logs
mkdir -p "$OUT_LOGS"
OUT="$OUT_LOGS" timeout -s INT "$deadline" bash scripts/gpu_check.sh > "$OUT_LOGS/gpu_check.txt" 2>&1
echo "gpu_check exit: $?" >> "$OUT_LOGS/gpu_check.txt"
tar -czf "${OUT:-/tmp/out}/logs.tgz" -C "$OUT_LOGS" . 2>/dev/null
tail -60 "$OUT_LOGS/gpu_check.txt"
