#!/usr/bin/env bash
# Compares `corral run -- true` with the equivalent raw bwrap command (the
# same mounts, from `corral run --dry-run`) in one hyperfine run, and prints
# the ratio of medians. Target (issue 28): at most 1.6, next to the floor.
#
# Three floors are measured in the same run, so the ratio can be read: the
# start of a Go program that does nothing (any Go CLI pays it before its
# first line runs); raw bwrap plus that start, the least a Go command
# that starts bwrap can cost; and raw bwrap plus the start of a program
# that only links the packages corral links from outside its module
# (bench/libfloor.sh), the least any command of one executable that
# links them can cost. Run as root, a fourth: a root caller's sandbox holds
# an unprivileged identity and starts from a mount namespace prepared for
# it, which raw bwrap run by root as root does not pay; bench/rootfloor
# does that and nothing else, and corral is compared with it too.
#   bash bench/run.sh [RUNS]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-60}
command -v hyperfine >/dev/null || { echo "bench: install hyperfine (apt install hyperfine)" >&2; exit 1; }
bin=$(mktemp -d /var/tmp/corral-bench.XXXXXX)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/corral" ./cmd/corral
mkdir -p "$bin/empty"
printf 'package main\n\nfunc main() {}\n' > "$bin/empty/main.go"
(cd "$bin/empty" && printf 'module empty\n\ngo 1.26\n' > go.mod && go build -o "$bin/go-empty" .)
bash bench/libfloor.sh "$bin/go-libs"
root=()
if [ "$(id -u)" = 0 ]; then
  CGO_ENABLED=0 go build -tags corralbench -o "$bin/rootfloor" ./bench/rootfloor
  mkdir -p "$bin/state"
  root=(-n root-floor "$bin/rootfloor $bin/state")
fi
work="$bin/work"; mkdir -p "$work"; cd "$work"
# The raw command: corral's own argv, quoted for hyperfine's shell-words split.
raw=$("$bin/corral" run --dry-run -- /bin/true | python3 -c 'import shlex,sys; print(" ".join(shlex.quote(l.rstrip("\n")) for l in sys.stdin))')
hyperfine -N -w 5 -r "$runs" --export-json "$bin/h.json" \
  -n raw-bwrap "$raw" \
  -n corral-run "$bin/corral run -- /bin/true" \
  -n go-empty "$bin/go-empty" \
  -n go-libs "$bin/go-libs" "${root[@]}" >/dev/null
python3 - "$bin/h.json" <<'PY'
import json, sys
r = {x["command"]: x for x in json.load(open(sys.argv[1]))["results"]}
raw, cor, empty, libs = r["raw-bwrap"]["median"], r["corral-run"]["median"], r["go-empty"]["median"], r["go-libs"]["median"]
print(f"raw bwrap median          {raw*1000:7.2f} ms")
print(f"corral run median         {cor*1000:7.2f} ms")
print(f"empty Go program median   {empty*1000:7.2f} ms")
print(f"ratio (corral/raw)        {cor/raw:7.2f}  (target <= 1.60, issue 28)")
print(f"libraries' start median   {libs*1000:7.2f} ms  (a program that only links corral's libraries, bench/libfloor.sh)")
print(f"floor (raw + Go start)    {(raw+empty)/raw:7.2f}  (the least any Go command starting bwrap can cost)")
print(f"floor (raw + libraries)   {(raw+libs)/raw:7.2f}  (the least a command of an executable linking them can cost)")
if "root-floor" in r:
    rf = r["root-floor"]["median"]
    print(f"root caller's floor       {rf*1000:7.2f} ms  (bench/rootfloor: a Go program starting the same bwrap as a root caller's sandbox must)")
    print(f"  plus the libraries      {(rf+libs-empty)*1000:7.2f} ms  ratio corral run / it {cor/(rf+libs-empty):.2f}  (issue 28: 1.60 over the floor of 1.29 leaves 1.24x a floor)")
PY
