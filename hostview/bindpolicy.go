package hostview

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/corralhq/corral/internal/pathres"
	"github.com/corralhq/corral/sandbox"
)

// BindHost are the facts about the host that every bind of one sandbox is
// judged by (DecideBind). A backend fills them once per sandbox: the ones it
// knows itself (Home, HiddenDirs, WritableRoots, Allow, HostRoot, ...) and
// the ones read from the host with GatherBindHost. Paths are absolute,
// clean and resolved.
type BindHost struct {
	// Home is the caller's home directory, or "" when there is none.
	Home string
	// OtherHomes are the home directories of the other people of the
	// passwd database (uid 0, so /root, and uids from 1000; PeopleHomes)
	// that exist.
	OtherHomes []string
	// HiddenDirs are corral's own directories (config and state): never
	// shown.
	HiddenDirs []string
	// WritableRoots are the host directories the sandbox can write (the
	// working directory when writable, the scratch directory, the sources
	// of read-write binds): a bind source inside one could be swapped for a
	// symlink by a command before the next sandbox is made.
	WritableRoots []string
	// Allow are the dot entries shown in every home, relative to it
	// (slash-separated): DefaultHomeAllow, DefaultNestedAllow and the
	// home_allow setting (less entries that are or hold a credential
	// store). An entry allows what lies below it.
	Allow []string
	// AllowPaths are directories shown wherever they lie in a home (the
	// PATH directories under the caller's home).
	AllowPaths []string
	// CredentialTargets are the credential stores and files
	// (CredentialStores, CredentialFiles) of every home that exist, where
	// their symlinks lead, and where symlinks inside the stores lead
	// (CredentialTargets): hidden wherever they are.
	CredentialTargets []string
	// MaskFiles are files that read as empty where they lie (the engine
	// sockets the bwrap backend masks, EngineSockets resolved).
	MaskFiles []string
	// Secrets are the existing files that SystemSecrets match: they read as
	// empty.
	Secrets []string
	// HostRoot is set when the sandbox may hold host uid 0, or otherwise
	// rights corral's own uid lacks: the bwrap backend run as root; a
	// docker container whose user is uid 0, the image's (docker.user none),
	// or another uid than corral's. What corral could not look at, the
	// sandbox then could: a source corral cannot list fully is refused.
	HostRoot bool
	// DeviceBinds is set when the backend can bind device nodes, sockets
	// and FIFOs below /dev (bwrap, whose /dev is its own tmpfs); without
	// it every destination under /dev is refused (docker: the container's
	// /dev is the engine's).
	DeviceBinds bool
	// Res resolves and stats the host paths GatherBindHost and
	// InspectBindSource read, for one sandbox's plan (pathres: each looked
	// up once); nil reads afresh. DecideBind never uses it.
	Res *pathres.Resolver
}

// BindSource are the facts about one bind's source, read from the host by
// InspectBindSource. Paths are absolute and clean; maps are keyed by
// absolute path.
type BindSource struct {
	// Resolved is the source with every symlink resolved; "" when Err is
	// set.
	Resolved string
	// Err is why the source could not be resolved (wraps fs.ErrNotExist for
	// a missing one).
	Err error
	// Mode is the resolved source's mode (type and permission bits).
	Mode fs.FileMode
	// Kinds are the type bits (fs.FileMode.Type, from lstat(2): a symlink
	// is one) of the paths at or below Resolved that the policy may cover:
	// the entries of Listings, the credential stores and files of homes,
	// HiddenDirs, CredentialTargets, MaskFiles and Secrets. A path missing
	// from Kinds does not exist.
	Kinds map[string]fs.FileMode
	// Listings are the entry names of the home directories, and of their
	// NestedHomeDirs, that lie at or below Resolved (or that Resolved lies
	// in), by directory.
	Listings map[string][]string
	// Unread are directories at or below Resolved that exist but could not
	// be listed (a home's, or one the socket scan met): what is inside is
	// unknown.
	Unread []string
	// Sockets are the Unix sockets at or below Resolved (ScanSockets).
	Sockets []Socket
	// ScanCut is set when ScanSockets stopped at its bounds: sockets
	// beyond them were not seen.
	ScanCut bool
}

// Socket is a Unix socket found on the host.
type Socket struct {
	// Path is absolute.
	Path string
	// Mode is its mode: type and permission bits.
	Mode fs.FileMode
	// UID and GID own it.
	UID, GID uint32
}

// BindDecision is what DecideBind made of one bind.
type BindDecision struct {
	// Mount is false when the bind is ignored: Warnings say why.
	Mount bool
	// Src is the host path to mount (the resolved source), Dest where it
	// appears in the sandbox: the resolved source when the bind is at its
	// own path (no destination, or the source's own).
	Src, Dest string
	// ReadOnly is the bind's.
	ReadOnly bool
	// Mode is the source's mode (Resolved's): directory, regular file,
	// device node, socket or FIFO.
	Mode fs.FileMode
	// HideDirs are directories below Dest that must be covered by an empty
	// read-only (or private) tmpfs, EmptyFiles files below Dest that must
	// read as empty (an empty read-only file bound over them): paths in the
	// sandbox, sorted, none below a HideDirs entry.
	HideDirs, EmptyFiles []string
	// Warnings are for the person: why the bind is ignored, or what could
	// not be checked.
	Warnings []string
}

// DecideBind applies the bind rules that every backend shares to b, given
// the facts about the host (h) and about b's source (s). It is pure: the
// facts are read by GatherBindHost and InspectBindSource.
//
// A malformed bind (a relative path) is an error wrapping ErrBadRequest; a
// refused one an error wrapping ErrPolicy that names the bind, the rule
// and the fix; an ignored one a decision with Mount false and a warning.
// The rules, in order (README.md "Binds" lists them for people):
//
//   - Source and destination are absolute; the destination is not / nor
//     under /proc or /sys (nor /dev without h.DeviceBinds); the source is
//     not / nor under /proc or /sys, after symlinks are resolved.
//   - A missing source: refused when read-only, ignored when read-write
//     (it may be made later).
//   - A source in a hidden path is ignored: corral's own directories, a
//     credential store of any home or where one leads, a dot entry of any
//     home that the allowlist does not show.
//   - The caller's home directory, or a directory that holds it, is
//     refused: the bind would undo the home rules.
//   - A source in a dot entry of any home is refused read-write (dot
//     entries are always read-only) and ignored unless allowed (Allow,
//     AllowPaths).
//   - A read-write bind that holds another person's home is refused: a
//     command could plant start-up files there.
//   - A container engine's socket or state (EngineSockets, EngineDirs,
//     EngineSocketNames), or a directory holding one, is refused.
//   - A read-write bind of a directory or regular file in a system tree
//     (SystemTrees) is refused, and a directory under /dev.
//   - Bound elsewhere than at its own path, a source that holds a hidden
//     path (the rules cover those only where they lie: a home, a dot
//     entry, a credential store or target, corral's directories, an engine
//     socket, a system secret) is ignored.
//   - A source inside a writable root is refused unless bound at its own
//     path directly under it with no symlink on the way.
//   - At its own path, what the home rules hide inside the source is
//     covered: dot entries of every home that are not allowed and the
//     children of their .config, .local and .local/share that are not,
//     credential stores and files and their targets, corral's directories
//     (HideDirs for directories, EmptyFiles for the rest; symlinks are left
//     alone, their targets are judged where they lie).
//   - A Unix socket in the source (the source itself included) that not
//     everyone may connect to (no write bit for others: only its owner or
//     group, root's services among them), or that is named as an engine's,
//     is refused unless covered: a sandbox could reach a service an
//     unprivileged user cannot.
//   - With h.HostRoot, a directory the checks could not list, or a socket
//     scan cut short by its bounds, refuses the bind (what corral did not
//     see, the sandbox could); otherwise a cut scan is a warning.
func DecideBind(b sandbox.Bind, h *BindHost, s *BindSource) (BindDecision, error) {
	desc := describeBind(b)
	refuse := func(format string, args ...any) (BindDecision, error) {
		return BindDecision{}, fmt.Errorf("%w: bind %s: %s", sandbox.ErrPolicy, desc, fmt.Sprintf(format, args...))
	}
	ignore := func(format string, args ...any) (BindDecision, error) {
		return BindDecision{Warnings: []string{fmt.Sprintf("bind %s %s", desc, fmt.Sprintf(format, args...))}}, nil
	}
	if !filepath.IsAbs(b.Src) || b.Dest != "" && !filepath.IsAbs(b.Dest) {
		return BindDecision{}, fmt.Errorf("%w: bind %s: source and destination must be absolute paths", sandbox.ErrBadRequest, desc)
	}
	src := filepath.Clean(b.Src)
	dest := filepath.Clean(b.Target())
	if dest == "/" {
		return refuse("destination / is refused (it would cover the whole root); choose a directory")
	}
	if src == "/" {
		return refuse("the source / would show the whole host; bind the directories you need")
	}
	if Within(dest, "/proc") || Within(dest, "/sys") {
		return refuse("destinations under /proc and /sys are refused (they are the kernel's interfaces); choose another destination")
	}
	if Within(dest, "/dev") && !h.DeviceBinds {
		return refuse("destinations under /dev are refused (the kernel's devices); choose another destination")
	}
	if s.Err != nil {
		if !b.ReadOnly && errors.Is(s.Err, fs.ErrNotExist) {
			return ignore("skipped: the source does not exist")
		}
		return refuse("the source cannot be used (%v); create it or remove the bind", s.Err)
	}
	r := s.Resolved
	if r == "/" {
		return refuse("the source resolves to /, which would show the whole host; bind the directories you need")
	}
	if Within(r, "/proc") || Within(r, "/sys") {
		return refuse("sources under /proc and /sys are refused (they are the host's kernel interfaces)")
	}
	homes := h.homes()

	// Hidden paths: ignored, as they are everywhere else.
	for _, d := range h.HiddenDirs {
		if Within(r, d) {
			return ignore("ignored: the source is a hidden path (corral's own directory %s)", d)
		}
	}
	for _, home := range homes {
		if rel, ok := RelToHome(r, home); ok && (IsCredentialRel(rel) || !h.visible(home, rel)) {
			return ignore("ignored: the source is a hidden path (a credential store, or a dot entry of the home directory %s that is not allowed); add it to home_allow if it is safe to show", home)
		}
	}
	for _, t := range h.CredentialTargets {
		if Within(r, t) {
			return ignore("ignored: the source is a hidden path (the credential store %s, or where one leads)", t)
		}
	}
	if home := h.Home; home != "" && home != "/" && Within(home, r) {
		return refuse("the source is the home directory or holds it, and a bind would undo the home rules (hidden dot entries, read-only allowed entries); bind the entries you need instead")
	}
	for _, home := range homes {
		rel, ok := RelToHome(r, home)
		if !ok || !strings.HasPrefix(rel, ".") {
			continue
		}
		if !b.ReadOnly {
			return refuse("dot entries of a home directory (%s) are always read-only in the sandbox; bind it read-only", home)
		}
		if !h.allowed(home, rel) {
			return ignore("ignored: it would show a dot entry of the home directory %s that is not allowed (add it to home_allow)", home)
		}
	}
	var held []string // homes at or below the source
	for _, home := range homes {
		if Within(home, r) {
			held = append(held, home)
		}
	}
	if len(held) > 0 && !b.ReadOnly {
		return refuse("the source is or holds the home directory %s of another person, and a read-write bind would let a command plant files they run (.bashrc, .profile); bind it read-only, or bind the entries you need", held[0])
	}
	if e := cmp.Or(EnginePath(src), EnginePath(r)); e != "" {
		return refuse("the source is, lies in or holds %s, a container engine's socket or state, which would hand the sandbox the host; bind a directory without it", e)
	}
	if !b.ReadOnly && (s.Mode.IsDir() || s.Mode.IsRegular()) {
		if sys := SystemTree(r); sys != "" {
			return refuse("a read-write bind of %s, a system tree, is refused; bind it read-only", sys)
		}
	}
	if s.Mode.IsDir() && Within(dest, "/dev") {
		return refuse("a directory cannot be bound under /dev (device nodes and sockets can)")
	}

	own := dest == src || dest == r
	hideDirs, emptyFiles := covers(h, s, r, homes)
	if !own {
		if why := holdsHidden(h, r, homes); why != "" || len(hideDirs)+len(emptyFiles) > 0 {
			if why == "" {
				why = "files the home rules hide"
			}
			return ignore("ignored: the source holds %s, which are covered only at their own location; bind it at its own path instead", why)
		}
	}
	for _, w := range h.WritableRoots {
		if w == r && !b.ReadOnly {
			continue // the bind itself
		}
		lexical := Within(src, w) && src != w
		if Within(r, w) && r != w || lexical {
			direct := filepath.Dir(r) == w && r == src && dest == src
			if !direct {
				why := "lies inside"
				if r != src {
					why = "is or passes through a symlink inside"
				}
				return refuse("the source %s %s, which the sandbox can write, so a command could replace it before the next command; bind it at its own path directly under that directory, or move it", why, w)
			}
		}
	}
	if own {
		dest = r
	}
	covered := func(p string) bool {
		return slices.Contains(emptyFiles, p) || slices.ContainsFunc(hideDirs, func(d string) bool { return Within(p, d) })
	}
	if h.HostRoot {
		for _, u := range s.Unread {
			if !covered(u) {
				return refuse("corral cannot list %s, and the sandbox holds host root (uid 0 or another uid than corral's), which could: what is inside cannot be checked for hidden paths and sockets; bind a directory corral can read, or run the sandbox as your own user", u)
			}
		}
	}
	for _, so := range s.Sockets {
		if covered(so.Path) {
			continue
		}
		if slices.Contains(EngineSocketNames, filepath.Base(so.Path)) {
			return refuse("%s is a container engine's socket, which would hand the sandbox the host; bind a directory without it", so.Path)
		}
		if so.Mode.Perm()&0o002 == 0 {
			return refuse("the Unix socket %s (mode %04o, uid %d, gid %d) accepts only its owner or group, so the sandbox could reach a service an unprivileged user cannot (a container engine or an agent is as good as its owner); bind a directory without it, or make it world-writable (chmod o+w) if every local user may use it", so.Path, so.Mode.Perm(), so.UID, so.GID)
		}
	}
	d := BindDecision{Mount: true, Src: r, Dest: dest, ReadOnly: b.ReadOnly, Mode: s.Mode, HideDirs: hideDirs, EmptyFiles: emptyFiles}
	if s.ScanCut {
		if h.HostRoot {
			return refuse("the source holds more than corral checks for Unix sockets (%d directories, %d levels, %d entries), and the sandbox holds host root: a socket past the bounds would be reachable; bind a smaller directory", ScanSocketDirs, ScanSocketDepth, ScanSocketEntries)
		}
		d.Warnings = append(d.Warnings, fmt.Sprintf("bind %s: the source holds more than corral checks for Unix sockets (%d directories, %d levels, %d entries); sockets past the bounds were not checked", desc, ScanSocketDirs, ScanSocketDepth, ScanSocketEntries))
	}
	return d, nil
}

// homes returns the caller's home and the other people's, without "" and
// "/" and without repeats.
func (h *BindHost) homes() []string {
	var out []string
	for _, home := range append([]string{h.Home}, h.OtherHomes...) {
		if home != "" && home != "/" && !slices.Contains(out, home) {
			out = append(out, home)
		}
	}
	return out
}

// allowed reports whether rel (relative to home) is an allowed entry or
// lies inside one. An allowed nested directory (.local/share) allows
// itself, not its children: they follow the dot-entry rule one level down.
func (h *BindHost) allowed(home, rel string) bool {
	parts := strings.Split(rel, "/")
	for i := 1; i <= len(parts); i++ {
		prefix := strings.Join(parts[:i], "/")
		if i < len(parts) && IsNestedHomeDir(prefix) {
			continue
		}
		if slices.Contains(h.Allow, prefix) {
			return true
		}
	}
	abs := filepath.Join(home, rel)
	for _, a := range h.AllowPaths {
		if Within(abs, a) {
			return true
		}
	}
	return false
}

// visible reports whether rel (relative to home) is shown by the home
// rules: a non-dot entry, an allowed dot entry or a path inside one, or a
// nested directory itself (shown with its allowed children only).
func (h *BindHost) visible(home, rel string) bool {
	if !strings.HasPrefix(rel, ".") || h.allowed(home, rel) {
		return true
	}
	parts := strings.Split(rel, "/")
	for i := 1; i <= len(parts); i++ {
		if !IsNestedHomeDir(strings.Join(parts[:i], "/")) {
			return false
		}
	}
	return true
}

// EnginePath returns the entry of EngineDirs or EngineSockets that p (clean,
// absolute) is, lies in or holds, or p itself when its name is one of
// EngineSocketNames; "" when none. It looks at the path only.
func EnginePath(p string) string {
	for _, e := range append(slices.Clone(EngineDirs), EngineSockets...) {
		if Within(p, e) || Within(e, p) {
			return e
		}
	}
	if slices.Contains(EngineSocketNames, filepath.Base(p)) {
		return p
	}
	return ""
}

// holdsHidden names what hidden the source r holds that the rules cover
// only where it lies, or "".
func holdsHidden(h *BindHost, r string, homes []string) string {
	for _, home := range homes {
		if Within(home, r) {
			return "the home directory " + home
		}
		if rel, ok := RelToHome(r, home); ok && strings.HasPrefix(rel, ".") {
			return "a dot entry of the home directory " + home
		}
	}
	for _, group := range []struct {
		what  string
		paths []string
	}{
		{"corral's own directory", h.HiddenDirs},
		{"a credential store or where one leads", h.CredentialTargets},
		{"an engine socket", h.MaskFiles},
		{"a system secret", h.Secrets},
	} {
		for _, p := range group.paths {
			if Within(p, r) {
				return group.what + " " + p
			}
		}
	}
	return ""
}

// covers returns what must be covered in the source r when it is bound at
// its own path: directories (hide) and other files (empty), each sorted
// and none below a hidden directory.
func covers(h *BindHost, s *BindSource, r string, homes []string) (hide, empty []string) {
	set := map[string]bool{} // path -> is a directory
	add := func(p string) {
		if !Within(p, r) || p == r {
			return
		}
		k, ok := s.Kinds[p]
		if !ok || k&fs.ModeSymlink != 0 {
			return // missing, or a symlink: its target is judged where it lies
		}
		set[p] = k.IsDir()
	}
	for _, home := range homes {
		if !Within(home, r) && !Within(r, home) {
			continue
		}
		for _, rel := range append([]string{""}, NestedHomeDirs...) {
			dir := filepath.Join(home, rel)
			if !Within(dir, r) {
				continue
			}
			if rel != "" && dir != r {
				if k, ok := s.Kinds[dir]; !ok || !k.IsDir() {
					continue // missing, or not a directory: judged as an entry of its parent
				}
			}
			names, ok := s.Listings[dir]
			if !ok {
				continue // unreadable: in s.Unread
			}
			for _, name := range names {
				p := filepath.Join(dir, name)
				crel, _ := RelToHome(p, home)
				switch {
				case rel == "" && !strings.HasPrefix(name, "."):
				case IsNestedHomeDir(crel) && s.Kinds[p].IsDir():
					// listed on its own
				case IsCredentialRel(crel) || !h.allowed(home, crel):
					add(p)
				}
			}
		}
		for _, rel := range append(slices.Clone(CredentialStores), CredentialFiles...) {
			add(filepath.Join(home, rel))
		}
	}
	for _, group := range [][]string{h.HiddenDirs, h.CredentialTargets, h.MaskFiles, h.Secrets} {
		for _, p := range group {
			add(p)
		}
	}
	for p, dir := range set {
		if dir {
			hide = append(hide, p)
		}
	}
	sort.Strings(hide)
	// Keep the outermost directories only; files below them are covered.
	var outer []string
	for _, p := range hide {
		if len(outer) == 0 || !Within(p, outer[len(outer)-1]) {
			outer = append(outer, p)
		}
	}
	under := func(p string) bool {
		return slices.ContainsFunc(outer, func(d string) bool { return Within(p, d) })
	}
	for p, dir := range set {
		if !dir && !under(p) {
			empty = append(empty, p)
		}
	}
	sort.Strings(empty)
	return outer, empty
}

// describeBind formats b for messages: "SRC" -> "DEST" (ro|rw).
func describeBind(b sandbox.Bind) string {
	mode := "ro"
	if !b.ReadOnly {
		mode = "rw"
	}
	return fmt.Sprintf("%q -> %q (%s)", b.Src, b.Target(), mode)
}
