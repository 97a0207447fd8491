package bwrap

import (
	"os"
	"testing"
)

func TestLayoutFDs(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		caller               int
		seccomp              bool
		binds                int
		userNS, mntNS, netNS bool
		want                 fdLayout
	}{
		{"filter only", 0, true, 0, false, false, false,
			fdLayout{Status: 3, Args: 4, Seccomp: 5, FirstBind: 6, UserNS: -1, MntNS: -1, NetNS: -1, Count: 3}},
		{"no filter", 0, false, 0, false, false, false,
			fdLayout{Status: 3, Args: 4, Seccomp: -1, FirstBind: 5, UserNS: -1, MntNS: -1, NetNS: -1, Count: 2}},
		{"session state pipe, binds, both namespaces", 1, true, 2, true, false, true,
			fdLayout{Caller: 1, Status: 4, Args: 5, Seccomp: 6, FirstBind: 7, Binds: 2, UserNS: 9, MntNS: -1, NetNS: 10, Count: 8}},
		{"network namespace only (root's egress)", 2, true, 1, false, false, true,
			fdLayout{Caller: 2, Status: 5, Args: 6, Seccomp: 7, FirstBind: 8, Binds: 1, UserNS: -1, MntNS: -1, NetNS: 9, Count: 7}},
		{"review layer: user and mount namespaces", 1, true, 0, true, true, false,
			fdLayout{Caller: 1, Status: 4, Args: 5, Seccomp: 6, FirstBind: 7, UserNS: 7, MntNS: 8, NetNS: -1, Count: 6}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := layoutFDs(tc.caller, tc.seccomp, tc.binds, tc.userNS, tc.mntNS, tc.netNS)
			if got != tc.want {
				t.Errorf("layoutFDs = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestLayoutFiles: every file lands at its descriptor's place, none is left
// out, and the namespaces are last (start drops them when nsenter joins).
func TestLayoutFiles(t *testing.T) {
	var open []*os.File
	f := func() *os.File {
		t.Helper()
		g, err := os.Open(os.DevNull)
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, g)
		return g
	}
	defer func() {
		for _, g := range open {
			g.Close()
		}
	}()
	caller := []*os.File{f(), f()}
	status, args, filter := f(), f(), f()
	binds := []*os.File{f(), f(), f()}
	userns, netns := f(), f()
	l := layoutFDs(len(caller), true, len(binds), true, false, true)
	fs := l.files(caller, status, args, filter, binds, userns, nil, netns)
	at := func(fd int) *os.File { return fs[fd-3] }
	if len(fs) != len(open) {
		t.Fatalf("%d files, want %d", len(fs), len(open))
	}
	for i, c := range caller {
		if at(3+i) != c {
			t.Errorf("caller's file %d is not at %d", i, 3+i)
		}
	}
	for i, b := range binds {
		if at(l.FirstBind+i) != b {
			t.Errorf("bind %d is not at %d", i, l.FirstBind+i)
		}
	}
	if at(l.Status) != status || at(l.Args) != args || at(l.Seccomp) != filter || at(l.UserNS) != userns || at(l.NetNS) != netns {
		t.Errorf("files %v misplaced for layout %+v", fs, l)
	}
	if l.UserNS != 3+len(fs)-2 || l.NetNS != 3+len(fs)-1 {
		t.Errorf("namespaces at %d, %d; want the last two of %d", l.UserNS, l.NetNS, len(fs))
	}
	if got := layoutFDs(0, false, 0, false, false, false).files(nil, status, args, nil, nil, nil, nil, nil); len(got) != 2 || got[0] != status || got[1] != args {
		t.Errorf("bare layout's files = %v, want status and args", got)
	}
}
