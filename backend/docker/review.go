package docker

import (
	"bufio"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"
	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/internal/owner"
	"github.com/corralhq/corral/layer"
	"github.com/corralhq/corral/sandbox"
)

// Review mode (workspace_mode: review) on docker: the container sees the
// working directory at its usual path, writable, but it is an overlay
// (Documentation/filesystems/overlayfs.rst) of the host's directory (lower)
// and the session's layer (package layer: upper/, work/), so every change
// lands in the layer and the host's files stay as they were.
//
// The engine mounts the overlay itself: the workspace is an anonymous
// volume of the "local" driver with type=overlay, device=overlay and
// o=lowerdir=...,upperdir=...,workdir=...,userxattr (volume options are
// mount(8) options, which the driver hands to mount(2) at the container's
// start). So corral needs no privilege, nothing is mounted in corral's own
// namespaces, and the volume, anonymous, is removed with the container
// (ContainerRemove with RemoveVolumes, as every removal and `corral
// cleanup` do). On Podman, whose compatible API drops an inline volume's
// driver options, the same volume is a named one made before the
// container and removed after it (podmanVolumes). Measured on this machine (Docker 20.10, Linux 6.18), the
// daemon (root) mounting for a corral of uid 1001:
//
//   - userxattr is accepted in the initial user namespace (Linux 5.11 and
//     later), so the markers are user.overlay.* xattrs that an unprivileged
//     corral can read (an opaque directory is user.overlay.opaque=y);
//     without it they would be trusted.overlay.*, which only root reads.
//     userxattr also keeps redirect_dir and metacopy off, which package
//     layer requires (a renamed directory is copied whole).
//   - Copy-up keeps the lower file's owner; files the command makes are
//     the container user's; whiteouts (character devices 0/0) and work/work
//     are root's, and corral can still remove them (it owns their
//     directories), which is all Discard and Apply do with them.
//
// overlayfs forbids changing the layers under a live mount, and Apply and
// Discard change them; they raise the layer's generation, which enters the
// container's configuration hash: the next command finds no container of
// its hash, so the session's old container (with its background
// processes, which cannot move to another mount) is removed before a new
// one mounts the layer again. Until then the old container sees the
// directories change under it (overlayfs: undefined results, no crash),
// as bwrap's holder does.
//
// Protected paths keep their rules in the layer: each one that exists in
// the merged view when the container is made is mounted read-only from
// where the merged view takes it (mergedSources); a protected path that
// appears later, or that a command moved away from its mount (mv .git
// .g), is no mount point in the container's mountinfo and is removed
// after the command (quarantine), seen through the container's root
// (/proc/PID/root, proc(5)). Directories on the way are not pinned by
// read-write binds of themselves, as in direct mode: such a bind would
// write the host.

// LabelLayer is set on a review container and on its overlay volume: the
// session's layer directory.
const LabelLayer = "corral.layer"

// LabelGeneration is set on a review container's workspace volume: the
// layer's generation it was mounted at (layer.Layer.Generation).
const LabelGeneration = "corral.layer.generation"

// reviewSpec is a session's layer as a container mounts it.
type reviewSpec struct {
	l   *layer.Layer
	gen int64 // the layer's generation when the container was made
	// prot are the protected paths of the merged view, with their sources
	// (set when the container is made; mergedSources).
	prot []protSource
}

// review checks that req's review layer can be kept on this backend and
// makes the layer (layer.Ensure) when it does not exist. Errors wrap
// sandbox.ErrPolicy (the command must not run: it would write the host's
// files) or sandbox.ErrUnavailable.
func (b *Backend) review(req *sandbox.Request, ws workspace, uid, gid int) (*reviewSpec, error) {
	refuse := func(why string) error {
		return fmt.Errorf("%w: workspace_mode review on the docker backend: %s; use workspace_mode direct, or the bwrap backend", sandbox.ErrPolicy, why)
	}
	switch {
	case req.Session == "":
		return nil, refuse("a layer belongs to a session, and this command has none")
	case b.st.Scope == ScopeShared:
		return nil, refuse("docker.scope shared puts every session in one container, and a layer belongs to one session; set docker.scope session")
	case b.st.HostWorkspace != "":
		return nil, refuse("docker.host_workspace is set (the daemon runs elsewhere), and the daemon must mount the session's layer, which is on this machine")
	case !ws.Writable:
		return nil, refuse("the restricted profile keeps the working directory read-only, so there is nothing to review; use workspace")
	}
	l := layer.New(req.LayerDir, ws.Host)
	if _, err := overlayOptions([]string{l.Lower}, l.Upper(), l.Work()); err != nil {
		return nil, refuse(err.Error())
	}
	gen, err := l.Generation()
	if err != nil {
		return nil, fmt.Errorf("%w: reading the layer's generation: %v", sandbox.ErrUnavailable, err)
	}
	if err := l.Ensure(); err != nil {
		return nil, fmt.Errorf("%w: the session's layer: %v", sandbox.ErrPolicy, err)
	}
	if os.Getuid() == 0 {
		// overlayfs takes the merged root's owner from upper's root: the
		// container user (the workspace's owner, containerIDs) must own
		// the working directory it sees, as in direct mode.
		if err := os.Lchown(l.Upper(), uid, gid); err != nil {
			return nil, fmt.Errorf("%w: giving the layer to %d:%d: %v", sandbox.ErrUnavailable, uid, gid, err)
		}
	}
	return &reviewSpec{l: l, gen: gen}, nil
}

// overlayOptions returns the "o" option of the local driver's overlay
// volume (mount(8) data): lowerdir, upperdir, workdir and userxattr. The
// legacy option string cannot carry ',' (the option separator), ':' (the
// lowerdir separator) or '\' (overlayfs's escape) in a path, nor '"'
// (Docker's option parser); such a path is an error.
func overlayOptions(lowers []string, upper, work string) (string, error) {
	var ls []string
	for _, p := range append(append([]string{}, lowers...), upper, work) {
		if p == "" {
			continue
		}
		if !filepath.IsAbs(p) {
			return "", fmt.Errorf("the overlay's path %q is not absolute", p)
		}
		if strings.ContainsAny(p, ",:\\\"") {
			return "", fmt.Errorf("the path %q holds a character the overlay volume's options cannot carry (',' ':' '\\' '\"')", p)
		}
	}
	for _, p := range lowers {
		ls = append(ls, filepath.Clean(p))
	}
	o := "lowerdir=" + strings.Join(ls, ":")
	if upper == "" {
		// Without an upper directory overlayfs is read-only anyway; "ro"
		// (a mount flag the driver takes out of the options) says so.
		return "ro," + o + ",userxattr", nil
	}
	return o + ",upperdir=" + filepath.Clean(upper) + ",workdir=" + filepath.Clean(work) + ",userxattr", nil
}

// overlayVolume is a mount of an anonymous overlay volume of the local
// driver at target, with mount options o (overlayOptions: read-only
// without an upper directory; Docker refuses ReadOnly on an anonymous
// volume). labels go on the volume.
func overlayVolume(target, o string, labels map[string]string) mount.Mount {
	return mount.Mount{Type: mount.TypeVolume, Target: target, VolumeOptions: &mount.VolumeOptions{
		// NoCopy: the engine must not copy the image's files at target
		// into the volume (it would write them to the layer).
		NoCopy: true,
		Labels: labels,
		DriverConfig: &mount.Driver{Name: "local", Options: map[string]string{
			"type": "overlay", "device": "overlay", "o": o,
		}},
	}}
}

// protSource is where a protected path of the merged view is mounted
// from, read-only: Src (a host path in upper or lower), or, for a
// directory that both hold, an overlay of Lowers (upper's first).
type protSource struct {
	Rel    string
	Src    string
	Lowers []string
}

// mergedEntry is what the merged view holds at a path: InUpper when upper
// provides it, InLower when lower's entry shows (not hidden by a whiteout,
// an opaque directory or a non-directory above it in upper); Dir when it
// is a directory.
type mergedEntry struct {
	InUpper, InLower, Dir bool
}

// lookupMerged returns what the overlay of upper over lower shows at rel
// (slash-separated), following overlayfs.rst: a whiteout (character
// device 0/0) in upper hides lower's entry and all below it, an opaque
// directory (user.overlay.opaque=y, or trusted.overlay.opaque for a mount
// made without userxattr) hides what lower has below it, and a
// non-directory in upper hides lower. ok is false when nothing shows, or
// a symlink lies on the way (a mount source is never reached through one).
func lookupMerged(upper, lower, rel string) (e mergedEntry, ok bool) {
	parts := strings.Split(strings.Trim(rel, "/"), "/")
	upOK, lowOK := true, true // upper's and lower's trees still reach here
	for i := range parts {
		p := filepath.Join(parts[:i+1]...)
		var ust, lst os.FileInfo
		if upOK {
			if st, err := os.Lstat(filepath.Join(upper, p)); err == nil {
				ust = st
			} else {
				upOK = false
			}
		}
		if ust != nil && isWhiteout(ust) {
			return mergedEntry{}, false
		}
		if ust != nil && (!ust.IsDir() || opaque(filepath.Join(upper, p))) {
			lowOK = false // lower's entry (and all below it) is hidden
		}
		if lowOK {
			if st, err := os.Lstat(filepath.Join(lower, p)); err == nil {
				lst = st
			} else {
				lowOK = false
			}
		}
		if ust != nil && lst != nil && !lst.IsDir() {
			lst, lowOK = nil, false // upper's directory replaced lower's file
		}
		top := ust
		if top == nil {
			top = lst
		}
		if top == nil || top.Mode()&fs.ModeSymlink != 0 {
			return mergedEntry{}, false
		}
		if i == len(parts)-1 {
			return mergedEntry{InUpper: ust != nil, InLower: lst != nil, Dir: top.IsDir()}, true
		}
		if !top.IsDir() {
			return mergedEntry{}, false
		}
	}
	return mergedEntry{}, false
}

// isWhiteout reports whether fi is an overlayfs whiteout: a character
// device 0/0 (overlayfs.rst).
func isWhiteout(fi os.FileInfo) bool {
	s, ok := fi.Sys().(*syscall.Stat_t)
	return ok && fi.Mode()&fs.ModeCharDevice != 0 && s.Rdev == 0
}

// opaque reports whether upper directory p is marked opaque.
func opaque(p string) bool {
	buf := make([]byte, 8)
	for _, name := range []string{"user.overlay.opaque", "trusted.overlay.opaque"} {
		if n, err := unix.Lgetxattr(p, name, buf); err == nil && string(buf[:n]) == "y" {
			return true
		}
	}
	return false
}

// mergedSources returns the protected paths that exist in the merged view
// of l, with what to mount read-only over each. Candidates come from the
// protected-path scan of upper and of lower (their union; lookupMerged
// decides what the merged view shows); a path the two scans miss is
// removed after the next command instead (quarantine). truncated reports
// that a scan was cut short.
func mergedSources(l *layer.Layer, patterns []string) (out []protSource, truncated bool, err error) {
	seen := map[string]bool{}
	var cands []hostview.ProtectedPath
	for _, root := range []string{l.Upper(), l.Lower} {
		found, cut, serr := hostview.FindProtectedErr(root, patterns)
		truncated = truncated || cut
		if serr != nil && err == nil {
			err = serr
		}
		for _, p := range found {
			if p.Exists && len(p.Links) == 0 && !seen[p.Rel] {
				seen[p.Rel] = true
				cands = append(cands, p)
			}
		}
	}
	for _, p := range cands {
		e, ok := lookupMerged(l.Upper(), l.Lower, p.Rel)
		if !ok || (p.NotDir && e.Dir) {
			continue
		}
		rel := filepath.FromSlash(p.Rel)
		ps := protSource{Rel: p.Rel}
		switch {
		case e.InUpper && e.InLower && e.Dir:
			ps.Lowers = []string{filepath.Join(l.Upper(), rel), filepath.Join(l.Lower, rel)}
		case e.InUpper:
			ps.Src = filepath.Join(l.Upper(), rel)
		default:
			ps.Src = filepath.Join(l.Lower, rel)
		}
		out = append(out, ps)
	}
	return out, truncated, err
}

// viewRoot returns the path through which corral sees c's working
// directory as the container does (the overlay): /proc/PID/root of the
// container's init process (proc(5)) joined with the workspace's target.
// The engine runs on this machine (review refuses host_workspace).
func (e *Engine) viewRoot(ctx context.Context, c *ctr) (string, error) {
	cli, err := e.client()
	if err != nil {
		return "", err
	}
	r, err := cli.ContainerInspect(ctx, c.id, client.ContainerInspectOptions{})
	if err != nil {
		return "", e.engineErr("inspecting the container", err)
	}
	if r.Container.State == nil || r.Container.State.Pid <= 0 {
		return "", fmt.Errorf("%w: docker backend: the container %s has no process", sandbox.ErrUnavailable, c.name)
	}
	pid := strconv.Itoa(r.Container.State.Pid)
	root := "/proc/" + pid + "/root"
	if _, err := os.Stat(root + c.ws.Target); err != nil {
		return "", fmt.Errorf("%w: docker backend: reading the review container's working directory through %s: %v", sandbox.ErrUnavailable, root, err)
	}
	return "/proc/" + pid, nil
}

// mountPoints returns the mount points of the process whose /proc
// directory is procDir (/proc/PID/mountinfo, proc(5): the fifth field,
// with spaces, tabs, newlines and backslashes as octal escapes).
func mountPoints(procDir string) (map[string]bool, error) {
	f, err := os.Open(procDir + "/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]bool{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 5 {
			continue
		}
		out[unescapeMountinfo(fields[4])] = true
	}
	return out, sc.Err()
}

// unescapeMountinfo undoes the kernel's octal escapes (\040 and the like)
// in a mountinfo path.
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mergedNames returns the names the overlay of l shows at its top, given
// lower's names there: lower's less those upper deletes (whiteouts) or
// hides (an opaque top), with upper's own.
func mergedNames(l *layer.Layer, lower []string) ([]string, error) {
	ents, err := os.ReadDir(l.Upper())
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range ents {
		fi, err := e.Info()
		if err != nil {
			return nil, err
		}
		seen[e.Name()] = true
		if !isWhiteout(fi) {
			out = append(out, e.Name())
		}
	}
	if opaque(l.Upper()) {
		return out, nil
	}
	for _, n := range lower {
		if !seen[n] {
			out = append(out, n)
		}
	}
	return out, nil
}

// claimLayer makes sure no other container mounts c's layer before c's
// is made: two overlays sharing an upper directory give undefined results
// (overlayfs.rst, "Sharing and copying layers"; the kernel only warns
// without index=on). A container of the layer (LabelLayer) whose corral is
// gone, or that is not running, is removed with its volume; a running one
// of a live corral (another process's session, or this process's old one
// kept because corral exec runs in it) makes the command fail until it
// ends.
func (b *Backend) claimLayer(ctx context.Context, cli *client.Client, c *ctr) error {
	e := b.e
	f := client.Filters{}.Add("label", LabelEnv+"=1", LabelLayer+"="+c.review.l.Dir)
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return e.engineErr("listing the containers of the session's layer", err)
	}
	for _, s := range res.Items {
		name := s.ID[:12]
		if len(s.Names) > 0 {
			name = strings.TrimPrefix(s.Names[0], "/")
		}
		o, ok := owner.Parse(s.Labels[LabelOwner])
		if s.State == "running" && (!ok || o.State(e.self) != owner.Dead) {
			who := "this corral"
			if !ok {
				who = "an unknown owner"
			} else if o != e.self {
				who = fmt.Sprintf("corral pid %d on %s", o.PID, o.Host)
			}
			return fmt.Errorf("%w: docker backend: the session's review layer %s is still mounted by container %s (%s; an older layer generation, or corral exec runs in it), and overlayfs forbids two mounts of one layer: end that session or its programs, or run `corral cleanup`, then retry", sandbox.ErrUnavailable, c.review.l.Dir, name, who)
		}
		if _, err := cli.ContainerRemove(ctx, s.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !cerrdefs.IsNotFound(err) {
			return e.engineErr("removing the stale container "+name+" of the session's layer", err)
		}
		e.log.Info("docker.container.removed", "container", name, "key", s.Labels[LabelKey], "reason", "stale mount of the session's layer")
		e.removeVolumesOf(ctx, cli, name, "stale mount of the session's layer")
	}
	return nil
}
