package bwrap

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/corralhq/corral/internal/forkfds"
	"github.com/corralhq/corral/sandbox"
)

// Version is a bubblewrap version (major, minor, patch).
type Version struct{ Major, Minor, Patch int }

// String formats v as "0.8.0".
func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// MarshalText renders v as "0.8.0" (for JSON reports).
func (v Version) MarshalText() ([]byte, error) { return []byte(v.String()), nil }

// AtLeast reports whether v >= major.minor.patch.
func (v Version) AtLeast(major, minor, patch int) bool {
	if v.Major != major {
		return v.Major > major
	}
	if v.Minor != minor {
		return v.Minor > minor
	}
	return v.Patch >= patch
}

// MinVersion is the oldest bubblewrap corral supports: Debian 12's 0.8.0.
var MinVersion = Version{0, 8, 0}

// ParseVersion parses the output of `bwrap --version` ("bubblewrap 0.8.0").
func ParseVersion(out string) (Version, error) {
	f := strings.Fields(out)
	if len(f) < 2 || f[0] != "bubblewrap" {
		return Version{}, fmt.Errorf("unexpected `bwrap --version` output %q", strings.TrimSpace(out))
	}
	parts := strings.SplitN(f[1], ".", 3)
	var n [3]int
	for i := range parts {
		digits := parts[i]
		if j := strings.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' }); j >= 0 {
			digits = digits[:j]
		}
		v, err := strconv.Atoi(digits)
		if err != nil {
			return Version{}, fmt.Errorf("unexpected bwrap version %q", f[1])
		}
		n[i] = v
	}
	return Version{n[0], n[1], n[2]}, nil
}

// Binary describes the bwrap executable corral will use.
type Binary struct {
	// Path is the absolute path of bwrap.
	Path string `json:"path"`
	// Version is what `bwrap --version` reported.
	Version Version `json:"version"`
	// Setuid is set when the executable is setuid root (the fallback for
	// machines that block unprivileged user namespaces).
	Setuid bool `json:"setuid"`
	// BindFD is set when bwrap takes --bind-fd and --ro-bind-fd (0.10, and
	// distributions' backports, Debian 12's 0.8.0 among them): a bind from
	// a descriptor, which bwrap checks against what it mounted, so a path
	// swapped for a symlink meanwhile cannot redirect it.
	BindFD bool `json:"bind_fd"`
}

// InstallHint names the package to install on the common distributions.
const InstallHint = "install bubblewrap: `sudo apt install bubblewrap` (Debian, Ubuntu), `sudo dnf install bubblewrap` (Fedora), `sudo pacman -S bubblewrap` (Arch)"

// SystemBinDirs are where corral looks for bwrap and prlimit when no path
// is configured. PATH is never searched: a directory on it may be one a
// sandboxed command can write (a project's .venv/bin or node_modules/.bin),
// and a bwrap planted there would run on the host.
var SystemBinDirs = []string{"/usr/bin", "/usr/local/bin", "/bin", "/usr/sbin", "/sbin"}

// LocateTool returns the absolute path of the executable name: explicit
// when given (it must be absolute), else the first of SystemBinDirs that
// has it.
func LocateTool(name, explicit string) (string, error) {
	if explicit != "" {
		if !filepath.IsAbs(explicit) {
			return "", fmt.Errorf("%s path %q must be absolute", name, explicit)
		}
		if err := checkExecutable(explicit); err != nil {
			return "", err
		}
		return filepath.Clean(explicit), nil
	}
	for _, d := range SystemBinDirs {
		p := filepath.Join(d, name)
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in %s", name, strings.Join(SystemBinDirs, ", "))
}

func checkExecutable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// FindBinary locates bwrap (path, from the bwrap setting or CORRAL_BWRAP,
// else SystemBinDirs) and asks its version. Errors wrap
// sandbox.ErrUnavailable and name the package to install.
func FindBinary(ctx context.Context, path string) (*Binary, error) {
	p, err := LocateTool("bwrap", path)
	if err != nil {
		return nil, fmt.Errorf("%w: %v; %s", sandbox.ErrUnavailable, err, InstallHint)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, p, "--version")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		// %w: a full descriptor table (EMFILE) stays in the chain, where
		// sandbox.IsTransient finds it.
		err = fmt.Errorf("%w: `%s --version` failed: %w", sandbox.ErrUnavailable, p, forkfds.Explain(cmd, err))
		if said := strings.TrimSpace(out.String()); said != "" {
			err = fmt.Errorf("%w: %s", err, said)
		}
		return nil, err
	}
	v, err := ParseVersion(out.String())
	if err != nil {
		return nil, fmt.Errorf("%w: %v", sandbox.ErrUnavailable, err)
	}
	if !v.AtLeast(MinVersion.Major, MinVersion.Minor, MinVersion.Patch) {
		return nil, fmt.Errorf("%w: bwrap %s at %s is too old; corral needs %s or later (%s)", sandbox.ErrUnavailable, v, p, MinVersion, InstallHint)
	}
	b := &Binary{Path: p, Version: v, BindFD: v.AtLeast(0, 10, 0)}
	if st, err := os.Stat(p); err == nil && st.Mode()&os.ModeSetuid != 0 {
		b.Setuid = true
	}
	if !b.BindFD {
		var help bytes.Buffer
		cmd := exec.CommandContext(ctx, p, "--help")
		cmd.Stdout, cmd.Stderr = &help, &help
		_ = cmd.Run()
		b.BindFD = strings.Contains(help.String(), "--ro-bind-fd")
	}
	return b, nil
}
