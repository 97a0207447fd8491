package bwrap

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/corralhq/corral/internal/pathres"
	"github.com/corralhq/corral/sandbox"
)

// checkedPlan is BuildPlan, which the plan fixtures of this package's
// tests call through it: it builds the plan a second time resolving every
// path afresh (filepath.EvalSymlinks, os.Stat: a nil pathres.Resolver) and
// fails t unless the two plans, or their errors, are the same. The memo
// of one plan must change nothing of what is hidden, bound or refused.
func checkedPlan(t testing.TB, req *sandbox.Request, host Host) (*Plan, error) {
	t.Helper()
	plan, err := BuildPlan(req, host)
	ref, rerr := buildPlan(req, host, nil)
	if d := planDiff(plan, err, ref, rerr); d != "" {
		t.Errorf("the plan built with the per-plan resolver differs from the one resolved afresh: %s", d)
	}
	return plan, err
}

// planDiff describes how two plans (or their errors) differ, or "".
func planDiff(a *Plan, aerr error, b *Plan, berr error) string {
	if fmt.Sprint(aerr) != fmt.Sprint(berr) {
		return fmt.Sprintf("error %v, afresh %v", aerr, berr)
	}
	if a == nil || b == nil {
		if a != b {
			return fmt.Sprintf("plan %v, afresh %v", a, b)
		}
		return ""
	}
	ac, bc := *a, *b
	if fmt.Sprint(ac.ProtectScanErr) != fmt.Sprint(bc.ProtectScanErr) {
		return fmt.Sprintf("scan error %v, afresh %v", ac.ProtectScanErr, bc.ProtectScanErr)
	}
	ac.ProtectScanErr, bc.ProtectScanErr = nil, nil
	if !reflect.DeepEqual(ac.Mounts, bc.Mounts) {
		return fmt.Sprintf("mounts\n%s\nafresh\n%s", planDump(ac.Mounts), planDump(bc.Mounts))
	}
	if !reflect.DeepEqual(ac, bc) {
		return fmt.Sprintf("%+v\nafresh\n%+v", ac, bc)
	}
	return ""
}

// TestPlanResolverStale: a resolver kept past its plan would miss a
// symlink swapped since (which is why each plan makes its own), and
// checkedPlan's comparison sees the difference: a home entry that was a
// symlink to the project and is now one to the data directory.
func TestPlanResolverStale(t *testing.T) {
	f := newPlanFix(t)
	link := filepath.Join(f.home, "link")
	req := f.req(nil)
	stale := pathres.New()
	first, err := buildPlan(req, f.host(), stale)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(link); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.data, link); err != nil {
		t.Fatal(err)
	}
	old, oerr := buildPlan(req, f.host(), stale)
	fresh, ferr := checkedPlan(t, req, f.host())
	if planDiff(first, nil, old, oerr) != "" {
		t.Errorf("a resolver used again gave another plan: %s", planDiff(first, nil, old, oerr))
	}
	if planDiff(old, oerr, fresh, ferr) == "" {
		t.Errorf("the plan of a stale resolver equals the fresh one after %s was swapped: the comparison cannot tell", link)
	}
	if i := planFind(fresh.Mounts, mSymlink, link); i < 0 || fresh.Mounts[i].Src != f.data {
		t.Errorf("fresh plan: %s is not recreated as a symlink to %s:\n%s", link, f.data, planDump(fresh.Mounts))
	}
}
