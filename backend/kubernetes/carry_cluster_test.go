package kubernetes

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/corralhq/corral/sandbox"
)

// carryFiles makes files of every kind a workspace holds (a nested
// directory, a private file, an executable, a symlink, a dot file) and
// carryCheck prints them back; the output is the same in every pod the
// workspace is carried to.
const (
	carryFiles = `set -e; echo one > f; mkdir -p d/e; echo two > d/e/g; chmod 600 d/e/g; printf '#!/bin/sh\necho ran\n' > x; chmod 755 x; ln -s d/e/g l; echo dot > .hidden`
	carryCheck = `cat f d/e/g l .hidden; ./x; stat -c '%n %a' f d/e/g x`
	carryWant  = "one\ntwo\ntwo\ndot\nran\nf 644\nd/e/g 600\nx 755\n"
)

// withProfile sets a request's profile.
func withProfile(p sandbox.Profile) func(*sandbox.Request) {
	return func(r *sandbox.Request) { r.Profile = p }
}

// TestWorkspaceCarriedKubernetes: a session whose profile or settings
// change gets a new pod with the old pod's workspace in it (into a
// read-only workspace under restricted too, where a private file becomes
// readable by the pod's group, and out of it again), the
// old pod gone; the first result in the new pod has no note. With the
// warm pool the new pod is a claimed one, and the same holds.
func TestWorkspaceCarriedKubernetes(t *testing.T) {
	for _, warm := range []int{0, 1} {
		t.Run("warm_pool="+strconv.Itoa(warm), func(t *testing.T) {
			k := newKube(t)
			if warm > 0 {
				k.setWarmPool(warm)
			}
			sess := "carry-" + strconv.Itoa(warm) + "-" + strconv.Itoa(os.Getpid())
			if out, _, res := k.run(sess, carryFiles+"; "+carryCheck, nil); res.ExitCode != 0 || out != carryWant {
				t.Fatalf("making the files: exit %d, %q", res.ExitCode, out)
			}
			pod := k.sessionPod(t, sess)
			steps := []struct {
				name string
				mut  func(*sandbox.Request)
			}{
				{"restricted", withProfile(sandbox.ProfileRestricted)},
				{"network", withProfile(sandbox.ProfileNetwork)},
				// A setting (kubernetes.memory, below).
				{"memory", withProfile(sandbox.ProfileNetwork)},
			}
			want := carryWant
			for _, st := range steps {
				if st.name == "memory" {
					k.st.Memory = "300Mi"
					k.b = k.e.Backend(k.st)
				}
				if st.name == "restricted" {
					// Written there by the helper container's uid, the
					// private file is the group's to read too (GroupReads).
					want = strings.Replace(want, "d/e/g 600", "d/e/g 640", 1)
				}
				out, errb, res := k.run(sess, carryCheck, st.mut)
				if res.ExitCode != 0 || out != want {
					t.Errorf("%s: exit %d, stdout %q (want %q), stderr %q", st.name, res.ExitCode, out, want, errb)
				}
				if hasReset(res.Warnings) {
					t.Errorf("%s: notes %q", st.name, res.Warnings)
				}
				now := k.sessionPod(t, sess)
				if now == pod {
					t.Errorf("%s: the session is still in pod %s", st.name, pod)
				}
				if k.podExists(pod) {
					t.Errorf("%s: the old pod %s is still there", st.name, pod)
				}
				pod = now
			}
			if !strings.Contains(k.log.String(), "kubernetes.workspace.carried") {
				t.Errorf("no kubernetes.workspace.carried event")
			}
			k.b.Release(sess)
			k.waitGone(sess)
		})
	}
}

// hasReset reports whether notes say that a workspace was reset.
func hasReset(notes []string) bool {
	for _, n := range notes {
		if strings.Contains(n, "workspace was reset") {
			return true
		}
	}
	return false
}

// TestWorkspaceCarryLostKubernetes: when the session's old pod is gone
// (deleted behind corral's back) as its settings change, the new pod's
// first result says that the workspace was reset, naming the old pod and
// why; the session goes on in the new pod.
func TestWorkspaceCarryLostKubernetes(t *testing.T) {
	k := newKube(t)
	sess := "carry-lost-" + strconv.Itoa(os.Getpid())
	k.run(sess, "echo one > f", nil)
	old := k.sessionPod(t, sess)
	cl, err := k.e.clusterFor(k.st.Kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.cs.remove(context.Background(), k.st.Namespace, resPods, old); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for k.podExists(old) {
		if time.Now().After(deadline) {
			t.Fatalf("pod %s is still there", old)
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, _, res := k.run(sess, "ls -A; echo here", withProfile(sandbox.ProfileNetwork))
	if res.ExitCode != 0 || out != "here\n" {
		t.Errorf("exit %d, stdout %q, want the empty workspace's", res.ExitCode, out)
	}
	if !hasReset(res.Warnings) || !strings.Contains(strings.Join(res.Warnings, "\n"), old) {
		t.Errorf("notes %q: want one saying the workspace was reset, naming %s", res.Warnings, old)
	}
	// Once: the next command has no note.
	if _, _, res := k.run(sess, "true", withProfile(sandbox.ProfileNetwork)); len(res.Warnings) != 0 {
		t.Errorf("the next command's notes: %q", res.Warnings)
	}
	k.b.Release(sess)
	k.waitGone(sess)
}

// podExists reports whether pod name is there and not being deleted.
func (k *kube) podExists(name string) bool {
	k.t.Helper()
	for _, p := range k.managedPods() {
		if p.Name == name {
			return true
		}
	}
	return false
}

// TestIdleResetFollowsSettingsKubernetes: a session whose pod was
// removed for idleness and whose next command comes under other
// settings gets the idle note there (the reset follows the session to
// its pod of another spec), once.
func TestIdleResetFollowsSettingsKubernetes(t *testing.T) {
	k := newKube(t)
	k.st.IdleTimeout = "1s"
	k.b = k.e.Backend(k.st)
	sess := "carry-idle-" + strconv.Itoa(os.Getpid())
	k.run(sess, "echo one > f", nil)
	old := k.sessionPod(t, sess)
	deadline := time.Now().Add(2 * time.Minute)
	for k.podExists(old) {
		if time.Now().After(deadline) {
			t.Fatalf("idle pod %s is still there", old)
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, _, res := k.run(sess, "ls -A; echo here", withProfile(sandbox.ProfileNetwork))
	if res.ExitCode != 0 || out != "here\n" {
		t.Errorf("exit %d, stdout %q, want the empty workspace's", res.ExitCode, out)
	}
	if n := strings.Join(res.Warnings, "\n"); !strings.Contains(n, "kubernetes.idle_timeout") || !strings.Contains(n, "workspace was reset") {
		t.Errorf("notes %q: want the idle note saying the workspace was reset", res.Warnings)
	}
	if _, _, res := k.run(sess, "true", withProfile(sandbox.ProfileNetwork)); strings.Contains(strings.Join(res.Warnings, "\n"), "idle_timeout") {
		t.Errorf("the next command's notes: %q", res.Warnings)
	}
	k.b.Release(sess)
	k.waitGone(sess)
}
