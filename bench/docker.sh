#!/usr/bin/env bash
# Compares, in one `go test -bench` run, a session command on the docker
# backend with `docker exec CONTAINER bash -c true` through the Docker CLI
# against the same container, and prints the ratio of the means. Target
# (issue "Docker backend"): at most 0.5.
#   bash bench/docker.sh [COUNT]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-40}
out=$(go test -run XXX -bench BenchmarkDocker -benchtime "${n}x" ./backend/docker/)
echo "$out" | grep -E '^Benchmark'
echo "$out" | python3 -c '
import re, sys
r = {}
for line in sys.stdin:
    m = re.match(r"BenchmarkDocker/(\S+?)-\d+\s+\d+\s+(\d+) ns/op", line)
    if m:
        r[m.group(1)] = int(m.group(2)) / 1e6
s, c = r["session-command"], r["docker-exec-cli"]
print(f"session command   {s:8.2f} ms")
print(f"docker exec (CLI) {c:8.2f} ms")
print(f"ratio             {s/c:8.2f}  (target <= 0.50)")
'
