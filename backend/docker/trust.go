package docker

import (
	"archive/tar"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/corralhq/corral/egress"
	"github.com/corralhq/corral/hostview"
	"github.com/corralhq/corral/inside"
	"github.com/corralhq/corral/netproxy"
	"github.com/corralhq/corral/sandbox"
	"github.com/corralhq/corral/secrets"
	"github.com/corralhq/corral/secrets/gitcred"
)

// maxBundle bounds a system trust bundle read from an image (Debian's is
// about 200 KiB).
const maxBundle = 16 << 20

// trustSpec is the trust bundle of a container with secrets: the host
// file Bundle (the image's system bundle, else the host's, followed by
// corral's CA certificate; never its key) bound read-only at each of
// Dests; and, when the image has a Java trust store
// (secrets.JavaTrustStores), the host file JavaStore (the same
// certificates as a PKCS#12 trust store, secrets.TrustStore) bound
// read-only at each of JavaDests.
type trustSpec struct {
	Bundle    string
	Dests     []string
	JavaStore string
	JavaDests []string
	// Files are the secrets' credential files, each copy bound read-only
	// at its place in the container (secrets.HomeDest).
	Files []credFile
}

// credFile is one credential file of a secret in a container: the
// substituted copy Src (on the daemon's host; stand-ins only) bound
// read-only at Dest. Secret and Entry (the files entry as written) name
// it in messages.
type credFile struct {
	Secret, Entry string
	Src, Dest     string
}

// credentialFileRefusal returns why a credential file cannot be bound at
// dest in a container whose workspace is at ws and whose binds are at
// bindDests ("" when it can): a file path other than HOME itself, not in
// the workspace or a bind (the bind would make its mount point in the
// host's directory), not in corral's own mounts (/.corral, EgressDir,
// the Node preload's directory), not in
// the kernel's filesystems (/proc, /sys, /dev). A copy bound in the
// writable /tmp stays: a mount point cannot be removed or renamed (EBUSY)
// and the container has no capability to unmount it. Pure.
func credentialFileRefusal(dest, ws string, bindDests []string) string {
	if !filepath.IsAbs(dest) || dest == "/" || dest == Home {
		return "is not a file path in the container"
	}
	if hostview.Within(dest, ws) {
		return "lies in the workspace (" + ws + "), where the bind would make a file in the host's directory"
	}
	for _, d := range bindDests {
		if hostview.Within(dest, d) {
			return "lies in the bind at " + d
		}
	}
	for _, k := range []string{path.Dir(inside.Path), EgressDir, egress.NodeShimDir, "/proc", "/sys", "/dev"} {
		if hostview.Within(dest, k) || hostview.Within(k, dest) {
			return "lies in " + k + ", which corral or the kernel provides"
		}
	}
	return ""
}

// secretSpec is what a request's secrets change: the proxy's secrets and
// allowlist (egressSpec), the trust bundle's mounts, and each command's
// environment (Strip removed, Set set).
type secretSpec struct {
	prep  *secrets.Prepared
	trust *trustSpec
	// Strip and Set are applied to each command's environment
	// (hostview.FilterEnv); the container's own Env never holds either.
	Strip, Set []string
	// key identifies the secrets in the container's hash and egress
	// label: names, hosts and stand-ins (never a real value).
	key string
}

// chooseTrust picks the bundle content and the paths it is bound at: the
// image's own bundles (imageDests, content imageSystem) when it has any,
// else the host's content at SystemCABundles[0], a path the engine makes
// as a mount point (CABundleVars point there as well).
func chooseTrust(imageDests []string, imageSystem, hostSystem []byte) (dests []string, system []byte) {
	if len(imageDests) > 0 {
		return imageDests, imageSystem
	}
	return []string{secrets.SystemCABundles[0]}, hostSystem
}

// secretsKey is a short hash of secs' names, hosts and stand-ins: equal
// for the same secrets and real values within one corral process.
func secretsKey(prep *secrets.Prepared) string {
	h := sha256.New()
	for _, s := range prep.Secrets {
		fmt.Fprintf(h, "%s|%q|%q|%s|%s|%s\n", s.Name, s.Hosts, s.Headers, s.StandIn, s.SecretName, s.SecretStandIn)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// exposedSecretFile returns the first file source of a secret that lies
// in one of roots (the workspace and the binds' sources, as the
// container sees them), where a command could read the real value; "" if
// none. Paths are compared lexically after resolving symlinks on the
// caller's side.
func exposedSecretFile(files, roots []string) (file, root string) {
	for _, f := range files {
		if r, err := filepath.EvalSymlinks(f); err == nil {
			f = r
		}
		for _, d := range roots {
			if f == d || strings.HasPrefix(f, strings.TrimSuffix(d, "/")+"/") {
				return f, d
			}
		}
	}
	return "", ""
}

// prepareSecrets resolves req's secrets (secrets.Prepare, which refuses
// profiles other than allowlist) and writes the container's trust bundle
// (and Java trust store, when the image has one) into Options.TrustDir,
// and the secrets' credential files (Engine.credentialFiles, readable by
// uid:gid, the container's user). It returns nil when req declares none. Errors
// wrap sandbox.ErrBadRequest (a value cannot be read; a file source the
// container could read) or sandbox.ErrUnavailable (no CA, no trust
// directory, the image's bundle cannot be read).
func (b *Backend) prepareSecrets(ctx context.Context, req *sandbox.Request, roots []string, uid, gid int) (*secretSpec, error) {
	prep, err := secrets.Prepare(req)
	if err != nil || prep == nil {
		return nil, err
	}
	e := b.e
	if f, d := exposedSecretFile(prep.Files, roots); f != "" {
		return nil, fmt.Errorf("%w: the file %s that a secret is read from lies in %s, which the container sees: a command could read the real value; keep it outside the workspace and docker.binds", sandbox.ErrPolicy, f, d)
	}
	if e.opts.Egress == nil {
		return nil, fmt.Errorf("%w: docker backend: secrets need corral's proxies, and none were configured", sandbox.ErrUnavailable)
	}
	if e.opts.TrustDir == "" {
		return nil, fmt.Errorf("%w: docker backend: secrets need a directory for the trust bundle (Options.TrustDir), and none was configured", sandbox.ErrUnavailable)
	}
	ca, err := e.opts.Egress.CA()
	if err != nil {
		return nil, err
	}
	cli, err := e.client()
	if err != nil {
		return nil, err
	}
	if err := b.ensureImage(ctx, cli, req.Progress); err != nil {
		return nil, err
	}
	img, err := e.imageBundle(ctx, cli, b.st.Image)
	if err != nil {
		return nil, err
	}
	var hostSystem []byte
	if len(img.dests) == 0 {
		_, hostSystem = secrets.HostBundles()
	}
	dests, system := chooseTrust(img.dests, img.system, hostSystem)
	bundle, err := secrets.WriteBundle(e.opts.TrustDir, system, ca.CertPEM())
	if err != nil {
		return nil, fmt.Errorf("%w: secrets: writing the trust bundle: %v", sandbox.ErrUnavailable, err)
	}
	trust := &trustSpec{Bundle: bundle, Dests: dests}
	if len(img.javaDests) > 0 {
		if trust.JavaStore, err = secrets.WriteTrustStore(e.opts.TrustDir, system, ca.CertPEM()); err != nil {
			return nil, fmt.Errorf("%w: secrets: writing the Java trust store: %v", sandbox.ErrUnavailable, err)
		}
		trust.JavaDests = img.javaDests
	}
	if trust.Files, err = e.credentialFiles(req, prep, uid, gid); err != nil {
		return nil, err
	}
	return &secretSpec{
		prep:  prep,
		trust: trust,
		Strip: prep.Strip,
		Set:   slices.Concat(prep.Env, secrets.BundleEnv(dests[0]), gitcred.Env(inside.Path, req.Secrets), javaEnv(trust)),
		key:   secretsKey(prep),
	}, nil
}

// javaEnv is the JAVA_TOOL_OPTIONS entry of a container whose image has
// a Java trust store: the proxy properties (as egress.Env) and corral's
// store named as the trust store (secrets.JavaToolOptions), for JDKs
// with a cacerts of their own; nil when the image has none.
func javaEnv(trust *trustSpec) []string {
	if trust.JavaStore == "" || len(trust.JavaDests) == 0 {
		return nil
	}
	return []string{"JAVA_TOOL_OPTIONS=" + secrets.JavaToolOptions(netproxy.JavaToolOptions(egress.HTTPPort), trust.JavaDests[0])}
}

// credentialFiles writes the substituted copies of req's secrets' files
// (secrets.CredentialFiles, into Options.SecretFilesDir; as root, each
// given to the container's uid by secrets.OwnCopy, since a container
// process has no capability to read another uid's 0600 file) and maps
// each to its place in the container (secrets.HomeDest). nil when no
// secret lists files. Errors wrap sandbox.ErrBadRequest (secrets.ErrUnusable:
// the entry is named, never a value) or sandbox.ErrUnavailable.
func (e *Engine) credentialFiles(req *sandbox.Request, prep *secrets.Prepared, uid, gid int) ([]credFile, error) {
	if !slices.ContainsFunc(req.Secrets, func(s sandbox.Secret) bool { return len(s.Files) > 0 }) {
		return nil, nil
	}
	if e.opts.SecretFilesDir == "" {
		return nil, fmt.Errorf("%w: docker backend: secrets with files need a directory for their copies (Options.SecretFilesDir), and none was configured", sandbox.ErrUnavailable)
	}
	home, _ := os.UserHomeDir()
	homeReal := home
	if r, err := filepath.EvalSymlinks(home); err == nil {
		homeReal = r
	}
	copies, err := secrets.CredentialFiles(e.opts.SecretFilesDir, homeReal, req.Secrets, prep.Secrets)
	if err != nil {
		return nil, err
	}
	entries := map[string][]string{}
	for _, s := range req.Secrets {
		entries[s.Name] = s.Files
	}
	var out []credFile
	for _, c := range copies {
		src := c.Copy
		if os.Getuid() == 0 && uid != 0 {
			if src, err = secrets.OwnCopy(c.Copy, uid, gid); err != nil {
				return nil, fmt.Errorf("%w: secrets: a credential file for uid %d: %v", sandbox.ErrUnavailable, uid, err)
			}
		}
		entry := c.Given
		if es := entries[c.Secret]; len(es) > 0 {
			entry = es[0]
			entries[c.Secret] = es[1:]
		}
		// corral sets HOME=/tmp for every command (Home), whatever the
		// image's passwd says: ~/.netrc is /tmp/.netrc there.
		dest, _ := secrets.HomeDest(c.Given, home, homeReal, Home)
		out = append(out, credFile{Secret: c.Secret, Entry: entry, Src: src, Dest: dest})
	}
	return out, nil
}

// imageBundle returns the system trust bundles (secrets.SystemCABundles)
// that image holds as regular files, symlinks resolved in the image, and
// the content of the first, and its Java trust stores
// (secrets.JavaTrustStores, found the same way; not read); nothing when
// it has none. It reads them from
// a container created (never started) for the purpose and removed at
// once; the answer is kept per image ID for the engine's life.
func (e *Engine) imageBundle(ctx context.Context, cli *client.Client, image string) (imageTrust, error) {
	ins, err := cli.ImageInspect(ctx, image)
	if err != nil {
		return imageTrust{}, e.engineErr("inspecting image "+image, err)
	}
	e.mu.Lock()
	if c, ok := e.bundles[ins.ID]; ok {
		e.mu.Unlock()
		return c, nil
	}
	e.mu.Unlock()
	start := time.Now()
	res, err := cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Config:     &container.Config{Image: image, Entrypoint: []string{"/nonexistent"}, Labels: map[string]string{LabelEnv: "1", LabelKey: "trust-probe", LabelOwner: e.self.String()}},
		HostConfig: &container.HostConfig{NetworkMode: "none"},
		Name:       randomName(),
	})
	if err != nil {
		return imageTrust{}, e.engineErr("creating a container to read the image's trust bundle", err)
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 30e9)
		defer cancel()
		_, _ = cli.ContainerRemove(rctx, res.ID, client.ContainerRemoveOptions{Force: true})
	}()
	var dests []string
	var system []byte
	for _, p := range secrets.SystemCABundles {
		path, data, ok := readImageFile(ctx, cli, res.ID, p, system == nil)
		if !ok || slices.Contains(dests, path) {
			continue
		}
		if system == nil {
			system = data
		}
		dests = append(dests, path)
	}
	var javaDests []string
	for _, p := range secrets.JavaTrustStores {
		if path, _, ok := readImageFile(ctx, cli, res.ID, p, false); ok && !slices.Contains(javaDests, path) {
			javaDests = append(javaDests, path)
		}
	}
	it := imageTrust{dests, system, javaDests}
	e.mu.Lock()
	if e.bundles == nil {
		e.bundles = map[string]imageTrust{}
	}
	e.bundles[ins.ID] = it
	e.mu.Unlock()
	e.log.Info("docker.trust.image", "image", image, "bundles", strings.Join(dests, ","), "java_stores", strings.Join(javaDests, ","), "ms", time.Since(start).Milliseconds())
	return it, nil
}

// imageTrust is an image's system trust bundles and Java trust stores
// (Engine.imageBundle).
type imageTrust struct {
	dests     []string
	system    []byte
	javaDests []string
}

// readImageFile reads path in the (created) container id, following a
// few symlinks (the engine resolves them in the container's root); ok is
// false unless it ends at a regular file. data is read only when want.
func readImageFile(ctx context.Context, cli *client.Client, id, path string, want bool) (string, []byte, bool) {
	for range 8 {
		st, err := cli.ContainerStatPath(ctx, id, client.ContainerStatPathOptions{Path: path})
		if err != nil {
			return "", nil, false
		}
		if st.Stat.Mode&os.ModeSymlink != 0 {
			if st.Stat.LinkTarget == "" || st.Stat.LinkTarget == path {
				return "", nil, false
			}
			path = st.Stat.LinkTarget
			continue
		}
		if !st.Stat.Mode.IsRegular() {
			return "", nil, false
		}
		if !want {
			return path, nil, true
		}
		cp, err := cli.CopyFromContainer(ctx, id, client.CopyFromContainerOptions{SourcePath: path})
		if err != nil {
			return "", nil, false
		}
		defer cp.Content.Close()
		tr := tar.NewReader(cp.Content)
		h, err := tr.Next()
		if err != nil || h.Typeflag != tar.TypeReg || h.Size > maxBundle {
			return "", nil, false
		}
		data, err := io.ReadAll(io.LimitReader(tr, maxBundle))
		if err != nil {
			return "", nil, false
		}
		return path, data, true
	}
	return "", nil, false
}
