// Package reexec is the one registry of the helper modes of corral's
// executable: the same binary, re-executed, serves as the egress
// forwarder and trampoline, the sandboxed file server, the port relay
// and the docker helpers; cmd/corral-helper links the same modes alone,
// and ProtocolMode lets corral check that a helper executable speaks its
// protocol before it hands it a sandbox (package helperbin). Helper packages Register their modes from init (a map insert,
// nothing more), and main calls Init first thing, before the command
// line, settings or any backend are touched, so a helper starts as soon as
// the Go runtime and package initialisation are done (the pattern of
// Docker's pkg/reexec).
//
// A program that embeds corral (its backends start sandboxes that
// re-execute the running binary as their helpers) must call Init first
// thing in its main, as must a test binary that does so, at the top of its
// TestMain:
//
//	func main() {
//		reexec.Init()
//		...
//	}
package reexec

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"sync/atomic"
)

// Main is a helper's entry point: args are the arguments after the mode
// (os.Args[2:] for an argv mode, os.Args[1:] for an environment mode); the
// result is the process's exit status.
type Main func(args []string) int

type envMode struct {
	key, value string
	main       Main
}

var (
	argvModes map[string]Main
	envModes  []envMode
	// hostModes are the argv modes registered with RegisterHost.
	hostModes map[string]bool
)

// ProtocolMode is the mode every executable that links reexec answers
// (corral's and cmd/corral-helper's alike): it prints Answer, which says
// which helper protocol and modes that executable speaks, so corral can
// refuse a helper built from other source (package helperbin) before it
// hands it a sandbox.
const ProtocolMode = "__corral-helper-protocol"

// protocolVersion is the helper protocol's version: bump it whenever any
// helper mode's arguments, environment, descriptors or wire format change,
// so that a corral-helper built before the change is refused rather than
// run. A variable, not a constant, only so that tests can build an
// executable of another protocol (-ldflags -X
// github.com/corralhq/corral/reexec.protocolVersion=...).
var protocolVersion = "2"

func init() {
	Register(ProtocolMode, func([]string) int {
		fmt.Print(Answer())
		return 0
	})
}

// Answer is what ProtocolMode prints: "corral-helper-protocol VERSION"
// and, on a second line, the modes that run inside sandboxes
// (SandboxModes) separated by spaces; each line ends in a newline. It
// reads only the registry.
func Answer() string {
	return "corral-helper-protocol " + protocolVersion + "\n" + strings.Join(SandboxModes(), " ") + "\n"
}

// RegisterHost is Register for a mode that runs on the host beside corral
// (the bwrap layer holder), never inside a sandbox: it is left out of
// SandboxModes, so a helper executable need not have it.
func RegisterHost(name string, main Main) {
	Register(name, main)
	if hostModes == nil {
		hostModes = map[string]bool{}
	}
	hostModes[name] = true
}

// SandboxModes returns Modes without the ones registered with
// RegisterHost: what a helper executable must answer to to stand in for
// this one inside sandboxes.
func SandboxModes() []string {
	var out []string
	for _, m := range Modes() {
		if !hostModes[m] {
			out = append(out, m)
		}
	}
	return out
}

// Register records main as the helper run when os.Args[1] is name. It
// panics if name is empty or already registered: two helpers answering to
// one name is a programming error that must not reach a user.
func Register(name string, main Main) {
	if name == "" || main == nil {
		panic("reexec: Register with an empty name or nil main")
	}
	if argvModes == nil {
		argvModes = map[string]Main{}
	}
	if _, dup := argvModes[name]; dup {
		panic(fmt.Sprintf("reexec: helper %q registered twice", name))
	}
	argvModes[name] = main
}

// RegisterEnv records main as the helper run when the environment variable
// key has exactly value and os.Args[1] names no helper registered with
// Register (an argv mode wins: the forwarder and trampoline run in front
// of the file server and see its environment). It panics on an empty key
// or value, or a key registered twice.
func RegisterEnv(key, value string, main Main) {
	if key == "" || value == "" || main == nil {
		panic("reexec: RegisterEnv with an empty key or value or nil main")
	}
	for _, m := range envModes {
		if m.key == key {
			panic(fmt.Sprintf("reexec: environment helper %s registered twice", key))
		}
	}
	envModes = append(envModes, envMode{key, value, main})
}

// Lookup returns the helper that args (a whole argv, program name first)
// and getenv select, with the arguments to pass it, or ok false when none
// is selected. Argv modes are looked at first, then environment modes in
// the order registered. It reads only the registry.
func Lookup(args []string, getenv func(string) string) (main Main, helperArgs []string, ok bool) {
	if len(args) > 1 {
		if m, found := argvModes[args[1]]; found {
			return m, args[2:], true
		}
	}
	for _, m := range envModes {
		if getenv(m.key) == m.value {
			var rest []string
			if len(args) > 0 {
				rest = args[1:]
			}
			return m.main, rest, true
		}
	}
	return nil, nil, false
}

// Modes returns the registered modes, sorted: each argv mode's name, and
// each environment mode as KEY=value. It reads only the registry.
func Modes() []string {
	out := make([]string, 0, len(argvModes)+len(envModes))
	for name := range argvModes {
		out = append(out, name)
	}
	for _, m := range envModes {
		out = append(out, m.key+"="+m.value)
	}
	sort.Strings(out)
	return out
}

// initialized is set by Init.
var initialized atomic.Bool

// Initialized reports whether Init has run in this process: only then
// does a re-execution of this process's executable serve the registered
// modes (a test binary without it would run its tests instead).
func Initialized() bool { return initialized.Load() }

// Init runs the helper that os.Args and the environment select and exits
// the process with its status; it returns false, having done nothing, when
// none is selected.
func Init() bool {
	initialized.Store(true)
	m, args, ok := Lookup(os.Args, os.Getenv)
	if !ok {
		return false
	}
	// Limits the helper must hold before anything runs (RlimitsEnv): a
	// helper that cannot set them runs nothing.
	if v, set := os.LookupEnv(RlimitsEnv); set {
		if err := applyRlimits(v); err != nil {
			fmt.Fprintf(os.Stderr, "corral helper: the sandbox's limits: %v\n", err)
			os.Exit(125)
		}
	}
	os.Exit(m(args))
	return true // not reached
}
