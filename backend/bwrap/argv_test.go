package bwrap

import (
	"slices"
	"strings"
	"testing"
)

// argvPrefix is the fixed head of every argv: the namespaces and flags that
// do not depend on the plan.
var argvPrefix = []string{
	"--die-with-parent", "--new-session",
	"--unshare-user", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
}

// argvMinimalMounts is a minimal plan: the host root read-only, a fresh
// /dev, a private /proc and a world-writable sticky /tmp.
func argvMinimalMounts() []mount {
	return []mount{
		{Kind: mRoBind, Src: "/", Dest: "/"},
		{Kind: mDev, Dest: "/dev"},
		{Kind: mProc, Dest: "/proc"},
		{Kind: mTmpfs, Dest: "/tmp", Perms: 0o1777},
	}
}

func argvJoin(parts ...[]string) []string {
	var out []string
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestArgvGolden(t *testing.T) {
	all := Features{Perms: true, JSONStatus: true}
	minimalMounts := []string{"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--perms", "1777", "--tmpfs", "/tmp"}
	odd := "/var/tmp/a dir:with\ncolon and newline"
	for _, tc := range []struct {
		name     string
		plan     *Plan
		features Features
		statusFD int
		cmd      []string
		want     []string
	}{
		{
			name:     "minimal plan, own network, status fd 3",
			plan:     &Plan{Mounts: argvMinimalMounts(), Chdir: "/work"},
			features: all,
			statusFD: 3,
			cmd:      []string{"echo", "hi"},
			want: argvJoin(argvPrefix,
				[]string{"--unshare-net", "--cap-drop", "ALL", "--clearenv", "--json-status-fd", "3"},
				minimalMounts,
				[]string{"--chdir", "/work", "--", "echo", "hi"}),
		},
		{
			name:     "share net drops --unshare-net",
			plan:     &Plan{Mounts: argvMinimalMounts(), Chdir: "/work", ShareNet: true},
			features: all,
			statusFD: 3,
			cmd:      []string{"echo", "hi"},
			want: argvJoin(argvPrefix,
				[]string{"--cap-drop", "ALL", "--clearenv", "--json-status-fd", "3"},
				minimalMounts,
				[]string{"--chdir", "/work", "--", "echo", "hi"}),
		},
		{
			name:     "seccomp fd after the status fd",
			plan:     &Plan{Mounts: argvMinimalMounts(), Chdir: "/work", SeccompFD: 6},
			features: all,
			statusFD: 4,
			cmd:      []string{"true"},
			want: argvJoin(argvPrefix,
				[]string{"--unshare-net", "--cap-drop", "ALL", "--clearenv", "--json-status-fd", "4", "--seccomp", "6"},
				minimalMounts,
				[]string{"--chdir", "/work", "--", "true"}),
		},
		{
			name:     "status fd -1 drops --json-status-fd",
			plan:     &Plan{Mounts: argvMinimalMounts(), Chdir: "/work"},
			features: all,
			statusFD: -1,
			cmd:      []string{"true"},
			want: argvJoin(argvPrefix,
				[]string{"--unshare-net", "--cap-drop", "ALL", "--clearenv"},
				minimalMounts,
				[]string{"--chdir", "/work", "--", "true"}),
		},
		{
			name:     "status fd 0 is a valid descriptor",
			plan:     &Plan{Mounts: argvMinimalMounts(), Chdir: "/work"},
			features: all,
			statusFD: 0,
			cmd:      []string{"true"},
			want: argvJoin(argvPrefix,
				[]string{"--unshare-net", "--cap-drop", "ALL", "--clearenv", "--json-status-fd", "0"},
				minimalMounts,
				[]string{"--chdir", "/work", "--", "true"}),
		},
		{
			name:     "old bwrap: no --perms, no --json-status-fd",
			plan:     &Plan{Mounts: argvMinimalMounts(), Chdir: "/work"},
			features: Features{},
			statusFD: 3,
			cmd:      []string{"true"},
			want: argvJoin(argvPrefix,
				[]string{"--unshare-net", "--cap-drop", "ALL", "--clearenv"},
				[]string{"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"},
				[]string{"--chdir", "/work", "--", "true"}),
		},
		{
			name: "every mount kind, perms formatted in octal, zero perms omitted",
			plan: &Plan{Mounts: []mount{
				{Kind: mRoBind, Src: "/", Dest: "/"},
				{Kind: mTmpfs, Dest: "/home/u", Perms: 0o755},
				{Kind: mTmpfs, Dest: "/home/u/.config", Perms: 0o700},
				{Kind: mTmpfs, Dest: "/run/x"},
				{Kind: mBind, Src: "/home/u/w", Dest: "/home/u/w"},
				{Kind: mDevBind, Src: "/dev/fuse", Dest: "/dev/fuse"},
				{Kind: mSymlink, Src: "project", Dest: "/home/u/link"},
				{Kind: mRemountRO, Dest: "/home/u"},
			}, Chdir: "/home/u/w", ShareNet: true},
			features: all,
			statusFD: -1,
			cmd:      []string{"make"},
			want: argvJoin(argvPrefix,
				[]string{"--cap-drop", "ALL", "--clearenv",
					"--ro-bind", "/", "/",
					"--perms", "0755", "--tmpfs", "/home/u",
					"--perms", "0700", "--tmpfs", "/home/u/.config",
					"--tmpfs", "/run/x",
					"--bind", "/home/u/w", "/home/u/w",
					"--dev-bind", "/dev/fuse", "/dev/fuse",
					"--symlink", "project", "/home/u/link",
					"--remount-ro", "/home/u",
					"--chdir", "/home/u/w", "--", "make"}),
		},
		{
			name: "paths with spaces, colons and newlines stay single arguments",
			plan: &Plan{Mounts: []mount{
				{Kind: mRoBind, Src: odd, Dest: odd + " dest"},
				{Kind: mTmpfs, Dest: odd + "/t", Perms: 0o1777},
			}, Chdir: odd},
			features: all,
			statusFD: -1,
			cmd:      []string{"sh", "-c", "echo a b; echo c"},
			want: argvJoin(argvPrefix,
				[]string{"--unshare-net", "--cap-drop", "ALL", "--clearenv",
					"--ro-bind", odd, odd + " dest",
					"--perms", "1777", "--tmpfs", odd + "/t",
					"--chdir", odd, "--", "sh", "-c", "echo a b; echo c"}),
		},
		{
			name:     "no chdir: no --chdir; flag-like command arguments stay after --",
			plan:     &Plan{Mounts: argvMinimalMounts()},
			features: all,
			statusFD: -1,
			cmd:      []string{"--help", "--chdir", "/"},
			want: argvJoin(argvPrefix,
				[]string{"--unshare-net", "--cap-drop", "ALL", "--clearenv"},
				minimalMounts,
				[]string{"--", "--help", "--chdir", "/"}),
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Argv(tc.plan, tc.features, tc.statusFD, tc.cmd)
			if !slices.Equal(got, tc.want) {
				t.Errorf("Argv = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestArgvInvariants checks properties that hold for every plan, whatever
// the mounts: --cap-drop ALL is always there, the command follows the first
// "--" unchanged, and no argument is split or joined.
func TestArgvInvariants(t *testing.T) {
	for _, tc := range []struct {
		name     string
		shareNet bool
		features Features
		statusFD int
		cmd      []string
	}{
		{name: "own net, all features", features: Features{Perms: true, JSONStatus: true}, statusFD: 3, cmd: []string{"ls", "-l"}},
		{name: "shared net, no features", shareNet: true, statusFD: -1, cmd: []string{"a b", "c:d", "e\nf"}},
		{name: "status fd without the feature", features: Features{Perms: true}, statusFD: 7, cmd: []string{"--", "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			plan := &Plan{Mounts: argvMinimalMounts(), Chdir: "/w", ShareNet: tc.shareNet}
			got := Argv(plan, tc.features, tc.statusFD, tc.cmd)
			i := slices.Index(got, "--cap-drop")
			if i < 0 || i+1 >= len(got) || got[i+1] != "ALL" {
				t.Errorf("Argv = %q, want --cap-drop ALL", got)
			}
			sep := slices.Index(got, "--")
			if sep < 0 {
				t.Fatalf("Argv = %q, want a -- separator", got)
			}
			if tail := got[sep+1:]; !slices.Equal(tail, tc.cmd) {
				t.Errorf("command after -- = %q, want %q", tail, tc.cmd)
			}
			head := got[:sep]
			if has := slices.Contains(head, "--unshare-net"); has == tc.shareNet {
				t.Errorf("--unshare-net present = %v, want %v (ShareNet %v)", has, !tc.shareNet, tc.shareNet)
			}
			wantStatus := tc.statusFD >= 0 && tc.features.JSONStatus
			if has := slices.Contains(head, "--json-status-fd"); has != wantStatus {
				t.Errorf("--json-status-fd present = %v, want %v", has, wantStatus)
			}
			if has := slices.Contains(head, "--perms"); has != tc.features.Perms {
				t.Errorf("--perms present = %v, want %v", has, tc.features.Perms)
			}
			for _, a := range head {
				if strings.Contains(a, " ") {
					t.Errorf("argument %q joins several values", a)
				}
			}
		})
	}
}

// The command's environment is set inside the sandbox with --setenv, after
// --clearenv, so bwrap itself never runs with it.
func TestArgvEnvironment(t *testing.T) {
	plan := &Plan{Env: []string{"A=1", "LD_PRELOAD=/x/evil.so", "B=two=words", "BAD"}}
	got := strings.Join(Argv(plan, Features{}, -1, []string{"true"}), " ")
	want := "--clearenv --setenv A 1 --setenv LD_PRELOAD /x/evil.so --setenv B two=words -- true"
	if !strings.Contains(got, want) {
		t.Errorf("Argv = %q, want it to contain %q", got, want)
	}
}
