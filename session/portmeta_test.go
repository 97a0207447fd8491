package session

import (
	"strings"
	"testing"

	"github.com/corralhq/corral/backend/local"
	"github.com/corralhq/corral/sandbox"
)

// TestFindPortByRecordedTraits: a session whose last command ran on the
// local backend (no sandbox) is told its servers are on the host's
// network; one that ran on bwrap is looked for in its processes'
// sandboxes (none here: nothing listens). The backend's traits are
// recorded in the session's metadata, not judged by its name.
func TestFindPortByRecordedTraits(t *testing.T) {
	f := newFixture(t)
	s := f.open("ports-bwrap")
	f.exec(s, "true")
	if _, err := s.FindPort(8080); err == nil || strings.Contains(err.Error(), "without a sandbox") || strings.Contains(err.Error(), "cannot be reached") {
		t.Errorf("bwrap session: %v", err)
	}
	f.spec = Spec{Backend: local.New(nil), Policy: sandbox.Policy{Profile: sandbox.ProfileWorkspace, Workdir: f.work}, Timeout: f.spec.Timeout, Env: f.spec.Env}
	m := f.manager()
	defer m.Close()
	ls, err := m.Open("ports-local")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ls.Exec(t.Context(), ExecRequest{Command: "true"}); err != nil {
		t.Fatal(err)
	}
	if _, err := ls.FindPort(8080); err == nil || !strings.Contains(err.Error(), "without a sandbox") || !strings.Contains(err.Error(), "127.0.0.1:8080") {
		t.Errorf("local session: %v", err)
	}
}
