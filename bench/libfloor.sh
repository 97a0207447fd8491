#!/usr/bin/env bash
# Builds, at OUT, a program that does nothing but link every package
# corral's executable links from outside the module (standard library and
# the libraries the project builds on: client-go, the moby client, the MCP
# SDK, cobra, koanf, ...), so that their package initialisation and the
# pages it touches run as they do at corral's start. Its start is the
# floor of any command in one executable that links them: Go runs every
# linked package's init before main, whether the command uses it or not.
#   bash bench/libfloor.sh OUT
set -euo pipefail
cd "$(dirname "$0")/.."
out=$1
src=$(mktemp -d "$PWD/_benchlibs.XXXXXX")
trap 'rm -rf "$src"' EXIT
{
  echo 'package main'
  echo 'import ('
  CGO_ENABLED=0 go list -deps ./cmd/corral | grep -v -e '^github.com/corralhq/corral' -e '/internal' -e '^internal/' -e '^vendor/' -e '^unsafe$' -e '^runtime' | sed 's/.*/\t_ "&"/'
  echo ')'
  echo 'func main() {}'
} >"$src/main.go"
CGO_ENABLED=0 go build -o "$out" "./$(basename "$src")"
