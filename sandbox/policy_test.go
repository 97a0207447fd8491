package sandbox

import (
	"reflect"
	"testing"
)

func TestWritableRoots(t *testing.T) {
	full := Request{
		Policy:     Policy{Workdir: "/w"},
		ScratchDir: "/s", HomeDir: "/h", CacheDir: "/c",
	}
	binds := []Bind{
		{Src: "/rw"},
		{Src: "/ro", ReadOnly: true},
		{Src: "/src", Dest: "/dst"},
		{Dest: "/nosrc"},
	}
	all := []WritableRoot{
		{Path: "/w", Src: "/w", Kind: RootWorkdir},
		{Path: "/s", Src: "/s", Kind: RootScratch},
		{Path: "/h", Src: "/h", Kind: RootHome},
		{Path: "/c", Src: "/c", Kind: RootCache},
	}
	bound := []WritableRoot{
		{Path: "/rw", Src: "/rw", Kind: RootBind},
		{Path: "/dst", Src: "/src", Kind: RootBind},
	}
	for _, tc := range []struct {
		name    string
		profile Profile
		binds   []Bind
		bare    bool // only Workdir set
		want    []WritableRoot
	}{
		{name: "default profile", profile: "", want: all},
		{name: "network", profile: ProfileNetwork, want: all},
		{name: "workspace", profile: ProfileWorkspace, want: all},
		{name: "allowlist", profile: ProfileAllowlist, want: all},
		{name: "restricted writes nothing", profile: ProfileRestricted, want: nil},
		{name: "binds under workspace", profile: ProfileWorkspace, binds: binds, want: append(append([]WritableRoot{}, all...), bound...)},
		{name: "read-write binds stay writable under restricted", profile: ProfileRestricted, binds: binds, want: bound},
		{name: "empty paths left out", profile: ProfileNetwork, bare: true, want: []WritableRoot{{Path: "/w", Src: "/w", Kind: RootWorkdir}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req := full
			if tc.bare {
				req = Request{Policy: Policy{Workdir: "/w"}}
			}
			req.Profile, req.Binds = tc.profile, tc.binds
			if got := WritableRoots(&req); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("WritableRoots = %+v, want %+v", got, tc.want)
			}
		})
	}
}
