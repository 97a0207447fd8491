package reexec

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// withRegistry runs f with a registry holding only the given modes, then
// restores the one the test binary had.
func withRegistry(t *testing.T, f func()) {
	t.Helper()
	savedArgv, savedEnv, savedHost := argvModes, envModes, hostModes
	argvModes, envModes, hostModes = nil, nil, nil
	defer func() { argvModes, envModes, hostModes = savedArgv, savedEnv, savedHost }()
	f()
}

func TestLookup(t *testing.T) {
	withRegistry(t, func() {
		Register("__a", func([]string) int { return 1 })
		Register("__b", func([]string) int { return 2 })
		RegisterEnv("SERVE_X", "serve", func([]string) int { return 3 })
		for _, tc := range []struct {
			name     string
			args     []string
			env      map[string]string
			want     int // status of the selected main; 0: none selected
			wantArgs []string
		}{
			{name: "no args", args: nil},
			{name: "program only", args: []string{"corral"}},
			{name: "a verb", args: []string{"corral", "run", "--", "true"}},
			{name: "argv mode", args: []string{"corral", "__a", "x", "y"}, want: 1, wantArgs: []string{"x", "y"}},
			{name: "argv mode, no args", args: []string{"corral", "__b"}, want: 2, wantArgs: []string{}},
			{name: "mode name later", args: []string{"corral", "run", "__a"}},
			{name: "env mode", args: []string{"corral", "p"}, env: map[string]string{"SERVE_X": "serve"}, want: 3, wantArgs: []string{"p"}},
			{name: "env other value", args: []string{"corral"}, env: map[string]string{"SERVE_X": "1"}},
			{name: "argv wins over env", args: []string{"corral", "__b", "--", "c"}, env: map[string]string{"SERVE_X": "serve"}, want: 2, wantArgs: []string{"--", "c"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				m, args, ok := Lookup(tc.args, func(k string) string { return tc.env[k] })
				if ok != (tc.want != 0) {
					t.Fatalf("Lookup(%q) ok=%v, want %v", tc.args, ok, tc.want != 0)
				}
				if !ok {
					return
				}
				if got := m(nil); got != tc.want {
					t.Errorf("selected main returns %d, want %d", got, tc.want)
				}
				if !slices.Equal(args, tc.wantArgs) {
					t.Errorf("args = %q, want %q", args, tc.wantArgs)
				}
			})
		}
	})
}

func TestRegisterTwicePanics(t *testing.T) {
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"argv twice", func() {
			Register("__x", func([]string) int { return 0 })
			Register("__x", func([]string) int { return 0 })
		}},
		{"env twice", func() {
			RegisterEnv("K", "v", func([]string) int { return 0 })
			RegisterEnv("K", "w", func([]string) int { return 0 })
		}},
		{"empty name", func() { Register("", func([]string) int { return 0 }) }},
		{"empty value", func() { RegisterEnv("K", "", func([]string) int { return 0 }) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withRegistry(t, func() {
				defer func() {
					if recover() == nil {
						t.Error("no panic")
					}
				}()
				tc.f()
			})
		})
	}
}

// The test binary registers a helper and dispatches like corral's main:
// Init must run it with its arguments and exit with its status.
const testHelper = "__reexec-test-helper"

func init() {
	Register(testHelper, func(args []string) int {
		os.Stdout.WriteString(strings.Join(args, ",") + "\n")
		return 7
	})
}

func TestMain(m *testing.M) {
	Init()
	os.Exit(m.Run())
}

func TestInitRunsHelperAndExits(t *testing.T) {
	out, err := exec.Command(os.Args[0], testHelper, "a", "b c").Output()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.ExitCode() != 7 {
		t.Fatalf("helper: err %v, want exit status 7", err)
	}
	if got := string(out); got != "a,b c\n" {
		t.Errorf("helper printed %q, want %q (the arguments after the mode; no test output)", got, "a,b c\n")
	}
}

func TestModesListsBothKinds(t *testing.T) {
	saveA, saveE := argvModes, envModes
	defer func() { argvModes, envModes = saveA, saveE }()
	argvModes, envModes = nil, nil
	Register("b-mode", func([]string) int { return 0 })
	Register("a-mode", func([]string) int { return 0 })
	RegisterEnv("K", "v", func([]string) int { return 0 })
	if got := strings.Join(Modes(), ","); got != "K=v,a-mode,b-mode" {
		t.Fatalf("Modes() = %s", got)
	}
}

func TestAnswerLeavesOutHostModes(t *testing.T) {
	withRegistry(t, func() {
		Register("__in", func([]string) int { return 0 })
		RegisterHost("__host", func([]string) int { return 0 })
		RegisterEnv("SERVE_X", "serve", func([]string) int { return 0 })
		if got, want := strings.Join(Modes(), " "), "SERVE_X=serve __host __in"; got != want {
			t.Errorf("Modes() = %q, want %q", got, want)
		}
		if got, want := Answer(), "corral-helper-protocol "+protocolVersion+"\nSERVE_X=serve __in\n"; got != want {
			t.Errorf("Answer() = %q, want %q", got, want)
		}
	})
}

// TestProtocolModeAnswers runs the test binary in ProtocolMode: every
// executable that links reexec answers it, with Answer.
func TestProtocolModeAnswers(t *testing.T) {
	cmd := exec.Command(os.Args[0], ProtocolMode)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s: %v", ProtocolMode, err)
	}
	if string(out) != Answer() || !strings.Contains(string(out), ProtocolMode) {
		t.Fatalf("%s printed %q, want %q (naming itself)", ProtocolMode, out, Answer())
	}
}
