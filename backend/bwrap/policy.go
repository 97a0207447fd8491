package bwrap

import (
	"path/filepath"
	"strings"
)

// homeAllow is the shipped allowlist of dot entries at the top of the home
// directory: shell start-up files, git settings, caches and toolchain homes.
// Allowed entries are shown read-only.
var homeAllow = []string{
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

// nestedHomeDirs are the home subdirectories whose own children follow the
// dot-entry rule: only allowed children are visible, nothing new can be made.
var nestedHomeDirs = []string{".config", ".local", ".local/share"}

// nestedAllow is the shipped allowlist of children of .config, .local and
// .local/share, as paths relative to the home directory.
var nestedAllow = []string{
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

// credentialStores are hidden whatever the allowlist says: the entries hold
// keys, tokens or session data of other programs. Paths are relative to the
// home directory. A home_allow entry naming one (or lying inside one) is
// ignored with a warning.
var credentialStores = []string{
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

// credentialFiles read as empty files inside otherwise visible entries.
// Paths are relative to the home directory.
var credentialFiles = []string{
	".cargo/credentials.toml", ".cargo/credentials", ".gem/credentials",
	".m2/settings.xml", ".m2/settings-security.xml", ".config/npm/npmrc",
	".gradle/gradle.properties", ".nuget/NuGet/NuGet.Config",
	".local/share/uv/credentials/credentials.toml", ".config/git/credentials",
	".pyenv/.pypirc", ".condarc.d/credentials",
}

// caBundleVars name a CA bundle (a file, or a directory for SSL_CERT_DIR).
// A bundle that lies in a hidden path is bound back read-only so TLS keeps
// working.
var caBundleVars = []string{
	"SSL_CERT_FILE", "SSL_CERT_DIR", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE",
	"NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "PIP_CERT",
}

// dockerSockets are replaced by an empty file inside the sandbox: the API
// sockets of the container engines, each as good as root on the host
// (containerd's too, which Docker runs at /run/docker/containerd).
var dockerSockets = []string{
	"/run/docker.sock", "/var/run/docker.sock", "/run/podman/podman.sock",
	"/run/containerd/containerd.sock", "/run/containerd/containerd.sock.ttrpc", "/run/containerd/debug.sock",
	"/run/docker/containerd/containerd.sock", "/run/docker/containerd/containerd.sock.ttrpc",
	"/run/docker/containerd/containerd-debug.sock", "/run/docker/metrics.sock",
	"/run/crio/crio.sock", "/var/run/crio/crio.sock", "/run/buildkit/buildkitd.sock",
}

// within reports whether p is base or lies below it. Both must be clean
// absolute paths. The test is on path components, so /home/ab is not within
// /home/a.
func within(p, base string) bool {
	if base == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == base || strings.HasPrefix(p, base+"/")
}

// isCredentialRel reports whether rel (relative to home, slash-separated,
// clean) is a credential store or lies inside one.
func isCredentialRel(rel string) bool {
	for _, c := range credentialStores {
		if rel == c || strings.HasPrefix(rel, c+"/") {
			return true
		}
	}
	return false
}

// relToHome returns p relative to home, or ok=false when p is not inside
// home (or is home itself).
func relToHome(p, home string) (string, bool) {
	if home == "" || home == "/" || !within(p, home) || p == home {
		return "", false
	}
	return filepath.ToSlash(p[len(home)+1:]), true
}

// isNestedDir reports whether rel is one of .config, .local, .local/share.
func isNestedDir(rel string) bool {
	for _, n := range nestedHomeDirs {
		if rel == n {
			return true
		}
	}
	return false
}
