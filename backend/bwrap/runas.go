package bwrap

import (
	"path/filepath"
	"sort"
	"strings"

	"github.com/corralhq/corral/sandbox"
)

// A root caller's sandbox holds an unprivileged host identity
// (sandbox.RunAs) instead of uid 0. bwrap is started as that identity, in a
// mount namespace of corral's own (see hostview_linux.go) that differs from
// the host's in two ways, both planned by the pure functions here:
//
//   - the session's own directories (the working directory, the scratch
//     directory, read-write binds; Plan.Own) are idmapped mounts (Linux 5.12,
//     mount_setattr(2) MOUNT_ATTR_IDMAP) that shows its owner's files as the
//     sandbox's and writes the sandbox's files as its owner's, so a root
//     caller's project stays root's and a person's stays theirs;
//   - every directory on the way to a path the plan mounts that the
//     identity could not enter (/root, a 0700 test directory) is covered by
//     a small tmpfs that holds only the way on (traversal), so bwrap, which
//     resolves its sources and targets with the identity's rights, finds
//     them. What else that directory holds the identity could not reach
//     anyway.
//
// The namespace is private (MS_PRIVATE): a mount or unmount on the host
// while bwrap copies the tree (Docker starting a container) does not reach
// it, so it cannot fail bwrap's recursive read-only remount halfway.

// ownedSources returns the host paths a RunAs identity holds as their
// owner does: the plan's own directories (Plan.Own) and the sources of its
// read-write binds (binds, pins), outermost only: a path inside another is
// served by the outer one's idmapped mount.
func ownedSources(plan *Plan) []string {
	srcs := append([]string{}, plan.Own...)
	for _, m := range plan.Mounts {
		if m.Kind == mBind && m.Src != "" {
			srcs = append(srcs, filepath.Clean(m.Src))
		}
	}
	return outermost(srcs)
}

// outermost returns the paths of ps (clean, absolute) that lie inside no
// other path of ps, sorted and without repeats.
func outermost(ps []string) []string {
	sort.Slice(ps, func(i, j int) bool { return len(ps[i]) < len(ps[j]) || len(ps[i]) == len(ps[j]) && ps[i] < ps[j] })
	var out []string
next:
	for _, p := range ps {
		for _, o := range out {
			if within(p, o) {
				continue next
			}
		}
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// neededPaths returns every host path bwrap resolves to build the plan's
// sandbox: the sources of its binds and the targets of all its mounts (bwrap
// resolves targets in a copy of the host tree), the directory the command
// starts in, and the paths it is pointed at (Plan.Reach).
func neededPaths(plan *Plan) []string {
	seen := map[string]bool{}
	var out []string
	add := func(p string) {
		if p == "" || !filepath.IsAbs(p) {
			return
		}
		p = filepath.Clean(p)
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	for _, m := range plan.Mounts {
		switch m.Kind {
		case mRoBind, mBind, mDevBind:
			if m.FD == 0 && !m.ViaFD {
				add(m.Src)
			}
		}
		add(m.Dest)
	}
	add(plan.Chdir)
	for _, r := range plan.Reach {
		add(r)
	}
	return out
}

// dirInfo is what traversal depends on: a directory's permission bits and
// owner.
type dirInfo struct {
	Mode     uint32 // permission bits (0o7777)
	UID, GID int
}

// canEnter reports whether ra may search directory d by its permission
// bits (path_resolution(7)); the identity has no supplementary groups, and
// ACLs are not read (a directory an ACL opens is covered needlessly, which
// only hides what the identity could list).
func canEnter(d dirInfo, ra sandbox.RunAs) bool {
	switch {
	case d.UID == ra.UID:
		return d.Mode&0o100 != 0
	case d.GID == ra.GID:
		return d.Mode&0o010 != 0
	default:
		return d.Mode&0o001 != 0
	}
}

// traversal is one directory to cover: Dir (absolute, clean) and the names
// of its entries that lie on the way to a needed path.
type traversal struct {
	Dir     string
	Entries []string
}

// blockedDirs returns, shallowest first, the directories on the way to the
// paths of need that ra cannot enter, each with the entries below it that
// must stay reachable. A needed path itself is not judged, only the
// directories above it: whether the identity may read or write it is the
// kernel's to say (writable ones are idmapped). stat reports a directory;
// one it cannot report is left as it is (bwrap then says what is missing).
func blockedDirs(need []string, ra sandbox.RunAs, stat func(string) (dirInfo, bool)) []traversal {
	cache := map[string]*dirInfo{}
	info := func(d string) *dirInfo {
		if v, ok := cache[d]; ok {
			return v
		}
		var v *dirInfo
		if di, ok := stat(d); ok {
			v = &di
		}
		cache[d] = v
		return v
	}
	entries := map[string]map[string]bool{}
	for _, p := range need {
		if p == "/" {
			continue
		}
		parts := strings.Split(strings.TrimPrefix(p, "/"), "/")
		dir := "/"
		for i := 0; i < len(parts)-1; i++ {
			// dir is an ancestor of p; the next step enters it. The root
			// directory is never covered.
			if di := info(dir); dir != "/" && di != nil && !canEnter(*di, ra) {
				if entries[dir] == nil {
					entries[dir] = map[string]bool{}
				}
				entries[dir][parts[i]] = true
			}
			dir = filepath.Join(dir, parts[i])
		}
		if di := info(dir); dir != "/" && di != nil && !canEnter(*di, ra) {
			if entries[dir] == nil {
				entries[dir] = map[string]bool{}
			}
			entries[dir][parts[len(parts)-1]] = true
		}
	}
	out := make([]traversal, 0, len(entries))
	for d, names := range entries {
		t := traversal{Dir: d}
		for n := range names {
			t.Entries = append(t.Entries, n)
		}
		sort.Strings(t.Entries)
		out = append(out, t)
	}
	sort.Slice(out, func(i, j int) bool {
		if di, dj := depth(out[i].Dir), depth(out[j].Dir); di != dj {
			return di < dj
		}
		return out[i].Dir < out[j].Dir
	})
	return out
}

// idmappedStat wraps stat for blockedDirs: a directory inside one of owned
// (the idmapped sources, ownedSources) that belongs to that source's owner
// is reported as ra's, since after idmapAt ra holds it as its owner does
// and enters it by the owner's bits. Without this a directory on the way to
// a mount inside an owned directory (the cargo configuration bound into the
// tool cache) would be covered by a small tmpfs, which the idmapped mount
// would then show in place of the directory itself.
func idmappedStat(owned []string, ra sandbox.RunAs, stat func(string) (dirInfo, bool)) func(string) (dirInfo, bool) {
	return func(d string) (dirInfo, bool) {
		di, ok := stat(d)
		if !ok {
			return di, ok
		}
		for _, w := range owned {
			if !within(d, w) {
				continue
			}
			if wi, ok := stat(w); ok {
				if di.UID == wi.UID {
					di.UID = ra.UID
				}
				if di.GID == wi.GID {
					di.GID = ra.GID
				}
			}
			break
		}
		return di, true
	}
}
