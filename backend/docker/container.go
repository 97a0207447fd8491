package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/corralhq/corral/backend/internal/scopes"
	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/helperbin"
	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/internal/owner"
	"github.com/corralhq/corral/netproxy"
	"github.com/corralhq/corral/sandbox"
)

// RequiredTools must be in the image's PATH; OptionalTools are needed by
// some tools only (python3 by run_code).
var (
	RequiredTools = []string{"bash", "sh", "setsid", "cat", "mkdir", "dirname", "ls"}
	OptionalTools = []string{"python3"}
)

// ErrMount is wrapped by the error for a container that does not see the
// workspace's entries: the daemon resolved the bind on another filesystem.
var ErrMount = errors.New("the container does not see the workspace")

// ensure returns a ready container for req under st: the session's (or the
// shared one), created and checked on first use; for req.Session == "" a
// new one the caller removes after the command. warnings are the bind
// policy's for this command (judgeBinds); sec is what req's secrets
// change in the command's environment (nil: none).
func (b *Backend) ensure(ctx context.Context, req *sandbox.Request) (c *ctr, p *parsed, warnings []string, sec *secretSpec, err error) {
	// Secrets are refused before anything else under profiles without
	// corral's proxy (sandbox.CheckSecrets, as on bwrap).
	if err := sandbox.CheckSecrets(req.Policy); err != nil {
		return nil, nil, nil, nil, err
	}
	e := b.e
	st := b.st
	ws, err := b.workspace(req)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	uid, gid := containerIDs(os.Getuid(), os.Getgid(), ws.Host)
	p, err = st.check(uid, gid)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	var rv *reviewSpec
	if req.LayerDir != "" {
		if rv, err = b.review(req, ws, uid, gid); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	extra, err := ParseExtraRunArgs(st.ExtraRunArgs)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	helper, err := e.helperPath()
	if err != nil {
		return nil, nil, nil, nil, err
	}
	filter, err := e.filter(req.Profile)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	var eg *egressSpec
	if req.Profile == sandbox.ProfileAllowlist {
		if e.opts.Egress == nil {
			return nil, nil, nil, nil, fmt.Errorf("%w: docker backend: the allowlist profile needs corral's proxies, and none were configured", sandbox.ErrUnavailable)
		}
		if st.User != "" && st.User != fmt.Sprintf("%d:%d", uid, gid) {
			return nil, nil, nil, nil, fmt.Errorf("%w: docker backend: the allowlist profile needs docker.user \"\" (the proxy's sockets are yours alone)", sandbox.ErrBadRequest)
		}
		// A secret's hosts are allowed egress, as on bwrap.
		pol := netproxy.Policy{Allow: append(slices.Clone(req.NetworkAllow), sandbox.SecretHosts(req.Secrets)...), Deny: req.NetworkDeny}
		if err := pol.Validate(); err != nil {
			return nil, nil, nil, nil, fmt.Errorf("%w: network allowlist: %w", sandbox.ErrBadRequest, err)
		}
		eg = &egressSpec{policy: pol, key: strings.Join(pol.Allow, ",") + "|" + strings.Join(pol.Deny, ",")}
		if e.opts.TrustDir != "" {
			// Beside the trust bundles: public files on the daemon's host.
			if eg.nodeShim, err = egress.WriteNodeShim(filepath.Join(e.opts.TrustDir, "node")); err != nil {
				e.log.Warn("docker.nodeshim.failed", "err", err)
				eg.nodeShim = ""
			}
		}
	}
	binds, warnings, err := b.judgeBinds(req, ws, p)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	var trust *trustSpec
	if len(req.Secrets) > 0 { // only under allowlist (CheckSecrets above), so eg is set
		roots := []string{ws.Host}
		for _, d := range binds {
			roots = append(roots, d.Src)
		}
		if sec, err = b.prepareSecrets(ctx, req, roots, uid, gid); err != nil {
			return nil, nil, nil, nil, err
		}
		// The container's proxy holds these secrets: other secrets (or
		// other real values, whose stand-ins differ) make another one.
		trust = sec.trust
		eg.secs = sec.prep.Secrets
		eg.key += "|secrets:" + sec.key
	}
	var empty string
	if slices.ContainsFunc(binds, func(d hostview.BindDecision) bool { return len(d.EmptyFiles) > 0 }) {
		if empty, err = e.emptyFile(); err != nil {
			return nil, nil, nil, nil, err
		}
	}
	// The protected paths do not enter the hash: they are found (a walk of
	// the workspace) only when a container is made, below.
	spec, err := buildSpec(&st, p, ws, helper, extra, binds, empty, nil, filter, eg, trust, rv)
	if err != nil {
		return nil, nil, nil, nil, err
	}
	key := req.Session
	labelKey := key
	if st.Scope == ScopeShared && key != "" {
		labelKey = sharedKey
	}

	l, ok := e.table.Acquire(key, scopes.KeyFor(key, st.Scope == ScopeShared, spec.Hash), func() *ctr {
		return &ctr{key: labelKey, hash: spec.Hash, ws: ws, user: p.user, ready: make(chan struct{}), ephemeral: key == "", denyUnix: filter.denyUnix, egress: eg, patterns: req.ProtectedPatterns(), review: rv}
	})
	if !ok {
		return nil, nil, nil, nil, ErrClosed
	}
	c = l.Handle
	// The command holds c until its Done (e.done): every way out of here
	// without c lets go of it.
	held := c
	defer func() {
		if err != nil && held != nil {
			e.done(held)
		}
	}()
	for _, d := range l.Stale {
		e.remove(d.Handle, d.Why)
	}
	if l.New {
		var cut bool
		var serr error
		if rv != nil {
			// The merged view's protected paths (the layer's own
			// included), found before the overlay is mounted.
			if rv.prot, cut, serr = mergedSources(rv.l, req.ProtectedPatterns()); serr != nil {
				c.err = scanErr(ws.Host, serr)
			} else if cut {
				c.err = hostview.ScanCutError(ws.Host, true)
			} else if len(rv.prot) > 0 {
				spec, c.err = buildSpec(&st, p, ws, helper, extra, binds, empty, nil, filter, eg, trust, rv)
			}
		} else if c.protected, cut, serr = protectedIn(ws, req, ownFiles()); serr != nil {
			c.err = scanErr(ws.Host, serr)
		} else if cut {
			// Fail closed: the mounts would leave out what the scan missed.
			c.err = hostview.ScanCutError(ws.Host, true)
		} else if len(c.protected) > 0 {
			spec, c.err = buildSpec(&st, p, ws, helper, extra, binds, empty, c.protected, filter, eg, trust, nil)
		}
		if c.err == nil {
			c.err = b.start(ctx, c, spec, req)
		}
		if c.err != nil && c.releaseEgress != nil {
			c.releaseEgress()
			c.releaseEgress = nil
		}
		close(c.ready)
		if c.err != nil {
			// The next command of its key tries again; those waiting
			// for this one see c.err.
			e.table.Retire(c, "failed to start", nil)
		}
	} else {
		select {
		case <-c.ready:
		case <-ctx.Done():
			return nil, nil, nil, nil, ctx.Err()
		}
		if c.err == nil && !c.ephemeral {
			if why := e.restartedOutside(ctx, c); why != "" {
				// Its /tmp, processes and mounts are not what corral
				// made: replace it, once, and say so. It goes now,
				// whatever holds it, before the new one starts (a review
				// layer takes one mount at a time).
				held = nil
				if took, d := e.table.Take(c, "restarted outside corral", nil); took && d != nil {
					e.remove(d.Handle, d.Why)
				}
				c2, p2, w2, sec2, err := b.ensure(ctx, req)
				if err != nil {
					return nil, nil, nil, nil, err
				}
				note := fmt.Sprintf("the session's container %s %s, so corral started a new one: what the session kept outside the workspace (/tmp, the home directory, installed packages) and its background processes were lost", c.name, why)
				e.log.Warn("docker.container.replaced", "container", c.name, "new", c2.name, "reason", why)
				return c2, p2, append(w2, note), sec2, nil
			}
		}
		if c.err == nil {
			// The container's mounts were fixed at its start; a command
			// since may have made the workspace wider than the scan
			// after each command looks (quarantine): refuse until it fits.
			if err := e.scanCut(c); err != nil {
				return nil, nil, nil, nil, err
			}
		}
	}
	if c.err != nil {
		return nil, nil, nil, nil, c.err
	}
	return c, p, warnings, sec, nil
}

// ownDirAt returns the first of corral's own directories (hidden; as
// given and with symlinks resolved) that lies at or below the workspace
// ws, or that holds it, or "" (pure but for the resolution).
func ownDirAt(ws string, hidden []string) string {
	for _, d := range hidden {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		for _, c := range []string{filepath.Clean(d), resolved(d)} {
			if c != "" && (c == ws || strings.HasPrefix(c, ws+"/") || strings.HasPrefix(ws, c+"/")) {
				return c
			}
		}
	}
	return ""
}

// resolved is p with symlinks resolved, or "" when it cannot be.
func resolved(p string) string {
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		return ""
	}
	return r
}

// workspace maps req's working directory to the container.
func (b *Backend) workspace(req *sandbox.Request) (workspace, error) {
	if !filepath.IsAbs(req.Workdir) {
		return workspace{}, fmt.Errorf("%w: the working directory %q is not absolute", sandbox.ErrBadRequest, req.Workdir)
	}
	host := filepath.Clean(req.Workdir)
	if r, err := filepath.EvalSymlinks(host); err == nil {
		host = r
	} else if b.st.HostWorkspace == "" {
		return workspace{}, fmt.Errorf("%w: the working directory %s: %v", sandbox.ErrBadRequest, req.Workdir, err)
	}
	if host == "/" {
		return workspace{}, fmt.Errorf("%w: the working directory is /; the whole host would be the workspace", sandbox.ErrPolicy)
	}
	if t := inSystemTree(host); t != "" && (req.Profile.Writable() || req.Profile == "") {
		return workspace{}, fmt.Errorf("%w: the working directory %s lies in %s, a system tree, which no container may write; use --profile restricted to read it", sandbox.ErrPolicy, host, t)
	}
	if d := ownDirAt(host, b.e.opts.HiddenDirs); d != "" {
		return workspace{}, fmt.Errorf("%w: the working directory %s holds or lies in %s, one of corral's own directories (its settings, state and the helper's cache): a container given it could rewrite corral's settings or read its token; bwrap covers them, a container's workspace cannot, so work in the project's own directory", sandbox.ErrPolicy, host, d)
	}
	ws := workspace{Host: host, Source: host, Target: host, Writable: req.Profile.Writable() || req.Profile == ""}
	if b.st.HostWorkspace != "" {
		ws.Source = filepath.Clean(b.st.HostWorkspace)
	}
	if b.st.Workdir != "" {
		ws.Target = filepath.Clean(b.st.Workdir)
	}
	return ws, nil
}

// start makes c's container: it joins a live one of another corral process
// with the same key and settings, or creates, starts and checks a new one.
func (b *Backend) start(ctx context.Context, c *ctr, spec *containerSpec, req *sandbox.Request) error {
	e := b.e
	cli, err := e.client()
	if err != nil {
		return err
	}
	if !c.ephemeral && e.opts.Join {
		if id, name, ok := b.findLive(ctx, cli, c); ok {
			c.id, c.name, c.owned = id, name, false
			e.log.Info("docker.session", "session", req.Session, "container", name, "scope", b.st.Scope, "joined", true)
			if c.review != nil {
				c.view, err = e.viewRoot(ctx, c)
			}
			return err
		}
	}
	// What the engine is: Podman takes some of the policy in another form
	// (podman.go).
	fl, err := e.flavor(ctx)
	if err != nil {
		return err
	}
	if fl.NoLimits != "" {
		return noLimitsErr(fl.NoLimits)
	}
	if c.review != nil {
		if err := b.claimLayer(ctx, cli, c); err != nil {
			return err
		}
	}
	if err := b.ensureImage(ctx, cli, req.Progress); err != nil {
		return err
	}
	if c.egress != nil {
		// The proxy lives as long as the container (released in remove).
		srv, release, err := e.opts.Egress.Get(c.egress.policy, c.key, c.egress.secs...)
		if err != nil {
			return err
		}
		c.releaseEgress = sync.OnceFunc(release) // remove may run twice (execErr, then Release)
		spec.Host.Mounts = append(spec.Host.Mounts, mount.Mount{Type: mount.TypeBind, Source: filepath.Dir(srv.HTTPSocket()), Target: EgressDir, ReadOnly: true})
	}
	c.name = randomName()
	spec.Config.Labels[LabelKey] = c.key
	spec.Config.Labels[LabelConfig] = spec.Hash
	spec.Config.Labels[LabelOwner] = e.self.String()
	// The same policy in the engine's form; the hash, and so a session's
	// container found again, is the policy's.
	vols, err := adaptHost(spec.Config, spec.Host, fl, e.opts.ProfileDir, c.name, e.opts.ReviewDir, req.Policy.Limits.CPUSeconds)
	if err != nil {
		return err
	}
	// Podman: review mode's overlays as named volumes, made first and
	// removed after the container (podmanVolumes); their owner keeps a
	// concurrent `corral cleanup` off them until the container exists.
	for _, v := range vols {
		v.Labels[LabelOwner] = e.self.String()
	}
	if c.review != nil && fl.Podman && fl.Rootless {
		if err := b.rootlessReview(ctx, cli, spec, vols); err != nil {
			return err
		}
	}
	if err := e.createVolumes(ctx, cli, vols); err != nil {
		return err
	}
	// What the layer's root is before Podman changes it (restoreRoot).
	var upperRoot os.FileInfo
	if c.review != nil && fl.Podman {
		if upperRoot, err = os.Lstat(c.review.l.Upper()); err != nil {
			e.dropVolumes(vols, "failed to start")
			return fmt.Errorf("%w: docker backend: the session's layer: %v", sandbox.ErrUnavailable, err)
		}
	}
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{Config: spec.Config, HostConfig: spec.Host, Name: c.name})
	if err != nil {
		e.dropVolumes(vols, "failed to start")
		return withPodmanFix(fl, e.engineErr("creating the container", err))
	}
	c.id, c.owned = res.ID, true
	e.made.Store(true)
	fail := func(err error) error {
		rctx, cancel := context.WithTimeout(context.Background(), 30e9)
		defer cancel()
		_, _ = cli.ContainerRemove(rctx, c.id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		e.log.Info("docker.container.removed", "container", c.name, "key", c.key, "reason", "failed to start")
		e.dropVolumes(vols, "failed to start")
		return err
	}
	if _, err := cli.ContainerStart(ctx, c.id, client.ContainerStartOptions{}); err != nil {
		return fail(withPodmanFix(fl, e.engineErr("starting the container", err)))
	}
	// When it started, to notice a restart behind corral's back
	// (restartedOutside).
	if r, err := cli.ContainerInspect(ctx, c.id, client.ContainerInspectOptions{}); err == nil && r.Container.State != nil {
		c.startedAt = r.Container.State.StartedAt
	}
	e.log.Info("docker.container.started", "container", c.name, "image", b.st.Image, "network", b.st.Network, "key", c.key)
	if upperRoot != nil {
		// Before any command sees it: the workspace's root as the layer
		// has it, as on Docker.
		view, err := e.viewRoot(ctx, c)
		if err != nil {
			return fail(err)
		}
		if changed, err := restoreRoot(view+"/root"+c.ws.Target, upperRoot); err != nil {
			return fail(fmt.Errorf("%w: docker backend: Podman changed the owner or mode of the review workspace's root at its mount, and corral could not set them back: %v", sandbox.ErrUnavailable, err))
		} else if changed {
			e.log.Info("docker.layer.root_restored", "container", c.name, "layer", c.review.l.Dir)
		}
	}
	if err := b.prepare(ctx, cli, c); err != nil {
		return fail(err)
	}
	if c.review != nil {
		if c.view, err = e.viewRoot(ctx, c); err != nil {
			return fail(err)
		}
		e.log.Info("docker.layer.mounted", "container", c.name, "layer", c.review.l.Dir, "workdir", c.review.l.Lower, "generation", c.review.gen, "protected", len(c.review.prot))
	}
	if !c.ephemeral {
		e.log.Info("docker.session", "session", req.Session, "container", c.name, "scope", b.st.Scope)
	}
	return nil
}

// rootlessReview refuses review mode on rootless Podman where Podman's
// chown of a volume's root at its first mount would give the layer to a
// subordinate uid (rootlessReviewRefusal), before any volume or
// container is made. The targets checked in the image are those of the
// volumes whose upper directory is the layer's; a read-only overlay's
// upper is throwaway (podmanVolumes' scratch).
func (b *Backend) rootlessReview(ctx context.Context, cli *client.Client, spec *containerSpec, vols []podmanVolume) error {
	if why := rootlessReviewRefusal(spec.Config.User, string(spec.Host.UsernsMode), os.Getuid(), os.Getgid(), ""); why != "" {
		return errReviewRootless(why)
	}
	var targets []string
	for _, v := range vols {
		if v.Scratch != "" {
			continue
		}
		for _, m := range spec.Host.Mounts {
			if m.Type == mount.TypeVolume && m.Source == v.Name {
				targets = append(targets, m.Target)
			}
		}
	}
	held, err := b.e.imageHolds(ctx, cli, spec.Config.Image, targets)
	if err != nil {
		return err
	}
	if why := rootlessReviewRefusal(spec.Config.User, string(spec.Host.UsernsMode), os.Getuid(), os.Getgid(), held); why != "" {
		return errReviewRootless(why)
	}
	return nil
}

// findLive looks for a running container of the same key and settings whose
// owner (another corral process on this machine) is alive.
func (b *Backend) findLive(ctx context.Context, cli *client.Client, c *ctr) (string, string, bool) {
	f := client.Filters{}.Add("label", LabelEnv+"=1", LabelKey+"="+c.key, LabelConfig+"="+c.hash).Add("status", "running")
	res, err := cli.ContainerList(ctx, client.ContainerListOptions{Filters: f})
	if err != nil {
		return "", "", false
	}
	for _, s := range res.Items {
		o, ok := owner.Parse(s.Labels[LabelOwner])
		if !ok || o.State(b.e.self) != owner.Alive {
			continue
		}
		name := s.ID[:12]
		if len(s.Names) > 0 {
			name = strings.TrimPrefix(s.Names[0], "/")
		}
		return s.ID, name, true
	}
	return "", "", false
}

// ensureImage pulls the image when the engine does not have it, reporting
// progress.
func (b *Backend) ensureImage(ctx context.Context, cli *client.Client, progress func(string)) error {
	if _, err := cli.ImageInspect(ctx, b.st.Image); err == nil {
		return nil
	} else if !cerrdefs.IsNotFound(err) {
		return b.e.engineErr("inspecting image "+b.st.Image, err)
	}
	if progress != nil {
		progress("pulling image " + b.st.Image)
	}
	b.e.log.Info("docker.image.pull", "image", b.st.Image)
	resp, err := cli.ImagePull(ctx, b.st.Image, client.ImagePullOptions{})
	if err != nil {
		if client.IsErrConnectionFailed(err) {
			return b.e.unavailable(err)
		}
		return fmt.Errorf("%w: docker backend: image %s is not on the engine and cannot be pulled (%v); pull or build it (`docker pull %s`, `docker build -t %s .`) or set docker.image", sandbox.ErrUnavailable, b.st.Image, err, b.st.Image, b.st.Image)
	}
	defer resp.Close()
	last := ""
	for m, err := range resp.JSONMessages(ctx) {
		if err != nil {
			return fmt.Errorf("%w: docker backend: pulling image %s: %v", sandbox.ErrUnavailable, b.st.Image, err)
		}
		if m.Error != nil {
			return fmt.Errorf("%w: docker backend: image %s cannot be pulled: %s; pull or build it yourself, or set docker.image", sandbox.ErrUnavailable, b.st.Image, m.Error.Message)
		}
		line := strings.TrimSpace(m.ID + " " + m.Status)
		if m.Progress != nil && m.Progress.Total > 0 {
			line += fmt.Sprintf(" %d%%", m.Progress.Current*100/m.Progress.Total)
		}
		if progress != nil && line != last {
			progress(line)
			last = line
		}
	}
	return nil
}

// prepare runs inside.ModePrepare in a new container: the image's tools and
// the mount check (the container must see the workspace's entries).
func (b *Backend) prepare(ctx context.Context, cli *client.Client, c *ctr) error {
	var out, errb strings.Builder
	argv := []string{inside.Path, inside.ModePrepare, "--workspace", c.ws.Target,
		"--tools", strings.Join(RequiredTools, ","), "--optional", strings.Join(OptionalTools, ","), "--home", Home}
	code, err := b.e.simpleExec(ctx, cli, c, argv, &out, &errb)
	if err != nil {
		return err
	}
	if code != 0 {
		return fmt.Errorf("%w: docker backend: corral's helper could not run in the container (exit %d: %s); with a remote Docker daemon, corral's helper executable (mounted at %s) must exist at the same path on the daemon's host", sandbox.ErrUnavailable, code, strings.TrimSpace(errb.String()), inside.Path)
	}
	var pr inside.Prepared
	if err := json.Unmarshal([]byte(out.String()), &pr); err != nil {
		return fmt.Errorf("%w: docker backend: reading the container check: %v", sandbox.ErrUnavailable, err)
	}
	if len(pr.Missing) > 0 {
		return fmt.Errorf("%w: docker backend: image %s lacks %s (it must provide %s, and python3 for run_code); build an image with them and set docker.image", sandbox.ErrUnavailable, b.st.Image, strings.Join(pr.Missing, ", "), strings.Join(RequiredTools, ", "))
	}
	if pr.HomeErr != "" {
		return fmt.Errorf("%w: docker backend: image %s: the container's user cannot write its HOME, %s (%s): Docker's tmpfs there takes the mode of the image's own %s; build the image with `chmod 1777 %s` (as Debian's own /tmp is) and set docker.image", sandbox.ErrUnavailable, b.st.Image, Home, pr.HomeErr, Home, Home)
	}
	if len(pr.OptionalMissing) > 0 {
		b.e.log.Info("docker.image.partial", "image", b.st.Image, "missing", strings.Join(pr.OptionalMissing, ","), "detail", "run_code needs python3")
	}
	return b.checkMount(c, &pr)
}

// checkMount compares the workspace's entries on corral's side with what
// the container sees.
func (b *Backend) checkMount(c *ctr, pr *inside.Prepared) error {
	hostNames, err := listNames(c.ws.Host, inside.MaxEntries)
	if err == nil && c.review != nil {
		// The container sees the overlay: what the layer deleted is
		// not there, what it made is.
		hostNames, err = mergedNames(c.review.l, hostNames)
	}
	if err != nil {
		return fmt.Errorf("%w: docker backend: listing the workspace %s: %v", sandbox.ErrBadRequest, c.ws.Host, err)
	}
	if len(hostNames) == 0 {
		b.e.log.Info("docker.mount.unverified", "container", c.name, "workspace", c.ws.Host, "detail", "the workspace is empty, so the mount check cannot compare entries")
		return nil
	}
	seen := make(map[string]bool, len(pr.Entries))
	for _, n := range pr.Entries {
		seen[n] = true
	}
	// Every entry must be there (a few may have come or gone since the
	// listing when both are cut at MaxEntries): a directory elsewhere that
	// happens to share a name or two is not the workspace.
	missing := 0
	for _, n := range hostNames {
		if !seen[n] {
			missing++
		}
	}
	if missing == 0 || (len(hostNames) == inside.MaxEntries && missing*10 < len(hostNames)) {
		return nil
	}
	why := fmt.Sprintf("it lacks %d of the workspace's %d entries", missing, len(hostNames))
	if pr.Err != "" {
		why = pr.Err
	}
	return fmt.Errorf("%w: docker backend: %w: %s at %s (%s), so the Docker daemon resolved %s on another filesystem; when corral and the daemon do not share one (corral in a container, a remote DOCKER_HOST), set docker.host_workspace to the workspace's path on the Docker host; the container was removed", sandbox.ErrUnavailable, ErrMount, c.name, c.ws.Target, why, c.ws.Source)
}

// listNames returns up to max entry names of dir.
func listNames(dir string, max int) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(max)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	return names, nil
}

// protectedIn returns the protected paths (sandbox.Request.Protected)
// that exist in the workspace now, relative to it: they are bound
// read-only onto themselves in the container. Paths reached through a
// symlink are left out (their target could be swapped before the engine
// mounts them); the file tools refuse writes to any protected path, found
// or not.
//
// A container's mounts are fixed when it starts, so a protected path that
// appears later (a `git init` in the container makes .git/hooks) cannot be
// covered by a mount: it is moved out after the command that made it
// (quarantine.go), as on bwrap. The scan is bounded: when it is cut short,
// the container does not start, and a running container takes no more
// commands until the workspace fits again (Engine.scanCut, before each
// command), since what the scan did not see could hold a protected path
// that is neither bound nor moved out.
//
// truncated reports that the scan was cut short (hostview.FindProtected),
// err that a passing cause kept it from reading what it had to
// (hostview.FindProtectedErr): the container must then not start.
//
// own are corral's own files (ownFiles): those in the workspace are bound
// read-only too.
func protectedIn(ws workspace, req *sandbox.Request, own []string) (out []string, truncated bool, err error) {
	if !ws.Writable {
		return nil, false, nil
	}
	found, truncated, err := hostview.FindProtectedErr(ws.Host, req.ProtectedPatterns())
	for _, p := range found {
		if !p.Exists || len(p.Links) > 0 {
			continue
		}
		st, err := os.Lstat(p.Path)
		if err != nil || (p.NotDir && st.IsDir()) {
			continue
		}
		out = append(out, p.Rel)
	}
	for _, f := range own {
		if rel, ok := strings.CutPrefix(f, ws.Host+"/"); ok && !slices.Contains(out, rel) {
			if st, err := os.Lstat(f); err == nil && st.Mode().IsRegular() {
				out = append(out, rel)
			}
		}
	}
	return out, truncated, err
}

// ownFiles returns corral's executable (symlinks resolved) and where a
// helper beside it would be: a corral built in the project (README's
// build) lies in the workspace, and a container must not replace what
// the person runs next on the host, so they are bound read-only like the
// protected paths (bwrap pins them the same way).
func ownFiles() []string {
	exe, err := os.Executable()
	if err != nil {
		return nil
	}
	if r, err := filepath.EvalSymlinks(exe); err == nil {
		exe = r
	}
	return []string{exe, filepath.Join(filepath.Dir(exe), helperbin.Name)}
}

// scanErr is the refusal of a command whose protected-path scan a passing
// cause (too many open files) kept from finishing: nothing ran, and it may
// be tried again (not hostview.ScanCutError, which is the tree's size and
// tells the person to change a setting).
func scanErr(root string, err error) error {
	return sandbox.NotStarted(fmt.Errorf("%w: looking for protected paths in %s: %w", sandbox.ErrUnavailable, root, err))
}

// containerIDs returns the uid and gid that docker.user "" gives commands:
// the caller's; for a root caller, the owner of the workspace when that is
// not root, so what the container writes there is
// the person's and the container does not hold host uid 0. A root caller's
// root-owned workspace keeps 0:0: Docker cannot idmap a bind per container
// (the engine's userns-remap is the daemon's), so root in the container,
// with every capability dropped, can write the root-owned files it is given
// and nothing else of the host.
func containerIDs(uid, gid int, workspace string) (int, int) {
	if uid != 0 {
		return uid, gid
	}
	var st syscall.Stat_t
	if syscall.Stat(workspace, &st) != nil || st.Uid == 0 {
		return uid, gid
	}
	// The owner even when it is a system account: unlike a bwrap
	// sandbox, the container sees nothing of the host that account could
	// reach but the workspace and the judged binds, and Docker cannot
	// idmap the workspace for another uid.
	gid = int(st.Gid)
	if gid == 0 {
		gid = sandbox.NobodyRunAs.GID
	}
	return int(st.Uid), gid
}
