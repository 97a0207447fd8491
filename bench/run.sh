#!/usr/bin/env bash
# Compares `corral run -- true` with the equivalent raw bwrap command (the
# same mounts, from `corral run --dry-run`) in one hyperfine run, and prints
# the ratio of medians. Target (issue "corral run"): at most 1.3.
#   bash bench/run.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-60}
command -v hyperfine >/dev/null || { echo "bench: install hyperfine (apt install hyperfine)" >&2; exit 1; }
bin=$(mktemp -d /var/tmp/corral-bench.XXXXXX)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/corral" ./cmd/corral
work="$bin/work"; mkdir -p "$work"; cd "$work"
# The raw command: corral's own argv, quoted for hyperfine's shell-words split.
raw=$("$bin/corral" run --dry-run -- /bin/true | python3 -c 'import shlex,sys; print(" ".join(shlex.quote(l.rstrip("\n")) for l in sys.stdin))')
hyperfine -N -w 5 -r "$runs" --export-json "$bin/h.json" \
  -n raw-bwrap "$raw" \
  -n corral-run "$bin/corral run -- /bin/true" >/dev/null
python3 - "$bin/h.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
raw, cor = r["raw-bwrap"]["median"], r["corral-run"]["median"]
print(f"raw bwrap median   {raw*1000:7.2f} ms")
print(f"corral run median  {cor*1000:7.2f} ms")
print(f"ratio (corral/raw) {cor/raw:7.2f}  (target <= 1.30)")
PY
