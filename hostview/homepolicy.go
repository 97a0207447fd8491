package hostview

import (
	"path/filepath"
	"strings"
)

// This file holds the lists every backend judges host paths by: what a
// home directory shows, which entries hold credentials, which trees belong
// to the system or to a container engine. The bwrap backend applies them to
// the caller's home directory it rebuilds, and both backends to binds
// (DecideBind).

// DefaultHomeAllow is the shipped allowlist of dot entries at the top of a
// home directory: shell start-up files, git settings, caches and toolchain
// homes. Allowed entries are shown read-only; every other dot entry is
// hidden (home_allow adds entries).
var DefaultHomeAllow = []string{
	// shells and terminals
	".bashrc", ".bash_profile", ".bash_login", ".bash_logout", ".bash_aliases", ".profile",
	".zshrc", ".zshenv", ".zprofile", ".zlogin", ".zlogout", ".inputrc", ".tmux.conf",
	".vimrc", ".vim", ".nanorc", ".editorconfig", ".curlrc", ".wgetrc",
	// git
	".gitconfig", ".gitignore", ".gitignore_global", ".gitattributes",
	// caches and toolchain homes
	".cache", ".cargo", ".rustup", ".nvm", ".pyenv", ".go", ".npm", ".yarn", ".bun", ".deno",
	".volta", ".asdf", ".rbenv", ".gem", ".sdkman", ".m2", ".gradle", ".ghcup", ".cabal",
	".stack", ".opam", ".julia", ".elan", ".dotnet", ".nuget", ".conda", ".condarc",
	".pub-cache", ".pixi", ".ipython", ".jupyter",
}

// NestedHomeDirs are the home subdirectories whose own children follow the
// dot-entry rule: only allowed children are visible, nothing new can be
// made. Relative to the home directory.
var NestedHomeDirs = []string{".config", ".local", ".local/share"}

// DefaultNestedAllow is the shipped allowlist of children of .config,
// .local and .local/share, as paths relative to the home directory.
var DefaultNestedAllow = []string{
	".config/git", ".config/nvim", ".config/vim", ".config/fish", ".config/zsh",
	".config/starship.toml", ".config/htop", ".config/tmux", ".config/pip", ".config/uv",
	".config/pypoetry", ".config/matplotlib", ".config/go", ".config/mise", ".config/direnv",
	".config/bat", ".config/ripgrep", ".config/fontconfig", ".config/pnpm", ".config/yarn",
	".config/helix", ".config/npm", ".config/nano", ".config/pycodestyle", ".config/flake8",
	".config/ruff", ".config/black",
	".local/bin", ".local/lib", ".local/share",
	".local/share/fonts", ".local/share/man", ".local/share/mise", ".local/share/pnpm",
	".local/share/uv", ".local/share/pipx", ".local/share/virtualenvs", ".local/share/nvim",
	".local/share/bash-completion", ".local/share/zsh", ".local/share/fish", ".local/share/nano",
	".local/share/vim", ".local/share/go", ".local/share/cargo", ".local/share/rustup",
	".local/share/pnpm-store", ".local/share/yarn",
}

// CredentialStores are hidden whatever an allowlist says: the entries hold
// keys, tokens or session data of other programs. Paths are relative to a
// home directory (every person's: the caller's, the other users' of
// /etc/passwd, root's). A home_allow entry naming one (or lying inside one)
// is ignored.
var CredentialStores = []string{
	".ssh", ".aws", ".gnupg", ".kube", ".docker", ".netrc", ".npmrc", ".pypirc", ".pgpass",
	".git-credentials", ".azure", ".password-store", ".pki", ".vault-token", ".boto", ".s3cfg",
	".oci", ".ibmcloud", ".terraform.d", ".fly", ".netlify", ".vercel", ".wrangler",
	".mozilla", ".thunderbird", ".claude", ".claude.json", ".codex", ".gemini", ".hermes",
	".config/gh", ".config/gcloud", ".config/hub", ".config/op", ".config/1Password",
	".config/google-chrome", ".config/chromium", ".config/BraveSoftware",
	".config/microsoft-edge", ".config/Code", ".config/rclone", ".config/doctl",
	".config/configstore", ".config/hcloud", ".config/git/credentials", ".config/corral",
	".local/share/keyrings", ".local/share/kwalletd", ".local/state/corral",
	".local/share/corral", ".cache/corral", ".gnome2/keyrings",
}

// OwnStores are the CredentialStores that are corral's own state, data
// and cache directories, which sandboxes write into (the tool cache,
// scratch directories and session homes live under the state directory).
// They are hidden whole like any store, but CredentialTargets does not walk
// them for symlinks: a symlink there was made by corral or by a sandbox,
// never by a person keeping a secret elsewhere, and following it would let
// one sandbox hide any path it names (/usr) from every later sandbox, and
// make every command pay for a walk of a tool cache of any size.
var OwnStores = []string{".local/state/corral", ".local/share/corral", ".cache/corral"}

// CredentialFiles read as empty files inside otherwise visible entries.
// Paths are relative to a home directory.
var CredentialFiles = []string{
	".cargo/credentials.toml", ".cargo/credentials", ".gem/credentials",
	".m2/settings.xml", ".m2/settings-security.xml", ".config/npm/npmrc",
	".gradle/gradle.properties", ".nuget/NuGet/NuGet.Config",
	".local/share/uv/credentials/credentials.toml", ".config/git/credentials",
	".pyenv/.pypirc", ".condarc.d/credentials",
}

// EngineSockets are the API sockets of container engines at their usual
// paths, each as good as root on the host (containerd's too, which Docker
// runs at /run/docker/containerd). The bwrap backend replaces them by an
// empty file in every sandbox; a bind that is, lies in or holds one is
// refused (DecideBind). Sockets elsewhere are found by what they are
// (ScanSockets), not by these paths.
var EngineSockets = []string{
	"/run/docker.sock", "/var/run/docker.sock", "/run/podman/podman.sock",
	"/run/containerd/containerd.sock", "/run/containerd/containerd.sock.ttrpc", "/run/containerd/debug.sock",
	"/run/docker/containerd/containerd.sock", "/run/docker/containerd/containerd.sock.ttrpc",
	"/run/docker/containerd/containerd-debug.sock", "/run/docker/metrics.sock",
	"/run/crio/crio.sock", "/var/run/crio/crio.sock", "/run/buildkit/buildkitd.sock",
}

// EngineSocketNames are the file names of container engines' API sockets:
// a bind source so named, or a socket so named below one, is refused
// whatever its mode (an engine socket made world-writable is still root).
var EngineSocketNames = []string{
	"docker.sock", "containerd.sock", "containerd.sock.ttrpc", "podman.sock", "crio.sock",
	"buildkitd.sock", "cri-dockerd.sock", "dockershim.sock", "k3s.sock",
}

// EngineDirs are where container engines and orchestrators keep their
// sockets and state (other containers' file systems, pod secrets): a bind
// that is, lies in or holds one is refused.
var EngineDirs = []string{
	"/run/docker", "/run/containerd", "/run/podman", "/run/crio", "/run/buildkit", "/run/k3s", "/run/k0s",
	"/var/run/docker", "/var/run/containerd", "/var/run/podman", "/var/run/crio", "/var/run/buildkit", "/var/run/k3s",
	"/var/lib/docker", "/var/lib/containerd", "/var/lib/containers", "/var/lib/rancher", "/var/lib/kubelet",
	"/var/lib/buildkit", "/var/lib/k0s", "/var/lib/lxd", "/var/lib/incus",
}

// SystemTrees are trees no sandbox may write, whatever the working
// directory or a read-write bind says: the host's kernel interfaces, its
// programs and configuration, service data, and shared directories that
// hold other programs' sockets. Entries ending in "/" match the directory
// itself only (its subdirectories, such as a project under /tmp, are fine).
var SystemTrees = []string{
	"/proc", "/sys", "/dev", "/run", "/var/run", "/boot", "/etc", "/usr", "/bin", "/sbin",
	"/lib", "/lib32", "/lib64", "/libx32", "/var/lib", "/var/log", "/var/cache", "/var/spool",
	"/var/mail", "/var/backups", "/var/opt", "/var/local", "/lost+found", "/snap", "/tmp/", "/var/tmp/", "/var/", "/home/", "/opt/", "/srv/", "/mnt/", "/media/",
}

// SystemSecrets are glob patterns of files, readable by root only, that read
// as empty in every sandbox: password hashes and the host's SSH private
// keys.
var SystemSecrets = []string{
	"/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-",
	"/etc/ssh/ssh_host_*_key", "/etc/security/opasswd",
}

// Within reports whether p is base or lies below it. Both must be clean
// absolute paths. The test is on path components, so /home/ab is not
// within /home/a.
func Within(p, base string) bool {
	if base == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == base || strings.HasPrefix(p, base+"/")
}

// RelToHome returns p relative to home (slash-separated), or ok=false when
// p is not inside home, is home itself, or home is "" or "/".
func RelToHome(p, home string) (rel string, ok bool) {
	if home == "" || home == "/" || !Within(p, home) || p == home {
		return "", false
	}
	return filepath.ToSlash(p[len(home)+1:]), true
}

// IsCredentialRel reports whether rel (relative to a home, slash-separated,
// clean) is one of CredentialStores or lies inside one.
func IsCredentialRel(rel string) bool {
	for _, c := range CredentialStores {
		if rel == c || strings.HasPrefix(rel, c+"/") {
			return true
		}
	}
	return false
}

// IsNestedHomeDir reports whether rel is one of NestedHomeDirs.
func IsNestedHomeDir(rel string) bool {
	for _, n := range NestedHomeDirs {
		if rel == n {
			return true
		}
	}
	return false
}

// SystemTree returns the entry of SystemTrees that r (clean, absolute,
// resolved) falls under, without a trailing "/", or "".
func SystemTree(r string) string {
	for _, s := range SystemTrees {
		if exact, ok := strings.CutSuffix(s, "/"); ok {
			if r == exact {
				return exact
			}
			continue
		}
		if Within(r, s) {
			return s
		}
	}
	return ""
}
