package layer

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Process is a process that has the layer mounted (Users).
type Process struct {
	PID int
	// Args is its command line (/proc/PID/cmdline), nil when unreadable.
	Args []string
}

// Users returns the processes, sorted by pid, whose mount namespace (not
// this process's own) holds an overlay mount of this layer: an overlayfs
// mount in
// /proc/PID/mountinfo (proc(5)) whose super options name the layer's
// upper directory. Those are the backends' holders and every command,
// background process or sandbox that still sees the layer. Processes
// this one may not inspect (another user's, without privilege) are not
// seen: the layer's are corral's own user's, or run_as's when corral is
// root, who may inspect all.
//
// Apply and Discard change upper under such mounts, which overlayfs
// leaves undefined (Documentation/filesystems/overlayfs.rst, "Changes to
// underlying filesystems"): a process writing through a stale mount may
// lose its writes. So a person's apply waits for, or names, them.
func Users(l *Layer) ([]Process, error) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	want := "upperdir=" + escapeOption(l.Upper())
	at := escapeMountPoint(l.Lower)
	self, _ := os.Stat("/proc/self/ns/mnt")
	var out []Process
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		// A process in this one's mount namespace sees what this one
		// sees: a mount there (the docker engine's of a volume) is the
		// host's, not a sandbox's.
		if ns, err := os.Stat(filepath.Join("/proc", e.Name(), "ns", "mnt")); err == nil && self != nil && os.SameFile(ns, self) {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "mountinfo"))
		if err != nil || !bytes.Contains(b, []byte(want)) || !mountsLayer(b, want, at) {
			continue
		}
		p := Process{PID: pid}
		if c, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && len(c) > 0 {
			p.Args = strings.Split(strings.TrimSuffix(string(c), "\x00"), "\x00")
		}
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].PID < out[j].PID })
	return out, nil
}

// mountsLayer says whether mountinfo has an overlay mount whose super
// options hold opt (a whole option) mounted at the point at (escaped as
// mountinfo shows it): where a session's sandbox sees its working
// directory. The same mount seen elsewhere (a host namespace that mount
// propagation reached: the engine's volume under /var/lib/docker) is no
// session's view. A line is "ID PARENT M:N ROOT POINT OPTS [TAGS...] -
// FSTYPE SOURCE SUPEROPTS" (proc(5)).
func mountsLayer(mountinfo []byte, opt, at string) bool {
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		before, after, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		if pf := strings.Fields(before); len(pf) < 5 || pf[4] != at {
			continue
		}
		f := strings.Fields(after)
		if len(f) < 3 || f[0] != "overlay" {
			continue
		}
		for _, o := range strings.Split(f[2], ",") {
			if o == opt {
				return true
			}
		}
	}
	return false
}

// escapeOption escapes a path as the kernel shows it in mountinfo's super
// options: overlayfs prints option values with seq_show_option
// (include/linux/seq_file.h), which escapes ',', space, tab, newline and
// backslash as octal (\054).
func escapeOption(p string) string {
	var b strings.Builder
	for _, r := range []byte(p) {
		switch r {
		case ' ', '\t', '\n', '\\', ',':
			b.WriteString("\\" + strconv.FormatInt(int64(r)|0o1000, 8)[1:])
		default:
			b.WriteByte(r)
		}
	}
	return b.String()
}

// escapeMountPoint escapes a path as mountinfo's mount point field shows
// it: space, tab, newline and backslash in octal (fs/proc_namespace.c,
// show_mountinfo, mangle " \t\n\\").
func escapeMountPoint(p string) string {
	var b strings.Builder
	for _, r := range []byte(p) {
		switch r {
		case ' ', '\t', '\n', '\\':
			b.WriteString("\\" + strconv.FormatInt(int64(r)|0o1000, 8)[1:])
		default:
			b.WriteByte(r)
		}
	}
	return b.String()
}
