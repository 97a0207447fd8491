// Package wscopy is `corral cp` and `corral sync`: it moves file trees
// between the host and a session's workspace on every backend, as tar
// streams of package transfer. On bwrap, docker and local the workspace
// is a host directory (the session's working directory) and both ends run
// in this process; on kubernetes the far end is corral's helper in the
// session's pod (inside.ModeUntar, inside.ModeTar), reached over an exec
// stream and checked by SHA-256. Either way the same transfer.Unpack
// writes the entries, so the same archives are refused.
//
// What comes back to the host (CopyOut, Sync with pull) is hostile input,
// checked on the host's side whatever the pod's helper sent: every entry
// must lie below the top that was asked for, and what package handback
// calls risky (git hooks and configuration at any depth, shell start-up
// files, editor settings...) is held back, listed in Result.Held, and
// written only when named in Out.IncludeRisky. What goes in (CopyIn, Sync
// without pull) is the person's own: a project's .git goes with it.
package wscopy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/handback"
	"github.com/corralhq/corral/internal/sparse"
	"github.com/corralhq/corral/internal/startdir"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/transfer"
)

// Endpoint is one side of a copy: a host path (Session "") or a path in a
// session's workspace.
type Endpoint struct {
	Session, Path string
}

// ParseEndpoint reads one argument of `corral cp` (pure): SESSION:PATH or
// :PATH (the session of --session, defSession) is in a workspace; a path
// that starts with / or . , or has no colon, is the host's (so ./a:b is a
// host file). PATH "" means the workspace's top.
func ParseEndpoint(arg, defSession string) (Endpoint, error) {
	if arg == "" {
		return Endpoint{}, errors.New("an empty path")
	}
	if strings.HasPrefix(arg, "/") || strings.HasPrefix(arg, ".") {
		return Endpoint{Path: arg}, nil
	}
	name, p, ok := strings.Cut(arg, ":")
	if !ok {
		return Endpoint{Path: arg}, nil
	}
	if name == "" {
		if defSession == "" {
			return Endpoint{}, fmt.Errorf("%q names no session: write SESSION:PATH or give --session", arg)
		}
		name = defSession
	}
	if p == "" {
		p = "."
	}
	return Endpoint{Session: name, Path: p}, nil
}

// ParsePair reads SRC and DST (pure): exactly one of them must be in a
// workspace.
func ParsePair(src, dst, defSession string) (Endpoint, Endpoint, error) {
	s, err := ParseEndpoint(src, defSession)
	if err != nil {
		return s, Endpoint{}, err
	}
	d, err := ParseEndpoint(dst, defSession)
	if err != nil {
		return s, d, err
	}
	if (s.Session == "") == (d.Session == "") {
		return s, d, errors.New("one of SRC and DST must be SESSION:PATH (or :PATH for the default session), the other a host path")
	}
	return s, d, nil
}

// Workspace is a session's workspace: Root is its top as the session
// sees it (the working directory); Remote, when set, holds it (a pod, as
// its backend says: registry.Driver.Workspace), else Root is a host
// directory.
type Workspace struct {
	Session string
	Root    string
	// Cwd is the session's current directory, where a relative path
	// starts, as for the MCP file tools and the session's next command;
	// "" or a directory outside Root means Root.
	Cwd    string
	Remote Remote
}

// Remote is a workspace its backend keeps away from the host (in a pod;
// backend/registry.Remote): files are copied through it, its far side
// checking every entry as Unpack does.
type Remote interface {
	// CopyIn unpacks the tar stream in f below the workspace's top.
	CopyIn(ctx context.Context, f *os.File, o transfer.Options) (transfer.Stats, error)
	// CopyOut writes to f a tar stream of src (relative to the top)
	// whose entries are named below top, at most limit bytes.
	CopyOut(ctx context.Context, src, top string, f *os.File, limit int64) error
}

// Rel returns p, a path in the workspace (relative to Cwd, else Root, or
// absolute below Root), relative to Root (pure).
func (w *Workspace) Rel(p string) (string, error) {
	if !path.IsAbs(p) {
		p = path.Join(w.base(), p)
	}
	p = path.Clean(p)
	if p == w.Root {
		return ".", nil
	}
	rel, ok := strings.CutPrefix(p, strings.TrimSuffix(w.Root, "/")+"/")
	if !ok {
		return "", fmt.Errorf("%s is outside session %s's workspace %s", p, w.Session, w.Root)
	}
	return rel, nil
}

// Result is what a copy did.
type Result struct {
	transfer.Stats
	// Into is where the tree went (a workspace path or a host path).
	Into string
}

// spool returns a temporary file for an archive that has no name: made
// with O_TMPFILE in os.TempDir() where the file system has it, else
// created and unlinked at once, so that none is left behind, even by a
// corral that is killed. A variable so that tests can look at the spool.
var spool = makeSpool

func makeSpool() (*os.File, error) {
	dir := os.TempDir()
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return os.NewFile(uintptr(fd), filepath.Join(dir, "corral-cp.tar (unlinked)")), nil
	}
	f, err := os.CreateTemp(dir, "corral-cp-*.tar")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(f.Name())
	return f, nil
}

// Room a copy out leaves on the file systems it writes to: a twentieth of
// each, at most maxMargin.
const maxMargin = 64 << 20

// bound is how much an archive coming out of a workspace may hold: what
// the host destination's file system may receive.
type bound struct {
	// max is the bound in bytes (> 0 unless the destination is full).
	max int64
	// why says where it comes from, for the error.
	why string
}

// receiveBound returns the bound of an archive spooled into spool and
// unpacked below dest (the nearest existing directory on the way to it
// is measured): the free space (statfs, for the caller's uid) of dest's
// file system less a margin, halved when the spool lies on the same file
// system (the archive, then its files), and never more than the spool's
// own file system may take.
func receiveBound(dest string, spool *os.File) (bound, error) {
	for {
		if _, err := os.Stat(dest); err == nil || filepath.Dir(dest) == dest {
			break
		}
		dest = filepath.Dir(dest)
	}
	free := func(fs unix.Statfs_t) (avail, margin int64) {
		bsize := int64(fs.Bsize)
		avail = int64(fs.Bavail) * bsize
		margin = min(int64(fs.Blocks)*bsize/20, maxMargin)
		return avail, margin
	}
	var dfs, sfs unix.Statfs_t
	if err := unix.Statfs(dest, &dfs); err != nil {
		return bound{}, fmt.Errorf("measuring the free space at %s: %w", dest, err)
	}
	if err := unix.Fstatfs(int(spool.Fd()), &sfs); err != nil {
		return bound{}, fmt.Errorf("measuring the free space of the spool: %w", err)
	}
	var dst, sst unix.Stat_t
	same := unix.Stat(dest, &dst) == nil && unix.Fstat(int(spool.Fd()), &sst) == nil && dst.Dev == sst.Dev
	avail, margin := free(dfs)
	b := bound{max: max(avail-margin, 0)}
	if same {
		b.max /= 2
		b.why = fmt.Sprintf("half of what %s's file system has free (%s, less a %s margin), since the archive is held there too before it is unpacked", dest, iec(avail), iec(margin))
		return b, nil
	}
	b.why = fmt.Sprintf("what %s's file system has free (%s, less a %s margin)", dest, iec(avail), iec(margin))
	if savail, smargin := free(sfs); savail-smargin < b.max {
		b.max = max(savail-smargin, 0)
		b.why = fmt.Sprintf("what the file system of %s, where the archive is held before it is unpacked, has free (%s, less a %s margin)", os.TempDir(), iec(savail), iec(smargin))
	}
	return b, nil
}

// iec writes n bytes as "12.3 MiB" (pure).
func iec(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d bytes", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit && exp < 5; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// capped passes at most max bytes to w; the write that would pass more
// writes nothing and fails with transfer.ErrTooLarge.
type capped struct {
	w      io.Writer
	n, max int64
}

func (c *capped) Write(b []byte) (int, error) {
	if c.n+int64(len(b)) > c.max {
		return 0, transfer.ErrTooLarge
	}
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// Out is how a copy out of a workspace treats what handback calls risky.
type Out struct {
	// IncludeRisky are paths, as Result.Held shows them (relative to
	// the destination's parent for CopyOut, to the directory for Sync),
	// to write although risky; a directory includes what lies below it.
	IncludeRisky []string
	// Protected are the protected-path patterns of the setting
	// protected_paths (nil when unset: handback's rules already hold what
	// sandbox.DefaultProtected names), held back as risky too, matched
	// against the paths as Result.Held shows them.
	Protected []string
	// Own are corral's own files and directories (handback.Policy.Own),
	// held back as risky wherever the copy would write them.
	Own []string
}

// gate is the host's policy for o, for a copy whose held paths start at
// root.
func (o Out) gate(root string) *handback.Policy {
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	return &handback.Policy{Protected: o.Protected, Include: o.IncludeRisky, Own: o.Own, Root: root}
}

// CopyIn copies the host's src (a file, symlink or directory) to dst in
// the workspace, as cp -a does: into dst when it is a directory, else as
// dst. It is the person's own tree: its .git, hooks and configuration
// included, go in as they are.
func CopyIn(ctx context.Context, w *Workspace, src, dst string) (Result, error) {
	rel, err := w.Rel(dst)
	if err != nil {
		return Result{}, err
	}
	abs, err := startdir.Abs(src)
	if err != nil {
		return Result{}, err
	}
	if _, err := os.Lstat(abs); err != nil {
		return Result{}, err
	}
	top := filepath.Base(abs)
	o := transfer.Options{Dest: rel, Top: top}
	return push(ctx, w, filepath.Dir(abs), top, top, o)
}

// push packs host dir/src (entries named top) and unpacks it in w with o.
func push(ctx context.Context, w *Workspace, dir, src, top string, o transfer.Options) (Result, error) {
	f, err := spool()
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	if _, err := transfer.Pack(f, dir, src, top); err != nil {
		return Result{}, err
	}
	res := Result{Into: path.Join(w.Root, o.Dest, o.Dir)}
	if w.Remote != nil {
		res.Stats, err = w.Remote.CopyIn(ctx, f, o)
		return res, err
	}
	if o.WantSHA256, err = fileSHA(f); err != nil {
		return res, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return res, err
	}
	res.Stats, err = transfer.Unpack(f, w.Root, o)
	return res, err
}

// CopyOut copies src in the workspace to the host's dst: into dst when it
// is a directory, else as dst. The workspace's symlinks come out as
// symlinks; entries the host refuses (transfer.Unpack: outside the top
// asked for, "..", absolute, below a symlink, hard links, devices) stop
// it before anything is written; risky ones are held back (Result.Held)
// unless o includes them. The archive is bounded by what dst's file
// system may receive (pull).
func CopyOut(ctx context.Context, w *Workspace, src, dst string, o Out) (Result, error) {
	rel, err := w.Rel(src)
	if err != nil {
		return Result{}, err
	}
	top := path.Base(rel)
	if rel == "." {
		top = path.Base(w.Root)
	}
	abs, err := startdir.Abs(dst)
	if err != nil {
		return Result{}, err
	}
	res, err := pull(ctx, w, rel, top, filepath.Dir(abs), transfer.Options{Dest: filepath.Base(abs), Top: top, Gate: o.gate(filepath.Dir(abs))})
	if errors.Is(err, fs.ErrNotExist) {
		return res, fmt.Errorf("session %s has no %s (a relative path starts at its current directory, %s): %w", w.Session, path.Join(w.Root, rel), w.base(), err)
	}
	return res, err
}

// base is where Rel starts a relative path: Cwd, else Root.
func (w *Workspace) base() string {
	if c := path.Clean(w.Cwd); w.Cwd != "" && (c == w.Root || strings.HasPrefix(c, strings.TrimSuffix(w.Root, "/")+"/")) {
		return c
	}
	return w.Root
}

// pull packs rel of the workspace (entries named top) and unpacks it
// below the host's root with o. The archive is spooled first, bounded by
// receiveBound: one that grows past it stops the copy, with an error
// wrapping transfer.ErrTooLarge that names the bound, before anything
// is written below root.
func pull(ctx context.Context, w *Workspace, rel, top, root string, o transfer.Options) (Result, error) {
	f, err := spool()
	if err != nil {
		return Result{}, err
	}
	defer f.Close()
	b, err := receiveBound(root, f)
	if err != nil {
		return Result{}, err
	}
	if w.Remote != nil {
		err = w.Remote.CopyOut(ctx, rel, top, f, max(b.max, 1))
	} else {
		// Zeros as holes: the archive of a sparse file (a disk image,
		// `truncate -s 100G`) takes the spool's disk only for its data,
		// so one past the bound is refused without filling the disk.
		sw := sparse.NewWriter(f)
		if _, err = transfer.Pack(&capped{w: sw, max: b.max}, w.Root, rel, top); err == nil {
			err = sw.Finish()
		}
	}
	if errors.Is(err, transfer.ErrTooLarge) {
		_ = f.Truncate(0)
		what := "workspace"
		if rel != "." {
			what += " path " + rel
		}
		return Result{}, fmt.Errorf("%w: the archive of session %s's %s grew past %s, %s; nothing was written", transfer.ErrTooLarge, w.Session, what, iec(b.max), b.why)
	}
	if err != nil {
		return Result{}, err
	}
	if o.WantSHA256, err = fileSHA(f); err != nil {
		return Result{}, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return Result{}, err
	}
	res := Result{Into: filepath.Join(root, o.Dest, o.Dir)}
	res.Stats, err = transfer.Unpack(f, root, o)
	return res, err
}

// nested refuses a sync whose host directory dir (absolute) and w's
// workspace on this host hold one another: a pull into the workspace
// (or a directory in it) copies the workspace into itself, a push of a
// directory that holds the workspace copies it into itself, each
// growing with what it copies (a new user's pull from the wrong
// directory copied 842 MB of caches into the project). A pod's
// workspace is on another machine: nothing to refuse.
func nested(w *Workspace, dir string, pullBack bool) error {
	if w.Remote != nil || w.Root == "" {
		return nil
	}
	real := func(p string) string {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			return r
		}
		return filepath.Clean(p)
	}
	root, d := real(w.Root), real(dir)
	within := func(p, top string) bool {
		rel, err := filepath.Rel(top, p)
		return err == nil && rel != ".." && !strings.HasPrefix(rel, "../")
	}
	switch {
	case pullBack && within(d, root):
		return fmt.Errorf("%s lies inside session %s's workspace (%s): a pull would copy the workspace into itself; pull into a directory outside it", dir, w.Session, w.Root)
	case !pullBack && within(root, d):
		return fmt.Errorf("%s holds session %s's workspace (%s): a push would copy the workspace into itself; push a directory beside or inside it", dir, w.Session, w.Root)
	}
	return nil
}

// Sync makes the workspace's top hold the host directory dir's contents
// (pull: the host directory the workspace's), deleting what the other
// side lacks only with del. Pushing never deletes the workspace's
// protected paths; pulling holds back what o does not include of the
// risky paths, and never deletes one on the host.
func Sync(ctx context.Context, w *Workspace, dir string, pullBack, del bool, o Out) (Result, error) {
	abs, err := startdir.Abs(dir)
	if err != nil {
		return Result{}, err
	}
	if err := nested(w, abs, pullBack); err != nil {
		return Result{}, err
	}
	if pullBack {
		if err := os.MkdirAll(abs, 0o755); err != nil {
			return Result{}, err
		}
		return pull(ctx, w, ".", "", abs, transfer.Options{Dir: ".", Delete: del, Gate: o.gate(abs)})
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return Result{}, fmt.Errorf("%s is not a directory", dir)
	}
	return push(ctx, w, abs, ".", "", transfer.Options{Dir: ".", Delete: del, Keep: sandbox.DefaultProtected})
}
