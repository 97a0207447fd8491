package docker

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/internal/atomicfile"
	"github.com/corralhq/corral/sandbox"
)

// judgeBinds applies the bind policy every backend shares
// (hostview.DecideBind) to docker.binds for req in workspace ws, on facts
// read from this machine (docker.binds are paths on the daemon's host,
// which must be this one for the policy to see them: a source corral
// cannot find is refused, or skipped when read-write). It returns the
// binds to mount, each with the paths to cover inside it, and warnings
// for the person (ignored binds, sockets not checked); errors wrap
// sandbox.ErrPolicy or sandbox.ErrBadRequest. It runs before every
// command, so a change on the host shows in the next one (a different
// set of covers makes a new container: they enter the spec's hash).
func (b *Backend) judgeBinds(req *sandbox.Request, ws workspace, p *parsed) ([]hostview.BindDecision, []string, error) {
	if len(b.st.Binds) == 0 && len(req.Skills) == 0 && len(req.Binds) == 0 {
		return nil, nil, nil
	}
	h := b.bindHost(req, ws, p)
	binds := b.st.Binds
	if b.st.HostWorkspace == "" {
		// The binds every backend takes (the binds setting, --bind) and
		// skills, at their host paths; with a remote daemon they are not
		// there (as the reference environment does).
		skills, allow := sandbox.SkillBinds(req, h.Home)
		binds = slices.Concat(binds, req.Binds, skills)
		h.Allow = append(h.Allow, allow...)
	}
	var out []hostview.BindDecision
	var warnings []string
	for _, bd := range binds {
		d, err := hostview.DecideBind(bd, h, hostview.InspectBindSource(bd, h))
		if err != nil {
			return nil, nil, fmt.Errorf("docker.binds: %w", err)
		}
		for _, w := range d.Warnings {
			event := "docker.bind.unchecked"
			if !d.Mount {
				event = "docker.bind.ignored"
			}
			b.e.log.Info(event, "src", bd.Src, "dest", bd.Target(), "detail", w)
			warnings = append(warnings, "docker.binds: "+w)
		}
		if d.Mount {
			out = append(out, d)
		}
	}
	return out, warnings, nil
}

// bindHost gathers the facts about this machine that the bind policy
// judges docker.binds by.
func (b *Backend) bindHost(req *sandbox.Request, ws workspace, p *parsed) *hostview.BindHost {
	h := &hostview.BindHost{HostRoot: hostRoot(p.user), Allow: slices.Concat(hostview.DefaultHomeAllow, hostview.DefaultNestedAllow, req.HomeAllow)}
	if home, err := os.UserHomeDir(); err == nil && filepath.IsAbs(home) {
		if r, err := filepath.EvalSymlinks(home); err == nil {
			h.Home = r
		}
	}
	h.OtherHomes = b.e.peopleHomes(h.Home)
	for _, d := range b.e.opts.HiddenDirs {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		h.HiddenDirs = append(h.HiddenDirs, filepath.Clean(d))
		if r, err := filepath.EvalSymlinks(d); err == nil && r != filepath.Clean(d) {
			h.HiddenDirs = append(h.HiddenDirs, r)
		}
	}
	if ws.Writable {
		h.WritableRoots = append(h.WritableRoots, ws.Host)
		if w := filepath.Clean(req.Workdir); w != ws.Host {
			h.WritableRoots = append(h.WritableRoots, w)
		}
	}
	for _, bd := range b.st.Binds {
		if !bd.ReadOnly && filepath.IsAbs(bd.Src) {
			if r, err := filepath.EvalSymlinks(bd.Src); err == nil {
				h.WritableRoots = append(h.WritableRoots, r)
			}
		}
	}
	// home_allow as the bwrap backend takes it: relative entries that are
	// not (and do not hold) a credential store.
	for _, a := range req.HomeAllow {
		a = strings.TrimPrefix(filepath.ToSlash(filepath.Clean(a)), "./")
		if a == "." || a == "" || filepath.IsAbs(a) || a == ".." || strings.HasPrefix(a, "../") || hostview.IsCredentialRel(a) ||
			slices.ContainsFunc(hostview.CredentialStores, func(c string) bool { return strings.HasPrefix(c, a+"/") }) {
			continue
		}
		h.Allow = append(h.Allow, a)
	}
	env := req.PolicyEnv
	if env == nil {
		env = req.Env
	}
	if path, ok := hostview.LookupEnv(env, "PATH"); ok {
		for _, d := range filepath.SplitList(path) {
			if rel, ok := hostview.RelToHome(filepath.Clean(d), h.Home); ok && filepath.IsAbs(d) && !hostview.IsCredentialRel(rel) {
				h.AllowPaths = append(h.AllowPaths, filepath.Clean(d))
			}
		}
	}
	for _, w := range hostview.GatherBindHost(h) {
		b.e.log.Info("docker.bind.store_cut", "detail", w)
	}
	for _, s := range hostview.EngineSockets {
		if t, err := filepath.EvalSymlinks(s); err == nil {
			h.MaskFiles = append(h.MaskFiles, t)
		}
	}
	return h
}

// hostRoot reports whether a container of user ("uid:gid", or "" for the
// image's own user) may hold host uid 0 or rights corral's uid lacks:
// uid 0, the image's user (unknown until it runs), or another uid than
// corral's when corral is not root. (A daemon that remaps users is not known here; the answer is
// then too careful, never too lax.)
func hostRoot(user string) bool {
	if user == "" {
		return true
	}
	uid, _, _ := strings.Cut(user, ":")
	if os.Getuid() == 0 {
		// Root has every right already: only uid 0 itself counts (a
		// root caller's container runs as the workspace's owner,
		// containerIDs).
		return uid == "0"
	}
	return uid == "0" || uid != strconv.Itoa(os.Getuid())
}

// emptyFile returns the file bound over files a bind must show as empty:
// Options.EmptyFile, made (empty, read-only) when missing, or /dev/null.
func (e *Engine) emptyFile() (string, error) {
	p := e.opts.EmptyFile
	if p == "" {
		return "/dev/null", nil
	}
	e.emptyOnce.Do(func() {
		st, err := os.Lstat(p)
		if err == nil && st.Mode().IsRegular() && st.Size() == 0 && st.Mode().Perm()&0o222 == 0 {
			return
		}
		if err == nil && !st.Mode().IsRegular() {
			e.emptyErr = fmt.Errorf("%w: docker backend: %s, the empty file bound over hidden files, is not a regular file; remove it", sandbox.ErrUnavailable, p)
			return
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			e.emptyErr = fmt.Errorf("%w: docker backend: making the empty file %s: %v", sandbox.ErrUnavailable, p, err)
			return
		}
		if err := atomicfile.Write(p, nil, 0o444, false); err != nil {
			e.emptyErr = fmt.Errorf("%w: docker backend: making the empty file %s: %v", sandbox.ErrUnavailable, p, err)
		}
	})
	if e.emptyErr != nil {
		return "", e.emptyErr
	}
	return p, nil
}

// coverMode is the mode of the empty tmpfs over a hidden directory.
const coverMode fs.FileMode = 0o700
