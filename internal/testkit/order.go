package testkit

import (
	"fmt"
	"strings"
)

// OrderLines is how many stdout/stderr pairs OrderScript writes.
const OrderLines = 200

// OrderScript is a bash command line that writes OrderLines pairs of
// lines, "out N" to stdout then "err N" to stderr (bash builtins alone,
// for the smallest images), each pair after the
// one before. Run with one writer for both streams, its output must be
// OrderWant exactly: the order the agent reads is the order the command
// wrote (sandbox.SameWriter; one pipe on every backend).
const OrderScript = `for ((i = 1; i <= 200; i++)); do echo "out $i"; echo "err $i" >&2; done`

// OrderWant is OrderScript's output in write order.
func OrderWant() string {
	var b strings.Builder
	for i := 1; i <= OrderLines; i++ {
		fmt.Fprintf(&b, "out %d\nerr %d\n", i, i)
	}
	return b.String()
}
