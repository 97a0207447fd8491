package sandbox

import (
	"errors"
	"strings"
	"testing"
)

func TestRequestValidate(t *testing.T) {
	ok := func() *Request {
		return &Request{Argv: []string{"true"}, Env: []string{"A=1", "EMPTY="}, Policy: Policy{Workdir: "/w", Profile: ProfileWorkspace,
			Binds: []Bind{{Src: "/data", Dest: "/mnt/data"}}, Protected: []string{".git/hooks"}}}
	}
	tests := []struct {
		name string
		mod  func(r *Request)
		want string // "" means valid
	}{
		{"valid", func(*Request) {}, ""},
		{"zero policy", func(r *Request) { r.Policy = Policy{} }, ""},
		{"secrets under allowlist", func(r *Request) { r.Profile, r.Secrets = ProfileAllowlist, []Secret{{Name: "T"}} }, ""},
		{"no argv", func(r *Request) { r.Argv = nil }, "no command given"},
		{"empty name", func(r *Request) { r.Argv = []string{"", "x"} }, "no command given"},
		{"NUL in argument", func(r *Request) { r.Argv = []string{"echo", "a\x00b"} }, "NUL byte"},
		{"NUL in env", func(r *Request) { r.Env = []string{"K=a\x00b"} }, `"K" contains a NUL byte`},
		{"env without = is left to the policy", func(r *Request) { r.Env = []string{"JUSTNAME"} }, ""},
		{"dir in the sandbox's home", func(r *Request) { r.Workdir, r.Dir = "~", "~/work" }, ""},
		{"dir of another user's home", func(r *Request) { r.Dir = "~bob/work" }, `start directory "~bob/work"`},
		{"unknown profile", func(r *Request) { r.Profile = "everything" }, "unknown profile"},
		{"relative workdir", func(r *Request) { r.Workdir = "src" }, `working directory "src"`},
		{"relative dir", func(r *Request) { r.Dir = "sub" }, `start directory "sub"`},
		{"relative scratch", func(r *Request) { r.ScratchDir = "tmp" }, "scratch directory"},
		{"relative home", func(r *Request) { r.HomeDir = "h" }, "home directory"},
		{"relative cache", func(r *Request) { r.CacheDir = "c" }, "cache directory"},
		{"relative layer", func(r *Request) { r.LayerDir = "l" }, "layer directory"},
		{"relative bind src", func(r *Request) { r.Binds = []Bind{{Src: "data"}} }, `binds[0].src "data"`},
		{"relative bind dest", func(r *Request) { r.Binds = []Bind{{Src: "/d", Dest: "d"}} }, `binds[0].dest "d"`},
		{"negative memory", func(r *Request) { r.Limits.MemoryMB = -1 }, "must not be negative"},
		{"negative procs", func(r *Request) { r.Limits.MaxProcs = -1 }, "must not be negative"},
		{"negative timeout", func(r *Request) { r.Timeout = -1 }, "timeout"},
		{"negative tmp", func(r *Request) { r.TmpSizeMB = -1 }, "tmp_size_mb"},
		{"bad protected", func(r *Request) { r.Protected = []string{"/abs"} }, "protected path pattern"},
		{"secrets without proxy", func(r *Request) { r.Secrets = []Secret{{Name: "T"}} }, "need the allowlist profile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := ok()
			tt.mod(r)
			err := r.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Validate() = %v, want ErrBadRequest naming %q", err, tt.want)
			}
		})
	}
}

// TestValidateKeepsValuesOut checks a refused environment entry is named by
// its name alone: the value may be a secret.
func TestValidateKeepsValuesOut(t *testing.T) {
	r := &Request{Argv: []string{"true"}, Env: []string{"TOKEN=s3cr3t\x00x"}}
	if err := r.Validate(); err == nil || strings.Contains(err.Error(), "s3cr3t") {
		t.Fatalf("Validate() = %v, want a refusal without the value", err)
	}
}
