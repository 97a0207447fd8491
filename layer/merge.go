package layer

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Merging a conflict (ApplyOptions.Merge). A three-way merge needs the
// file as it was when the layer was made, which the layer does not keep
// (overlayfs copies a file up in the kernel, with no hook to save the
// original). git often still has it: the index records, beside each
// path's blob, the size and mtime of the file it was made from
// (Documentation/gitformat-index.txt). When those equal what base.json
// recorded, that blob is the base's content, so a file the person edited
// on the host without staging it since, or staged before the session
// began, can be merged; a file committed again after the session began no
// longer has its old entry, and stays a conflict. Nothing of this runs
// inside a sandbox: git reads the host's own repository, with
// core.fsmonitor off so that no configured program runs.

// gitTimeout bounds each git invocation a merge makes.
const gitTimeout = 30 * time.Second

// ErrNoMergeBase means git has no copy of a conflicting file as the
// layer's base recorded it (not in a repository, not in the index, or the
// index entry was made from another version), so no merge is possible.
var ErrNoMergeBase = errors.New("git has no copy of the file as the session first saw it")

// ErrMergeConflict means git merge-file found overlapping changes.
var ErrMergeConflict = errors.New("the changes overlap")

// ErrIndexStaged means a repository's index cannot be taken from the
// layer: the working directory's index stages changes of its own.
var ErrIndexStaged = errors.New("changes are staged in the working directory's index")

// mergeFile merges the host's file rel (ours, now in Lower) and the
// layer's version (theirs) over the base git holds for e, with git
// merge-file; it returns the merged bytes, ErrNoMergeBase or
// ErrMergeConflict (wrapped, naming the count of conflicts).
func mergeFile(lower, rel string, e *Entry, ours, theirs []byte) ([]byte, error) {
	if e == nil || e.Type != "file" {
		return nil, ErrNoMergeBase
	}
	base, err := gitBase(lower, rel, e)
	if err != nil {
		return nil, err
	}
	if isBinary(base) || isBinary(ours) || isBinary(theirs) {
		return nil, fmt.Errorf("%w (a binary file)", ErrMergeConflict)
	}
	dir, err := os.MkdirTemp("", "corral-merge-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	names := []string{"host", "base", "session"}
	for i, b := range [][]byte{ours, base, theirs} {
		if err := os.WriteFile(filepath.Join(dir, names[i]), b, 0o600); err != nil {
			return nil, err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), gitTimeout)
	defer cancel()
	// -p prints the result; the exit status is the number of conflicts
	// (git-merge-file(1)), negative (255) on an error.
	cmd := exec.CommandContext(ctx, "git", "merge-file", "-p", "-L", "host", "-L", "base", "-L", "session", "host", "base", "session")
	cmd.Dir = dir
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	err = cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return out.Bytes(), nil
	case errors.As(err, &ee) && ee.ExitCode() > 0 && ee.ExitCode() < 128:
		return nil, fmt.Errorf("%w (%d conflicting hunk%s)", ErrMergeConflict, ee.ExitCode(), plural(ee.ExitCode()))
	}
	return nil, fmt.Errorf("git merge-file: %v: %s", err, strings.TrimSpace(stderr.String()))
}

// gitBase returns the blob git's index holds for rel (relative to lower,
// which lies in a work tree) when the index entry was made from the file
// base.json recorded: same size and mtime (to the nanosecond), stage 0.
func gitBase(lower, rel string, e *Entry) ([]byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), gitTimeout)
	defer cancel()
	git := func(args ...string) ([]byte, error) { return hostGit(ctx, lower, args...).Output() }
	if _, err := exec.LookPath("git"); err != nil {
		return nil, fmt.Errorf("%w (git is not installed)", ErrNoMergeBase)
	}
	out, err := git("ls-files", "-s", "--debug", "-z", "--", ":(literal)"+rel)
	if err != nil || len(out) == 0 {
		return nil, fmt.Errorf("%w (not tracked by git)", ErrNoMergeBase)
	}
	blob, size, mtime, ok := parseIndexEntry(out)
	if !ok {
		return nil, fmt.Errorf("%w (an unmerged or unreadable index entry)", ErrNoMergeBase)
	}
	// The index keeps the low 32 bits of the size (gitformat-index).
	if size != uint32(e.Size) || mtime != e.MTime {
		return nil, fmt.Errorf("%w (the index holds another version of it)", ErrNoMergeBase)
	}
	data, err := git("cat-file", "blob", blob)
	if err != nil || int64(len(data)) != e.Size {
		return nil, fmt.Errorf("%w (the index entry's object is unreadable or of another size)", ErrNoMergeBase)
	}
	return data, nil
}

// parseIndexEntry reads the one entry of git ls-files -s --debug -z:
// "MODE OBJECT STAGE\tPATH\x00" then lines "  ctime: S:NS", "  mtime:
// S:NS", "  dev: ..", "  uid: ..", "  size: N\tflags: F" (the format of
// builtin/ls-files.c, print_debug). It returns the object, size and mtime
// in nanoseconds, and false unless there is exactly one entry at stage 0.
func parseIndexEntry(out []byte) (blob string, size uint32, mtime int64, ok bool) {
	head, rest, found := bytes.Cut(out, []byte{0})
	if !found {
		return "", 0, 0, false
	}
	meta, _, _ := strings.Cut(string(head), "\t")
	f := strings.Fields(meta)
	if len(f) != 3 || f[2] != "0" {
		return "", 0, 0, false
	}
	blob = f[1]
	var haveSize, haveMtime bool
	sc := bufio.NewScanner(bytes.NewReader(rest))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.Contains(line, "\t") && !strings.HasPrefix(line, "size:") && !strings.HasPrefix(line, "dev:") && !strings.HasPrefix(line, "uid:") {
			return "", 0, 0, false // a second entry
		}
		switch {
		case strings.HasPrefix(line, "mtime:"):
			s, ns, found := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "mtime:")), ":")
			sec, err1 := strconv.ParseInt(s, 10, 64)
			nsec, err2 := strconv.ParseInt(ns, 10, 64)
			if !found || err1 != nil || err2 != nil {
				return "", 0, 0, false
			}
			mtime, haveMtime = sec*1e9+nsec, true
		case strings.HasPrefix(line, "size:"):
			v, _, _ := strings.Cut(strings.TrimSpace(strings.TrimPrefix(line, "size:")), "\t")
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			if err != nil {
				return "", 0, 0, false
			}
			size, haveSize = uint32(n), true
		}
	}
	return blob, size, mtime, haveSize && haveMtime
}

// asOwner runs git as the owner of the work tree when corral is root and
// the tree is another user's: git refuses a repository of another owner
// ("dubious ownership", safe.directory in git-config(1)) because its
// configuration could run programs, and as its owner it runs nothing the
// owner could not run anyway.
func asOwner(dir string) *syscall.SysProcAttr {
	var st syscall.Stat_t
	if os.Geteuid() != 0 || syscall.Stat(dir, &st) != nil || st.Uid == 0 {
		return nil
	}
	return &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: st.Uid, Gid: st.Gid}}
}

// gitIndexOf says whether rel is a repository's index (".git/index"),
// and returns the work tree it belongs to (relative, "." for the top).
func gitIndexOf(rel string) (string, bool) {
	dir, base := path.Split(rel)
	dir = strings.TrimSuffix(dir, "/")
	if base != "index" || path.Base(dir) != ".git" {
		return "", false
	}
	return path.Dir(dir), true
}

// hostIndexClean checks that the host's index of the work tree at repo
// (relative to lower) stages nothing beyond its HEAD: then what differs
// from the index base.json recorded is only what git keeps about the
// files (git status refreshes their stat data and rewrites it), and the
// session's index, which records its commits and staging, may replace
// it. Staged changes on the host stay a conflict (ErrIndexStaged):
// taking the session's index would drop them.
func hostIndexClean(lower, repo string) error {
	ctx, cancel := context.WithTimeout(context.Background(), gitTimeout)
	defer cancel()
	dir := filepath.Join(lower, filepath.FromSlash(repo))
	err := hostGit(ctx, dir, "diff", "--cached", "--quiet").Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee) && ee.ExitCode() == 1:
		return fmt.Errorf("%w (commit or unstage them there, or apply the rest first)", ErrIndexStaged)
	}
	return fmt.Errorf("%w (git diff --cached in %s: %v)", ErrNoMergeBase, dir, err)
}

// hostGit is git run on the host's repository at dir: with core.fsmonitor
// off (no configured program runs), without taking the index lock (a
// read must not block the person's git), and as the tree's owner when
// corral is root (asOwner), with the owner's home.
func hostGit(ctx context.Context, dir string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "git", append([]string{"-c", "core.fsmonitor=false", "-C", dir}, args...)...)
	cmd.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0")
	if cmd.SysProcAttr = asOwner(dir); cmd.SysProcAttr != nil {
		home := "/"
		if u, err := user.LookupId(strconv.Itoa(int(cmd.SysProcAttr.Credential.Uid))); err == nil && u.HomeDir != "" {
			home = u.HomeDir
		}
		cmd.Env = append(cmd.Env, "HOME="+home)
	}
	return cmd
}
