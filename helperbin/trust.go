package helperbin

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// systemTrees are where a root caller's helper beside corral may lie: the
// system's own directories, where no sandbox's working directory is (the
// container backends refuse one there; a person does not work there).
var systemTrees = []string{"/usr", "/bin", "/sbin", "/opt", "/nix/store", "/snap"}

// owner is what Trusted needs of a path: its owner and permission bits
// (lstat(2), so a symlink is itself).
type owner struct {
	UID  int
	Mode os.FileMode
}

// lstatOwner is Trusted's view of the file system.
func lstatOwner(p string) (owner, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return owner{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return owner{}, fmt.Errorf("%s: no owner", p)
	}
	return owner{UID: int(st.Uid), Mode: fi.Mode()}, nil
}

// Trusted says why the candidate helper at path (clean, absolute, symlinks
// resolved) must not be run, or "" when it may: corral executes a
// candidate on the host to ask its protocol, and hands it to every
// sandbox, so a file a sandbox could have written there is never taken.
//
//   - Beside corral (SourceNext): the file and every directory from its
//     own up to / belong to root and are writable by no group or other,
//     so no sandbox of a caller other than root can make, replace or
//     rename any of them; for a root caller, whose sandboxes write as
//     root on disk (an idmapped working directory), the directory must
//     also lie in a system tree (systemTrees), where no working directory
//     is. A corral built in a project directory (README's build) so never
//     takes a corral-helper beside it: a command in that directory could
//     have put it there.
//   - In corral's cache (SourceCache): the file and its directory belong
//     to the caller (euid) and are writable by no group or other (the
//     cache is among corral's own directories, which no sandbox sees).
//
// stat is lstat(2) of a path (lstatOwner outside tests).
func Trusted(src Source, path string, euid int, stat func(string) (owner, error)) string {
	f, err := stat(path)
	if err != nil {
		return err.Error()
	}
	if !f.Mode.IsRegular() {
		return "not a regular file"
	}
	dir := filepath.Dir(path)
	switch src {
	case SourceCache:
		for _, p := range []string{path, dir} {
			o, err := stat(p)
			if err != nil {
				return err.Error()
			}
			if o.UID != euid {
				return fmt.Sprintf("%s belongs to uid %d, not to corral's user (%d)", p, o.UID, euid)
			}
			if o.Mode.Perm()&0o022 != 0 {
				return fmt.Sprintf("%s is writable by its group or others (%v)", p, o.Mode.Perm())
			}
		}
		return ""
	case SourceNext:
		if euid == 0 && !inTrees(dir, systemTrees) {
			return fmt.Sprintf("corral runs as root from %s, outside the system's directories (%s), where a sandbox's working directory may be and a command could have put it; install both in /usr/local/bin, or let corral doctor build it into corral's cache", dir, strings.Join(systemTrees, ", "))
		}
		for p := path; ; p = filepath.Dir(p) {
			o, err := stat(p)
			if err != nil {
				return err.Error()
			}
			if o.UID != 0 {
				return fmt.Sprintf("%s belongs to uid %d, not root, so a sandbox of its user could have written the helper; install both where only root writes (/usr/local/bin), or let corral doctor build it into corral's cache", p, o.UID)
			}
			if o.Mode.Perm()&0o022 != 0 {
				return fmt.Sprintf("%s is writable by its group or others (%v)", p, o.Mode.Perm())
			}
			if p == "/" {
				return ""
			}
		}
	}
	return "unknown source " + string(src)
}

// inTrees reports whether p is at or below one of trees.
func inTrees(p string, trees []string) bool {
	for _, t := range trees {
		if p == t || strings.HasPrefix(p, t+"/") {
			return true
		}
	}
	return false
}
