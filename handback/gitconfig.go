package handback

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"slices"
	"strings"
	"syscall"
	"time"
)

// A git configuration file a sandboxed command made (`git clone` and `git
// init` make .git/config) is hostile input: git on the host reads it, and
// many of its keys run programs (core.fsmonitor, core.pager, aliases with
// "!", filter and diff drivers, remote.*.uploadpack, include.path to load
// another file that does). Removing the whole file loses what a clone needs
// (its remote and branch tracking: `git pull` has no upstream), so the
// backends keep a copy that holds only the keys below and drop the rest
// (SafeGitConfig). Keys git adds over time that run programs are dropped by
// construction: only what is named here is kept.

// safeGitKeys are the keys (section and variable name lower case, as `git
// config --list` prints them) kept without a subsection.
var safeGitKeys = []string{
	"core.repositoryformatversion", "core.filemode", "core.bare", "core.logallrefupdates",
	"core.ignorecase", "core.precomposeunicode", "core.symlinks", "core.autocrlf", "core.eol",
	"core.sparsecheckout", "core.sparsecheckoutcone",
	// A repository of the other object format or ref storage cannot be read
	// without these (gitrepository-layout(5)).
	"extensions.objectformat", "extensions.refstorage", "extensions.worktreeconfig",
	"extensions.partialclone", "extensions.preciousobjects",
	"pull.rebase", "pull.ff", "push.default", "push.autosetupremote",
	"init.defaultbranch", "lfs.repositoryformatversion",
}

// safeGitSubKey reports whether the variable name is kept under a
// subsection of section sec: a remote's URLs and refspecs (not
// uploadpack, receivepack, proxy, vcs), a branch's upstream, a
// submodule's URL and state (not update, which may be "!command"). A
// switch, not a map: nothing allocated at init.
func safeGitSubKey(sec, name string) bool {
	switch sec {
	case "remote":
		switch name {
		case "url", "pushurl", "fetch", "push", "tagopt", "prune", "prunetags", "mirror", "promisor", "partialclonefilter", "skipdefaultupdate", "skipfetchall":
			return true
		}
	case "branch":
		switch name {
		case "remote", "pushremote", "merge", "rebase", "description":
			return true
		}
	case "submodule":
		switch name {
		case "url", "active", "branch", "shallow", "ignore", "fetchrecursesubmodules":
			return true
		}
	}
	return false
}

// IsGitConfigPattern reports whether a protected-path pattern names a git
// configuration file (".git/config", ".git/config.worktree", at any depth):
// one the backends keep the safe part of (SafeGitConfig) rather than only
// moving it out.
func IsGitConfigPattern(pattern string) bool {
	dir, base := path.Split(pattern)
	return (base == "config" || base == "config.worktree") && (dir == ".git/" || strings.HasSuffix(dir, "/.git/"))
}

// SafeGitConfig rebuilds a git configuration from list, the output of
// `git config --file F --null --list` (NUL-ended "key\nvalue" records, a
// key alone for a key without a value; git-config(1), "--null"), keeping
// only the keys of safeGitKeys and safeGitSubKey. It returns the file's
// new content (every value quoted and escaped as git-config(1), "Syntax",
// says) and the keys it dropped, in order, each once. A remote URL of the
// ext:: or fd:: transports (which run commands, git-remote-ext(1)) is
// dropped too. An empty content means nothing was kept.
func SafeGitConfig(list []byte) (content []byte, dropped []string) {
	var b bytes.Buffer
	section := ""
	for _, rec := range bytes.Split(list, []byte{0}) {
		if len(rec) == 0 {
			continue
		}
		key, val, hasVal := bytes.Cut(rec, []byte{'\n'})
		k, v := string(key), string(val)
		sec, sub, name, ok := splitGitKey(k)
		if !ok || !safeGitKey(sec, sub, name, v) {
			if !slices.Contains(dropped, k) {
				dropped = append(dropped, k)
			}
			continue
		}
		head := "[" + sec + "]"
		if sub != "" {
			head = "[" + sec + " \"" + gitEscape(sub, true) + "\"]"
		}
		if head != section {
			b.WriteString(head + "\n")
			section = head
		}
		if !hasVal {
			b.WriteString("\t" + name + "\n") // a bare key is true
			continue
		}
		b.WriteString("\t" + name + " = \"" + gitEscape(v, false) + "\"\n")
	}
	return b.Bytes(), dropped
}

// splitGitKey splits a listed key into section, subsection (as written,
// "" for none) and variable name, and checks their characters: a section
// and name of letters, digits, "-" (and "." in a section), a name starting
// with a letter (git-config(1), "Syntax"); a subsection without a newline
// or NUL.
func splitGitKey(k string) (sec, sub, name string, ok bool) {
	i, j := strings.IndexByte(k, '.'), strings.LastIndexByte(k, '.')
	if i <= 0 || j == len(k)-1 {
		return "", "", "", false
	}
	sec, name = k[:i], k[j+1:]
	if i != j {
		sub = k[i+1 : j]
	}
	word := func(s string) bool {
		for _, c := range s {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
		return s != ""
	}
	if !word(sec) || !word(name) || name[0] < 'a' || name[0] > 'z' || strings.ContainsAny(sub, "\n\x00") {
		return "", "", "", false
	}
	return sec, sub, name, true
}

// safeGitKey reports whether the key sec.sub.name with value v is kept.
func safeGitKey(sec, sub, name, v string) bool {
	if sub == "" {
		return slices.Contains(safeGitKeys, sec+"."+name)
	}
	if !safeGitSubKey(sec, name) {
		return false
	}
	if name == "url" || name == "pushurl" {
		// Transports that run a command line (git-remote-ext(1),
		// git-remote-fd(1)); git refuses ext by default (protocol.allow),
		// which a global setting can change.
		lv := strings.ToLower(strings.TrimSpace(v))
		return !strings.HasPrefix(lv, "ext::") && !strings.HasPrefix(lv, "fd::")
	}
	return true
}

// gitEscape escapes s for a quoted value (or, sub, a quoted subsection
// name, where git reads only \\ and \" as escapes).
func gitEscape(s string, sub bool) string {
	var b strings.Builder
	for _, c := range s {
		switch {
		case c == '\\' || c == '"':
			b.WriteByte('\\')
			b.WriteRune(c)
		case sub:
			b.WriteRune(c)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\b':
			b.WriteString(`\b`)
		default:
			b.WriteRune(c)
		}
	}
	return b.String()
}

// maxGitConfig bounds the configuration SanitizeGitConfig reads: a clone's
// is under a kilobyte; anything past this is not kept at all.
const maxGitConfig = 1 << 20

// SanitizeGitConfig returns SafeGitConfig of data, a git configuration
// file's content, listed by the host's git (`git config --file - --null
// --list`, with no system or global settings and no includes followed: it
// reads the file, runs nothing it names). It fails when data is over 1 MiB,
// when git is missing, or when git cannot parse data; the caller then keeps
// nothing.
func SanitizeGitConfig(data []byte) (content []byte, dropped []string, err error) {
	if len(data) > maxGitConfig {
		return nil, nil, fmt.Errorf("over %d bytes", maxGitConfig)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "git", "config", "--file", "-", "--no-includes", "--null", "--list")
	cmd.Env = []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=/nonexistent", "PATH=/usr/local/bin:/usr/bin:/bin"}
	cmd.Stdin = bytes.NewReader(data)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return nil, nil, fmt.Errorf("git cannot read it: %s", strings.TrimSpace(stderr.String()))
		}
		return nil, nil, err
	}
	content, dropped = SafeGitConfig(out)
	return content, dropped, nil
}

// keptGitConfigNote says that a git configuration's safe settings were
// written back in place of the moved one, naming up to 8 of the dropped
// keys.
func keptGitConfigNote(dropped []string) string {
	if len(dropped) == 0 {
		return "its settings, all safe, written back"
	}
	names := dropped
	more := ""
	if len(names) > 8 {
		names, more = names[:8], fmt.Sprintf(" and %d more", len(dropped)-8)
	}
	return fmt.Sprintf("its safe settings (remotes, branches, the repository format) written back, without %s%s", strings.Join(names, ", "), more)
}

// ReadGitConfig reads the regular file name below root (a git
// configuration about to be moved out), not following a symlink at name,
// up to 1 MiB and one byte (more makes SanitizeGitConfig refuse it); nil
// when it cannot.
func ReadGitConfig(root *os.Root, name string) []byte {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return nil
	}
	b, err := io.ReadAll(io.LimitReader(f, maxGitConfig+1))
	if err != nil {
		return nil
	}
	return b
}

// WriteBackGitConfig writes, as name below root, the safe part of cfg, a
// git configuration a command made that has just been moved out
// (SanitizeGitConfig: a clone keeps its remote and upstream; what runs
// programs is dropped). It returns the clause the caller adds to its note,
// starting with "; ", or "" when nothing was kept. Nothing is overwritten:
// what a background command made there since stays, for the check after
// that command.
func WriteBackGitConfig(root *os.Root, name string, cfg []byte) string {
	note, _ := WriteBackGitConfigContent(root, name, cfg)
	return note
}

// WriteBackGitConfigContent is WriteBackGitConfig that also returns what
// it wrote (nil when nothing), so that a caller that checks the same path
// again can tell its own file from one a command wrote since.
func WriteBackGitConfigContent(root *os.Root, name string, cfg []byte) (note string, written []byte) {
	content, dropped, err := SanitizeGitConfig(cfg)
	if err != nil {
		return fmt.Sprintf("; none of its settings were kept (%v)", err), nil
	}
	if len(content) == 0 {
		return "", nil
	}
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return fmt.Sprintf("; its safe settings could not be written back (%v)", err), nil
	}
	_, err = f.Write(content)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		root.Remove(name)
		return fmt.Sprintf("; its safe settings could not be written back (%v)", err), nil
	}
	return "; " + keptGitConfigNote(dropped), content
}
