package handback

import (
	"bytes"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

func TestIsGitConfigPattern(t *testing.T) {
	for p, want := range map[string]bool{
		"**/.git/config": true, ".git/config": true, "**/.git/config.worktree": true, "a/.git/config": true,
		"**/.git/hooks": false, ".gitconfig": false, "config": false, "**/x.git/config": false, ".git/configs": false,
	} {
		if got := IsGitConfigPattern(p); got != want {
			t.Errorf("IsGitConfigPattern(%q) = %v, want %v", p, got, want)
		}
	}
}

// TestSanitizeGitConfig feeds hostile configurations through the host's
// git and SafeGitConfig, and reads the result back with git: what runs a
// program is gone, a clone's remote and upstream are kept with their values
// intact, whatever quoting they need.
func TestSanitizeGitConfig(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed")
	}
	hostile := `[core]
	repositoryformatversion = 0
	filemode = true
	bare = false
	fsmonitor = /tmp/evil
	pager = sh -c evil
	hooksPath = /tmp/hooks
	sshCommand = evil
[remote "origin"]
	url = https://example.com/a.git
	fetch = +refs/heads/*:refs/remotes/origin/*
	uploadpack = touch /tmp/pwned
	receivepack = evil
	proxy = http://evil
[remote "we\"ird\\name"]
	url = "/path with \"quotes\" ;#and\\back"
[remote "ext"]
	url = ext::sh -c touch% /tmp/pwned
	pushurl = FD::3
[branch "main"]
	remote = origin
	merge = refs/heads/main
[alias]
	co = !touch /tmp/pwned
	st = status
[filter "lfs"]
	smudge = evil %f
	process = evil
[diff "x"]
	textconv = evil
[include]
	path = /tmp/other
[includeIf "gitdir:/"]
	path = /tmp/other
[credential]
	helper = evil
[submodule "lib"]
	url = ../lib.git
	update = !evil
	active
[uploadpack]
	packObjectsHook = evil
[extensions]
	objectFormat = sha256
`
	content, dropped, err := SanitizeGitConfig([]byte(hostile))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("git", "config", "--file", "-", "--null", "--list")
	cmd.Env = []string{"GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME=/nonexistent", "PATH=/usr/bin:/bin"}
	cmd.Stdin = bytes.NewReader(content)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git cannot read the kept configuration: %v\n%s", err, content)
	}
	var got []string
	for _, rec := range strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00") {
		got = append(got, strings.Replace(rec, "\n", "=", 1))
	}
	want := []string{
		"core.repositoryformatversion=0", "core.filemode=true", "core.bare=false",
		"remote.origin.url=https://example.com/a.git", "remote.origin.fetch=+refs/heads/*:refs/remotes/origin/*",
		`remote.we"ird\name.url=/path with "quotes" ;#and\back`,
		"branch.main.remote=origin", "branch.main.merge=refs/heads/main",
		"submodule.lib.url=../lib.git", "submodule.lib.active",
		"extensions.objectformat=sha256",
	}
	if !slices.Equal(got, want) {
		t.Errorf("kept:\n%s\nwant:\n%s\nfile:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"), content)
	}
	for _, k := range []string{"core.fsmonitor", "core.pager", "core.hookspath", "core.sshcommand", "remote.origin.uploadpack",
		"remote.origin.receivepack", "remote.origin.proxy", "remote.ext.url", "remote.ext.pushurl", "alias.co", "alias.st",
		"filter.lfs.smudge", "filter.lfs.process", "diff.x.textconv", "include.path", "includeif.gitdir:/.path",
		"credential.helper", "submodule.lib.update", "uploadpack.packobjectshook"} {
		if !slices.Contains(dropped, k) {
			t.Errorf("%s not reported dropped: %q", k, dropped)
		}
	}

	if _, _, err := SanitizeGitConfig([]byte("[core\n\tbroken")); err == nil {
		t.Error("a configuration git cannot parse was accepted")
	}
	if _, _, err := SanitizeGitConfig(bytes.Repeat([]byte("#"), maxGitConfig+1)); err == nil {
		t.Error("an oversized configuration was accepted")
	}
	if c, d, err := SanitizeGitConfig(nil); err != nil || len(c) != 0 || len(d) != 0 {
		t.Errorf("empty configuration: %q %q %v", c, d, err)
	}
}
