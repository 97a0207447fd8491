package toolcache

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
)

// HomeCaches returns the tools' default cache directories in the home
// directory home (absolute, clean; they need not exist): ~/.npm, ~/.cache,
// ~/.yarn, ~/.local/share/pnpm, ~/.pnpm-store, ~/.cargo, ~/.m2, ~/.gradle
// and ~/go (GOPATH's default, which holds the module cache). A variable set
// to a path inside one of them is never kept for a sandbox (see
// Options.Keep), even where the sandbox could write it (the working
// directory is the home directory, whose non-dot entries are then
// writable): the host runs code from there later. None when home is "" or
// "/".
func HomeCaches(home string) []string {
	if home == "" || home == "/" {
		return nil
	}
	var out []string
	for _, rel := range []string{".npm", ".cache", ".yarn", ".local/share/pnpm", ".pnpm-store", ".cargo", ".m2", ".gradle", "go"} {
		out = append(out, filepath.Join(home, rel))
	}
	return out
}

// HostGo returns the host's Go module cache (GOMODCACHE, else the first
// GOPATH entry's pkg/mod, else ~/go/pkg/mod) and the GOPROXY the host's go
// would use when the environment sets none, each as policyEnv or else the
// user's go env file (`go env -w`: $GOENV, or the user configuration
// directory's go/env) says; "" where neither does (proxy) or no home is
// known (modCache).
func HostGo(policyEnv []string, home string) (modCache, proxy string) {
	file := goEnvFile(policyEnv, home)
	get := func(name string) string {
		if v, ok := lookup(policyEnv, name); ok && v != "" {
			return v
		}
		return file[name]
	}
	proxy = get(goProxyVar)
	if m := get("GOMODCACHE"); filepath.IsAbs(m) {
		return filepath.Clean(m), proxy
	}
	for _, p := range filepath.SplitList(get("GOPATH")) {
		if filepath.IsAbs(p) {
			return filepath.Join(p, "pkg", "mod"), proxy
		}
		break // go takes the first entry only
	}
	if home == "" || home == "/" {
		return "", proxy
	}
	return filepath.Join(home, "go", "pkg", "mod"), proxy
}

// goEnvFile reads the go env file (KEY=VALUE lines, as `go env -w` writes
// them); a missing or unreadable file, or GOENV=off, is an empty map.
func goEnvFile(policyEnv []string, home string) map[string]string {
	out := map[string]string{}
	path, _ := lookup(policyEnv, "GOENV")
	if path == "off" {
		return out
	}
	if path == "" {
		cfg, _ := lookup(policyEnv, "XDG_CONFIG_HOME")
		if !filepath.IsAbs(cfg) {
			if home == "" {
				return out
			}
			cfg = filepath.Join(home, ".config")
		}
		path = filepath.Join(cfg, "go", "env")
	}
	f, err := os.Open(path)
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, "="); ok && k != "" && !strings.HasPrefix(k, "#") {
			out[strings.TrimSpace(k)] = strings.TrimSpace(v)
		}
	}
	return out
}
