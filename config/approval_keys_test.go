package config

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

// TestApprovalAndAuditKeys: the approval, approval_patterns and
// audit_max_mb keys from the file and the environment, and their errors.
func TestApprovalAndAuditKeys(t *testing.T) {
	s, err := Load(writeFile(t, `
approval: "off"
approval_patterns: ["  kubectl delete ", "rm {-r,-R}", "re:(?i)drop table"]
audit_max_mb: 50
`), testEnv)
	if err != nil {
		t.Fatal(err)
	}
	if s.Approval != ApprovalOff || s.AuditMaxMB != 50 ||
		!reflect.DeepEqual(s.ApprovalPatterns, []string{"kubectl delete", "rm {-r,-R}", "re:(?i)drop table"}) {
		t.Errorf("file values: %q %q %d", s.Approval, s.ApprovalPatterns, s.AuditMaxMB)
	}
	s, err = Load(missing(t), env("CORRAL_APPROVAL=ask", `CORRAL_APPROVAL_PATTERNS=["git push {--force,-f}"]`, "CORRAL_AUDIT_MAX_MB=1"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Approval != ApprovalAsk || s.AuditMaxMB != 1 || !reflect.DeepEqual(s.ApprovalPatterns, []string{"git push {--force,-f}"}) {
		t.Errorf("env values: %q %q %d", s.Approval, s.ApprovalPatterns, s.AuditMaxMB)
	}
	s, err = Load(missing(t), env("CORRAL_APPROVAL_PATTERNS=[]"))
	if err != nil || s.ApprovalPatterns == nil || len(s.ApprovalPatterns) != 0 {
		t.Errorf("empty list: %q, %v", s.ApprovalPatterns, err)
	}
	for _, tc := range []struct{ env, key string }{
		{"CORRAL_APPROVAL=sometimes", "approval"},
		{"CORRAL_AUDIT_MAX_MB=0", "audit_max_mb"},
		{`CORRAL_APPROVAL_PATTERNS=["ok", "re:("]`, "approval_patterns[1]"},
		{"CORRAL_APPROVAL_PATTERNS=git push {--force,-f}", "approval_patterns[0]"},
	} {
		_, err := Load(missing(t), env(tc.env))
		var ve *ValueError
		if !errors.As(err, &ve) || ve.Key != tc.key {
			t.Errorf("%s: error %v, want a ValueError for %s", tc.env, err, tc.key)
		} else if tc.key == "approval_patterns[1]" && !strings.Contains(err.Error(), "regular expression") {
			t.Errorf("%s: %v does not say why", tc.env, err)
		}
	}
}
