#!/usr/bin/env bash
# The start-up cost of corral's executable, in one run:
#   - wall time (medians, runs interleaved): raw bwrap running `true` with corral's
#     own argv (from `corral run --dry-run`), `corral run -- true`, the
#     bare start of the binary (`corral --help`) and of an empty Go program;
#     the ratio of `corral run` to raw bwrap (target, issue 28: at most 1.6)
#     next to its floor, raw bwrap plus the empty Go program's start (the
#     least any Go command that starts bwrap can cost);
#   - instructions (valgrind callgrind, repeatable on a loaded machine) of
#     the binary's start in three modes: `--help`, the file server
#     (CORRAL_SANDBOXFS=serve, standard input at end of file) and the egress
#     forwarder (`__corral-net-forward --serve`, the same), and of corral's
#     own process in `corral run -- true` (bwrap's are not counted);
#   - package initialisation (GODEBUG=inittrace=1): allocations, summed.
# With a second binary (for example one built from main), every figure is
# given for it too, so before and after come from the same run.
#   bash bench/startup.sh [RUNS] [BASELINE_BINARY]
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-40}
base=${2:-}
command -v valgrind >/dev/null || { echo "bench: install valgrind (apt install valgrind)" >&2; exit 1; }
dir=$(mktemp -d /var/tmp/corral-startup-bench.XXXXXX)
trap 'rm -rf "$dir"' EXIT
CGO_ENABLED=0 go build -o "$dir/corral" ./cmd/corral
mkdir -p "$dir/empty"
printf 'package main\n\nfunc main() {}\n' >"$dir/empty/main.go"
(cd "$dir/empty" && printf 'module empty\n\ngo 1.26\n' >go.mod && CGO_ENABLED=0 go build -o "$dir/go-empty" .)
bash bench/libfloor.sh "$dir/go-libs"
bins=("$dir/corral")
names=(this)
if [ -n "$base" ]; then
  cp "$base" "$dir/base"
  bins+=("$dir/base")
  names+=(base)
fi
work="$dir/work"; mkdir -p "$work"; cd "$work"
raw=$("$dir/corral" run --dry-run -- /bin/true | python3 -c 'import shlex,sys; print(" ".join(shlex.quote(l.rstrip("\n")) for l in sys.stdin))')
# Interleaved (one run of each command in turn, RUNS times), so that a
# change of the machine's load during the run weighs on every command alike.
cmds=("raw-bwrap" "$raw" "go-empty" "$dir/go-empty" "go-libs" "$dir/go-libs")
for i in "${!bins[@]}"; do
  cmds+=("run-${names[$i]}" "${bins[$i]} run -- /bin/true" "help-${names[$i]}" "${bins[$i]} --help")
done
python3 - "$runs" "$dir/h.json" "${cmds[@]}" <<'PY'
import json, shlex, statistics, subprocess, sys, time
runs, out, rest = int(sys.argv[1]), sys.argv[2], sys.argv[3:]
cmds = [(rest[i], shlex.split(rest[i + 1])) for i in range(0, len(rest), 2)]
times = {name: [] for name, _ in cmds}
for i in range(runs + 3):  # the first three rounds warm up
    for name, argv in cmds:
        t = time.perf_counter()
        subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
        if i >= 3:
            times[name].append(time.perf_counter() - t)
json.dump({"results": [{"command": n, "median": statistics.median(v)} for n, v in times.items()]}, open(out, "w"))
PY

# callgrind: GODEBUG=asyncpreemptoff=1, as callgrind asserts on the Go
# runtime's preemption signal (SIGURG).
ir() { # ir BIN ENV... -- ARGS...: instructions of one start
  local bin=$1; shift; local env=(GODEBUG=asyncpreemptoff=1)
  while [ "$1" != -- ]; do env+=("$1"); shift; done; shift
  # callgrind sometimes asserts on a signal a child's exit brings
  # (SIGCHLD), under `corral run`: such a run counts nothing, so try again.
  local n
  for _ in 1 2 3 4 5 6 7 8; do
    env "${env[@]}" valgrind --tool=callgrind --trace-children=no --callgrind-out-file="$dir/cg.out" \
      "$bin" "$@" </dev/null >/dev/null 2>"$dir/cg.err" || true
    n=$(grep -o 'Collected : [0-9]*' "$dir/cg.err" | awk '{print $3}')
    [ -n "$n" ] && break
  done
  echo "${n:-0}"
}
inits() { GODEBUG=inittrace=1 "$1" --help 2>&1 >/dev/null | awk '/^init /{a+=$10} END{print a+0}'; }
for i in "${!bins[@]}"; do
  b=${bins[$i]}
  echo "${names[$i]} $(ir "$b" -- --help) $(ir "$b" CORRAL_SANDBOXFS=serve --) $(ir "$b" -- __corral-net-forward --serve) $(inits "$b") $(ir "$b" -- run -- /bin/true)"
done >"$dir/ir.txt"
python3 - "$dir/h.json" "$dir/ir.txt" <<'PY'
import json, sys
r = {x["command"]: x["median"] for x in json.load(open(sys.argv[1]))["results"]}
raw, empty, libs = r["raw-bwrap"], r["go-empty"], r["go-libs"]
print(f"raw bwrap median                 {raw*1000:8.2f} ms")
print(f"empty Go program median          {empty*1000:8.2f} ms")
print(f"libraries' start median          {libs*1000:8.2f} ms   (a program that only links corral's libraries, bench/libfloor.sh)")
print(f"floor (raw bwrap + Go start)     {(raw+empty)/raw:8.2f}   (the least a Go command starting bwrap can cost)")
print(f"floor (raw bwrap + libraries)    {(raw+libs)/raw:8.2f}   (the least a command of an executable linking them can cost)")
for line in open(sys.argv[2]):
    name, helpir, fsir, fwdir, allocs, runir = line.split()
    run, ver = r[f"run-{name}"], r[f"help-{name}"]
    print(f"[{name}] corral run median        {run*1000:8.2f} ms   ratio to raw bwrap {run/raw:5.2f} (target <= 1.60, issue 28)")
    print(f"[{name}] corral --help median     {ver*1000:8.2f} ms")
    print(f"[{name}] instructions: --help {int(helpir):,}  file server start {int(fsir):,}  forwarder start {int(fwdir):,}")
    runs = f"{int(runir):,}" if int(runir) else "not counted (callgrind stopped on the child's signal in every try)"
    print(f"[{name}] instructions of corral run -- true (corral's own, not bwrap's) {runs}")
    print(f"[{name}] init allocations (inittrace, summed) {allocs}")
PY
