package bwrap

import (
	"os"
	"testing"
)

// fakeLayerHolder is a layerHolder of hs whose holder is cat(1) reading
// the life pipe and whose namespace descriptors are opens of this
// process's own, with refs references taken.
func fakeLayerHolder(t *testing.T, hs *layerHolders, key string, refs int) *layerHolder {
	t.Helper()
	cmd, lifeW := lifelineProcess(t)
	h := &layerHolder{cmd: cmd, life: lifeW, done: make(chan struct{}), hs: hs, refs: refs}
	go func() {
		_ = cmd.Wait()
		close(h.done)
	}()
	for _, o := range []struct {
		dst  **os.File
		path string
	}{{&h.userns, "/proc/self/ns/user"}, {&h.mntns, "/proc/self/ns/mnt"}, {&h.netns, "/proc/self/ns/net"}, {&h.root, "/"}} {
		f, err := os.Open(o.path)
		if err != nil {
			t.Fatal(err)
		}
		*o.dst = f
	}
	hs.mu.Lock()
	if hs.m == nil {
		hs.m = map[string]*layerHolder{}
	}
	hs.m[key] = h
	hs.mu.Unlock()
	t.Cleanup(func() {
		select {
		case <-h.done:
		default:
			h.close()
		}
	})
	return h
}

// TestLayerHoldersCloseAllLeavesHeld: Backend.Close ends the holders no
// command uses at once, and one that a command is starting with at that
// command's release, not under it.
func TestLayerHoldersCloseAllLeavesHeld(t *testing.T) {
	var hs layerHolders
	busy := fakeLayerHolder(t, &hs, "busy", 1)
	idle := fakeLayerHolder(t, &hs, "idle", 0)
	hs.closeAll()
	if len(hs.m) != 0 {
		t.Errorf("closeAll left %d holders in the map", len(hs.m))
	}
	if isOpenFile(idle.userns) || idle.alive() {
		t.Error("an idle holder was not closed")
	}
	for _, f := range []*os.File{busy.userns, busy.mntns, busy.netns, busy.root} {
		if !isOpenFile(f) {
			t.Fatalf("%s of a holder a command holds was closed under it", f.Name())
		}
	}
	busy.release()
	<-busy.done
	for _, f := range []*os.File{busy.userns, busy.mntns, busy.netns, busy.root} {
		if isOpenFile(f) {
			t.Errorf("%s stayed open after the last release", f.Name())
		}
	}
}
