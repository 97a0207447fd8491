package bwrap

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/handback"
	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/internal/pathres"
	"github.com/corralhq/corral/internal/termsafe"
	"github.com/corralhq/corral/sandbox"
)

// Protected paths (sandbox.Request.Protected) in bubblewrap.
//
// A protected path that exists when the plan is built is bound read-only
// onto itself, after the writable mount that holds it, and the directories
// between that mount and it are pinned (bound onto themselves), so a command
// can neither write it nor rename or remove it, nor any directory on the way
// (rename(2) and unlink(2) of a mount point fail with EBUSY). This is the
// strong part, and it leaves nothing on the host.
//
// A protected path that does not exist cannot be covered that way: bwrap
// would first make a mount point for it on the host, through the writable
// bind, and that empty .bashrc, .vscode/ or .mcp.json would stay behind in
// the person's project (for good once corral is killed: the junk other
// agent sandboxes are known for). So:
//
//   - A missing hooks directory or config file of an existing git directory
//     (one that holds HEAD: a .git, a submodule's below .git/modules, a
//     separate git directory or a bare repository the scan found; not a
//     linked worktree's, whose are its common directory's) is made on the
//     host before the sandbox starts, as `git init` would have made it (an
//     empty directory, an empty file, which git reads as no settings), and
//     then bound read-only like any other. Nothing appears outside git
//     directories, and the common case (a repository whose .git/hooks is missing
//     because it was cloned without templates) is as strong as the rest.
//   - For any other, the check comes after the command: once the sandbox
//     has ended (its whole pid namespace with it), the writable directories
//     are scanned again, within the same bounds, and whatever protected
//     path appeared is moved into the quarantine directory of corral's
//     state directory (hidden from every sandbox; removed instead where
//     that is on another file system), and the result says so. Until then
//     it exists on the host, and a command in the background keeps it
//     until it ends: this part closes the door for later, not during the
//     command. The rescan costs as much as the scan before (a fraction of a
//     millisecond for a small project) and also catches what no list of
//     missing paths could name: a repository made in an existing
//     subdirectory (whose .git would take over the person's git there), a
//     submodule's new git directory under .git/modules (at any depth, within
//     the walk's bounds), a bare repository or the git directory a new
//     gitfile points to.
//
// So when a command runs `git init` or `git clone` where there was no
// .git, the fresh .git/hooks and .git/config are writable during that
// command (a hook written then runs only inside the sandbox) and moved out
// when it ends. The configuration's safe part (its remotes, branch
// upstreams and repository format: handback.SanitizeGitConfig) is written
// back in its place, so a clone still knows its origin and `git pull`
// works; what runs programs on the host (core.fsmonitor, aliases with "!",
// drivers, include.path, ...) is dropped and named in the note. From the
// next command on both exist and are read-only.
//
// Symlinks: a protected path reached through a symlink is bound at its real
// location when that lies in a writable directory of the sandbox, never
// elsewhere (a target outside is read-only or hidden already, and binding it
// could show what is hidden). The symlinks themselves sit in a writable
// directory and cannot be bound: each is checked after the command, and one
// replaced or removed is put back, the replacement moved out as above.
//
// Races with other sandboxes of the same tree (a background command): the
// binds are made from descriptors where bwrap can (Binary.BindFD; see
// openBindFDs), so a path swapped for a symlink between the plan and the
// mount cannot make bwrap bind what it leads to; and all host changes
// (making, moving, restoring) go through a descriptor of the resolved parent
// directory, checked to still be inside the writable directory it came
// from. What a background command makes at a protected path stays until
// that command ends (the check runs then), and what a command made stays
// if corral itself is killed before the check.
//
// The scan is bounded (hostview.FindProtected). When it is cut short in a
// writable directory, Run refuses the command (scanCutError, before
// anything is made on the host): the part it did not see could hold a
// protected path a command made (a flood of directories below .git/modules
// or at the top hides the next one), which would be writable. When the
// scan after a command is cut short, the result warns; the next command is
// refused then.
//
// A directory on the way to a protected path is pinned, so it cannot be
// renamed or removed in the sandbox: `rm -rf vendor/lib` fails with "Device
// or resource busy" when vendor/lib is a repository the scan found.

// protectRoot is a writable directory of the sandbox: its host path and
// where the sandbox sees it.
type protectRoot struct{ src, dest string }

// protectItem is a protected path the backend looks after on the host,
// outside the mount plan: a git-directory member to make (Path resolved, Dir
// for a directory), or a symlink to put back if replaced (Path as named,
// Target its target).
type protectItem struct {
	Path   string
	Dir    bool
	Target string
}

// protected applies the request's protected-path patterns to every
// writable directory of the plan (see the comment at the top of this file).
// It runs after masks, so nothing it binds can show a masked path.
func (p *planner) protected(plan *Plan) error {
	pats := p.req.ProtectedPatterns()
	if err := sandbox.CheckProtected(pats); err != nil {
		return err
	}
	if len(pats) == 0 {
		return nil
	}
	view := p.host.view
	dirs := map[string]bool{} // isDir, cached: most missing paths share a parent
	isDirCached := func(d string) bool {
		v, ok := dirs[d]
		if !ok {
			v = p.res.IsDir(view.path(d))
			dirs[d] = v
		}
		return v
	}
	var roots []protectRoot
	for _, w := range p.writes {
		src := w
		if s, ok := p.bindSrc[w]; ok {
			src = s
		}
		if isDirCached(src) { // not a bound file, socket or device
			roots = append(roots, protectRoot{src: src, dest: w})
		}
	}
	plan.protectRoots, plan.protectPats, plan.protectBefore = roots, pats, map[string]bool{}
	rootOf := func(q string) (protectRoot, bool) {
		best, ok := protectRoot{}, false
		for _, r := range roots {
			if within(q, r.src) && len(r.src) >= len(best.src) {
				best, ok = r, true
			}
		}
		return best, ok
	}
	links := map[string]bool{}
	for _, r := range roots {
		found, truncated, err := findProtected(r.src, pats, view, p.host.Dirs, p.res)
		if truncated {
			plan.ProtectScanCut = append(plan.ProtectScanCut, r.src)
		}
		if err != nil && plan.ProtectScanErr == nil {
			plan.ProtectScanErr = fmt.Errorf("looking for protected paths in %s: %w", r.src, err)
		}
		for _, f := range found {
			if view.covers(f.Path) && len(f.Links) > 0 {
				// Symlinks on the way inside the layer are not resolved
				// here (they would resolve on the host, not in the layer);
				// the check after the command sees what the command made.
				continue
			}
			for _, l := range f.Links {
				abs := filepath.Join(r.src, filepath.FromSlash(l))
				if t, err := p.res.Readlink(abs); err == nil && !links[abs] {
					links[abs] = true
					plan.Links = append(plan.Links, protectItem{Path: abs, Target: t})
				}
			}
			// The roots are resolved, and the scan reports every symlink on
			// the way: without one, the path is real as it is (this saves
			// an lstat(2) per component per path, most of the cost).
			if f.Exists {
				plan.protectBefore[f.Path] = true
				real := f.Path
				if len(f.Links) > 0 {
					var err error
					if real, err = p.res.EvalSymlinks(f.Path); err != nil {
						continue // a dangling symlink: put back if replaced
					}
				}
				rr, ok := rootOf(real)
				if !ok || f.NotDir && p.res.IsDir(view.path(real)) {
					continue // leads out of the writable set, or a .git directory
				}
				p.roBindProtected(rr, real)
				continue
			}
			// Missing: only a git-directory member is made now; anything
			// else is for the check after the command.
			parent, err := filepath.Dir(f.Path), error(nil)
			if len(f.Links) > 0 {
				parent, err = p.res.EvalSymlinks(parent)
			}
			if err != nil || !isDirCached(parent) {
				continue
			}
			real := filepath.Join(parent, filepath.Base(f.Path))
			rr, ok := rootOf(real)
			if !ok {
				continue
			}
			if dir, ok := gitMember(p.res, f, view.path(parent)); ok && p.roBindProtected(rr, real) {
				plan.Create = append(plan.Create, protectItem{Path: real, Dir: dir})
				plan.protectBefore[f.Path] = true
			}
		}
	}
	return nil
}

// scanCutError refuses the command when the scan before it was cut short
// in a writable directory (plan.ProtectScanCut): the scan did not look at
// all of the directory, so a protected path a command made there (a nested
// repository, a submodule's git directory or gitfile) would be writable.
// The refusal comes before anything is made on the host.
func scanCutError(plan *Plan) error {
	if plan.ProtectScanErr != nil {
		// Not the tree's size: a passing cause, the caller may retry.
		return plan.ProtectScanErr
	}
	if len(plan.ProtectScanCut) == 0 {
		return nil
	}
	return hostview.ScanCutError(plan.ProtectScanCut[0], plan.ProtectScanCut[0] == plan.Workdir)
}

// roBindProtected binds the host path real, which lies in the writable
// directory r, read-only where the sandbox sees it, and pins the
// directories between r and it (bound onto themselves, so none can be
// renamed away: a directory that holds a protected path cannot be renamed
// or removed in the sandbox). It binds nothing where the path is masked (a
// credential store in the working directory): binding it would show what
// the mask hides. It reports whether it bound it.
func (p *planner) roBindProtected(r protectRoot, real string) bool {
	dest := filepath.Join(r.dest, strings.TrimPrefix(real, r.src))
	for _, s := range p.steps {
		if s.phase != phaseMask || !within(dest, s.m.Dest) {
			continue
		}
		if s.m.Kind == mTmpfs || s.m.Kind == mRoBind && s.m.Src == p.host.EmptyFile {
			return false
		}
	}
	for d := filepath.Dir(dest); within(d, r.dest) && d != r.dest; d = filepath.Dir(d) {
		p.add(phaseMask, mount{Kind: mBind, Src: filepath.Join(r.src, strings.TrimPrefix(d, r.dest)), Dest: d, ViaFD: true})
	}
	p.add(phaseMask, mount{Kind: mRoBind, Src: real, Dest: dest, ViaFD: true})
	return true
}

// openBindFDs opens the sources of the plan's ViaFD binds when bwrap binds
// from descriptors, numbering them from first in bwrap (the caller passes
// them in that order) and setting each mount's FD. A command of another
// sandbox of the same tree could swap a path for a symlink between the plan
// and bwrap's mount; bwrap before 0.12 would follow it when it binds by
// path, and bind whatever it leads to (a hidden credential store) into the
// sandbox. A descriptor is opened without following a symlink at its last
// component and checked to be the planned path; bwrap checks that it
// mounted what the descriptor names, and closes it before the command
// runs. Without descriptor binds (a bwrap 0.8 without the backport) the
// binds stay by path, with that race.
func openBindFDs(plan *Plan, bin *Binary, first int, view *layerHolder) ([]*os.File, error) {
	if !bin.BindFD {
		return nil, nil
	}
	var files []*os.File
	for i := range plan.Mounts {
		m := &plan.Mounts[i]
		if !m.ViaFD {
			continue
		}
		var fd int
		var err error
		if view.covers(m.Src) {
			// In the layer, through no symlink on the way; a symlink
			// itself is refused as below.
			if fd, err = view.openInView(m.Src, unix.O_PATH|unix.O_NOFOLLOW); err == nil {
				var st unix.Stat_t
				if unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
					unix.Close(fd)
					err = fmt.Errorf("it changed while the sandbox was prepared")
				}
			}
		} else if fd, err = unix.Open(m.Src, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
			// O_PATH|O_NOFOLLOW opens a symlink itself: refuse one, and a
			// path that resolved elsewhere.
			var st unix.Stat_t
			now, rerr := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
			if rerr != nil || now != m.Src || unix.Fstat(fd, &st) != nil || st.Mode&unix.S_IFMT == unix.S_IFLNK {
				unix.Close(fd)
				err = fmt.Errorf("it changed while the sandbox was prepared")
			}
		}
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			if sandbox.IsTransient(err) {
				// A full table (EMFILE), not a path that moved.
				return nil, fmt.Errorf("opening the protected path %s: %w", m.Src, err)
			}
			return nil, fmt.Errorf("%w: protected path %s: %v; run the command again", sandbox.ErrPolicy, m.Src, err)
		}
		files = append(files, os.NewFile(uintptr(fd), m.Src))
		m.FD = first + len(files) - 1
	}
	return files, nil
}

// gitMembers says whether name is a protected member of a git directory
// that git itself makes (`git init`), and so may be made where missing, and
// whether it is a directory.
func gitMembers(name string) (dir, ok bool) {
	switch name {
	case "hooks":
		return true, true
	case "config":
		return false, true
	}
	return false, false
}

// gitMember reports whether f (a missing protected path) is a member of a
// git directory that corral may make in parent, its resolved parent, and
// whether it is a directory. f must lie in a .git or in a git directory
// that a .git stood for (a separate git directory, a bare repository:
// f.Aliased), and the parent must be a git directory: it holds HEAD. A
// linked worktree's git directory (it holds commondir) is left alone: git
// takes hooks and configuration from the common directory, so what corral
// made there would only be clutter.
func gitMember(res *pathres.Resolver, f hostview.ProtectedPath, parent string) (dir bool, ok bool) {
	dir, ok = gitMembers(filepath.Base(f.Rel))
	if !ok || !f.Aliased && !strings.Contains("/"+f.Rel, "/.git/") {
		return false, false
	}
	if _, err := res.Lstat(filepath.Join(parent, "commondir")); err == nil {
		return false, false
	}
	st, err := res.Lstat(filepath.Join(parent, "HEAD"))
	return dir, err == nil && st.Mode().IsRegular()
}

// openDirIn opens the directory dir (resolved) for *at system calls and
// checks, once it is open, that it is still dir and lies inside one of
// roots, so a symlink swapped in between cannot redirect what follows. A
// directory of a review layer (view) is opened as the layer shows it,
// through no symlink.
func openDirIn(dir string, roots []protectRoot, view *layerHolder) (int, error) {
	inside := false
	for _, r := range roots {
		inside = inside || within(dir, r.src)
	}
	if !inside {
		return -1, fmt.Errorf("%s is outside the writable directories", dir)
	}
	if view.covers(dir) {
		return view.openInView(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if now, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd)); err != nil || now != dir {
		unix.Close(fd)
		return -1, fmt.Errorf("%s changed while it was opened", dir)
	}
	return fd, nil
}

// prepareProtected makes the missing git-directory members the plan binds
// (plan.Create). For one that cannot be made, the bind is dropped with a
// warning, and the check after the command looks after it.
func (b *Backend) prepareProtected(plan *Plan) {
	var keep []protectItem
	for _, c := range plan.Create {
		if err := makeMember(c, plan.protectRoots, plan.view); err != nil {
			plan.Warnings = append(plan.Warnings, fmt.Sprintf("protected path %s could not be made read-only (%v); it is checked after the command instead", termsafe.Path(c.Path), err))
			plan.Mounts = dropMount(plan.Mounts, c.Path)
			continue
		}
		keep = append(keep, c)
	}
	plan.Create = keep
}

func makeMember(c protectItem, roots []protectRoot, view *layerHolder) error {
	fd, err := openDirIn(filepath.Dir(c.Path), roots, view)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	name := filepath.Base(c.Path)
	if c.Dir {
		err = unix.Mkdirat(fd, name, 0o755)
	} else {
		var f int
		f, err = unix.Openat(fd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(f)
		}
	}
	if errors.Is(err, unix.EEXIST) {
		// Made meanwhile (by another sandbox of the same tree): fine if it
		// has the right type, which the bind then covers.
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		if isDirMode := st.Mode&unix.S_IFMT == unix.S_IFDIR; isDirMode != c.Dir {
			return fmt.Errorf("%s exists with another type", c.Path)
		}
		return nil
	}
	return err
}

// dropMount drops the read-only bind of the host path src.
func dropMount(ms []mount, src string) []mount {
	out := ms[:0]
	for _, m := range ms {
		if m.Kind == mRoBind && m.Src == src {
			continue
		}
		out = append(out, m)
	}
	return out
}

// checkProtected runs after the sandbox has ended: it puts back the
// symlinks on the way to protected paths that the command replaced or
// removed, scans the writable directories again and moves out every
// protected path that appeared. It returns what it did, for the result's
// warnings.
func (b *Backend) checkProtected(plan *Plan) []string {
	if len(plan.protectPats) == 0 {
		return nil
	}
	q := &quarantine{dir: filepath.Join(b.opts.StateDir, "quarantine")}
	defer q.close()
	var warns []string
	var held []handback.Held
	for _, l := range plan.Links {
		if w := q.restoreLink(l, plan.protectRoots, plan.view); w != "" {
			warns = append(warns, w)
		}
	}
	for _, r := range plan.protectRoots {
		found, truncated, err := findProtected(r.src, plan.protectPats, plan.view, &b.dirs, nil) // afresh: after the command
		if err != nil {
			// What the scan could not open is not checked; the next
			// command's scan looks again before it runs.
			warns = append(warns, fmt.Sprintf("the check for protected paths after the command could not read all of %s (%v); what the command made there at a protected path was not moved out", termsafe.Path(r.src), err))
		} else if truncated {
			// What the scan did not reach is not checked; the next
			// command is refused (scanCutError).
			warns = append(warns, hostview.ScanCutWarning(r.src, r.dest == plan.Workdir))
		}
		for _, f := range found {
			if f.Exists && !plan.protectBefore[f.Path] {
				h, w := q.sweep(f, plan.protectRoots, plan.view)
				if w != "" {
					warns = append(warns, w)
				}
				if h != nil {
					if rel, err := filepath.Rel(plan.Workdir, h.Path); err == nil && plan.Workdir != "" && filepath.IsLocal(rel) {
						h.Path = rel
					}
					held = append(held, *h)
				}
			}
		}
	}
	// One line for all it held, not one per file (git init makes two).
	if n := handback.HeldNotice(held, q.sub); n != "" {
		warns = append(warns, n)
	}
	return warns
}

// quarantine is where checkProtected moves what a command made at a
// protected path: one directory per sandbox, made on first use.
type quarantine struct {
	dir string
	fd  int // of this sandbox's directory, once made
	sub string
	n   int
}

func (q *quarantine) close() {
	if q.sub != "" {
		unix.Close(q.fd)
	}
}

// take moves the entry name of the directory parentFd (whose path is
// parent) out of the tree, returning where it went ("" when removed).
func (q *quarantine) take(parentFd int, parent, name string) (string, error) {
	if q.sub == "" {
		if err := os.MkdirAll(q.dir, 0o700); err != nil {
			return "", err
		}
		sub, err := os.MkdirTemp(q.dir, time.Now().UTC().Format("20060102T150405Z")+"-")
		if err != nil {
			return "", err
		}
		fd, err := unix.Open(sub, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "", err
		}
		q.fd, q.sub = fd, sub
	}
	q.n++
	to := strconv.Itoa(q.n) + "-" + strings.ReplaceAll(strings.TrimPrefix(filepath.Join(parent, name), "/"), "/", "%")
	err := unix.Renameat(parentFd, name, q.fd, to)
	if err == nil {
		return filepath.Join(q.sub, to), nil
	}
	if !errors.Is(err, unix.EXDEV) {
		return "", err
	}
	// Another file system: remove it, through the same descriptor.
	root, err := os.OpenRoot("/proc/self/fd/" + strconv.Itoa(parentFd))
	if err != nil {
		return "", err
	}
	defer root.Close()
	return "", root.RemoveAll(name)
}

// sweep moves out the protected path f, which the command made: what it
// held, or a warning when it could not (or when f is behind a symlink in
// the review layer, which it leaves for the person to look at).
func (q *quarantine) sweep(f hostview.ProtectedPath, roots []protectRoot, view *layerHolder) (*handback.Held, string) {
	parent, err := filepath.Dir(f.Path), error(nil)
	if len(f.Links) > 0 && view.covers(f.Path) {
		return nil, fmt.Sprintf("%s was made by the command behind a symlink in the review layer; it is a protected path: look at it before you apply the layer", termsafe.Path(f.Path))
	}
	if len(f.Links) > 0 {
		parent, err = filepath.EvalSymlinks(parent)
	}
	if err != nil {
		return nil, ""
	}
	fd, err := openDirIn(parent, roots, view)
	if err != nil {
		return nil, "" // it leads out of the writable set, which was read-only
	}
	defer unix.Close(fd)
	name := filepath.Base(f.Path)
	var st unix.Stat_t
	if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, ""
	}
	if f.NotDir && st.Mode&unix.S_IFMT == unix.S_IFDIR {
		return nil, "" // a .git directory, where a gitfile is protected
	}
	if !handback.IsGitConfigPattern(f.Pattern) || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return q.hold(fd, parent, name)
	}
	// A git configuration: its safe part is written back once it is out.
	root, err := os.OpenRoot("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil {
		return q.hold(fd, parent, name)
	}
	defer root.Close()
	cfg := handback.ReadGitConfig(root, name)
	h, w := q.hold(fd, parent, name)
	if h != nil && cfg != nil {
		h.Kept = strings.TrimPrefix(handback.WriteBackGitConfig(root, name, cfg), "; ")
	}
	return h, w
}

// hold moves name out: what it held, or a warning saying it could not.
func (q *quarantine) hold(fd int, parent, name string) (*handback.Held, string) {
	p := filepath.Join(parent, name)
	to, err := q.take(fd, parent, name)
	if err != nil {
		return nil, fmt.Sprintf("%s was made by the command, but it is a protected path (programs on the host run it later); moving it out failed (%v): remove it by hand", termsafe.Path(p), err)
	}
	return &handback.Held{Path: p, Removed: to == ""}, ""
}

// restoreLink puts back the symlink l if the command replaced or removed
// it.
func (q *quarantine) restoreLink(l protectItem, roots []protectRoot, view *layerHolder) string {
	if view.covers(l.Path) {
		return "" // planned on the host's files: the layer's are not put back
	}
	if t, err := os.Readlink(l.Path); err == nil && t == l.Target {
		return "" // unchanged, the common case
	}
	parent, err := filepath.EvalSymlinks(filepath.Dir(l.Path))
	if err != nil || parent != filepath.Dir(l.Path) {
		return "" // a directory on the way is gone or was moved: not ours to rebuild
	}
	fd, err := openDirIn(parent, roots, view)
	if err != nil {
		return ""
	}
	defer unix.Close(fd)
	name := filepath.Base(l.Path)
	buf := make([]byte, unix.PathMax)
	if n, err := unix.Readlinkat(fd, name, buf); err == nil && string(buf[:n]) == l.Target {
		return ""
	}
	msg := ""
	var st unix.Stat_t
	if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		msg = q.report(fd, parent, name, "replaced a symlink that leads to a protected path")
	}
	if err := unix.Symlinkat(l.Target, fd, name); err != nil {
		return strings.TrimSpace(msg + fmt.Sprintf(" The symlink %s -> %s could not be put back: %v", termsafe.Path(l.Path), termsafe.Path(l.Target), err))
	}
	if msg == "" {
		msg = fmt.Sprintf("%s, a symlink that leads to a protected path, was removed by the command; it was put back", termsafe.Path(l.Path))
	} else {
		msg += "; the symlink was put back"
	}
	return msg
}

// report moves name out and says so.
func (q *quarantine) report(fd int, parent, name, what string) string {
	p := filepath.Join(parent, name)
	to, err := q.take(fd, parent, name)
	switch {
	case err != nil:
		return fmt.Sprintf("%s %s, but it is a protected path (programs on the host run it later); moving it out failed (%v): remove it by hand", termsafe.Path(p), what, err)
	case to == "":
		return fmt.Sprintf("%s %s, but it is a protected path (programs on the host run it later); it was removed", termsafe.Path(p), what)
	}
	return fmt.Sprintf("%s %s, but it is a protected path (programs on the host run it later); it was moved to %s", termsafe.Path(p), what, termsafe.Path(to))
}
