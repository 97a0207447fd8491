package local

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os/exec"
	"strings"
	"testing"

	// The backends a refusal of secrets names, registered as in corral's
	// own list (backends.go).
	_ "github.com/corralhq/corral/backend/bwrap"
	_ "github.com/corralhq/corral/backend/docker"
	_ "github.com/corralhq/corral/backend/kubernetes"
	"github.com/corralhq/corral/internal/envsecrets"
	"github.com/corralhq/corral/sandbox"
)

// TestEnvWithheldLogged: the log names what the environment policy
// withheld for its value (local.env.withheld), never the value. (What
// reaches the command is the conformance suite's env case.)
func TestEnvWithheldLogged(t *testing.T) {
	envPath, err := exec.LookPath("env")
	if err != nil {
		t.Fatal(err)
	}
	var logged bytes.Buffer
	b := New(slog.New(slog.NewTextHandler(&logged, nil)))
	var out strings.Builder
	env := append([]string{"PATH=/usr/bin:/bin", "GITHUB_TOKEN=denied-by-name", "EXTRA_DENIED=by-env-deny", "VAULT_TOKEN=allowed-by-name"}, envsecrets.Env()...)
	res, err := b.Run(context.Background(), &sandbox.Request{
		Argv: []string{envPath}, Env: env, Policy: sandbox.Policy{Workdir: t.TempDir(), EnvDeny: []string{"EXTRA_*"}, EnvAllow: []string{"vault_token", envsecrets.AllowPattern}}, Stdout: &out, Stderr: &out,
	})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("Run: %v %+v: %s", err, res, out.String())
	}
	if !strings.Contains(logged.String(), "msg=local.env.withheld name=SLACK_WEBHOOK_URL kind=slack-webhook") {
		t.Errorf("no local.env.withheld record for SLACK_WEBHOOK_URL:\n%s", logged.String())
	}
	for _, m := range envsecrets.Markers {
		if strings.Contains(logged.String(), m) {
			t.Errorf("the log holds a withheld value (%q)", m)
		}
	}
}

// TestSecretsRefusedNamingBackends: the local backend refuses secrets, and
// its message names the secret and every backend that has them.
func TestSecretsRefusedNamingBackends(t *testing.T) {
	var out bytes.Buffer
	req := &sandbox.Request{Argv: []string{"true"}, Stdout: &out, Stderr: &out,
		Policy: sandbox.Policy{Workdir: t.TempDir(), Profile: sandbox.ProfileAllowlist, Secrets: []sandbox.Secret{{Name: "GITHUB_TOKEN", From: "env:GH", Hosts: []string{"api.github.com"}}}}}
	_, err := New(nil).Run(context.Background(), req)
	if !errors.Is(err, sandbox.ErrBadRequest) {
		t.Fatalf("Run = %v, want ErrBadRequest", err)
	}
	for _, want := range []string{"GITHUB_TOKEN", "bwrap", "docker", "kubernetes", "local backend has none", "secrets: []"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the refusal %q does not name %q", err, want)
		}
	}
}

// TestMissingProgramOrDirectory: a program path that does not exist is 127
// (not found), while a working directory that is gone is 126 (cannot be
// run), although both starts fail with ENOENT.
func TestMissingProgramOrDirectory(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		argv0, dir string
		want       int
	}{
		{dir + "/no-such-program", dir, sandbox.ExitNotFound},
		{"./no-such-program", dir, sandbox.ExitNotFound},
		{"/bin/sh", dir + "/gone", sandbox.ExitCannotInvoke},
	} {
		res, err := New(nil).Run(context.Background(), &sandbox.Request{Argv: []string{tc.argv0}, Policy: sandbox.Policy{Workdir: tc.dir}})
		if err != nil || res.ExitCode != tc.want {
			t.Errorf("%s in %s: %v %+v, want exit %d", tc.argv0, tc.dir, err, res, tc.want)
		}
	}
}
