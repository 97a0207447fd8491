package bwrap

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// The status is complete once bwrap is gone, however long another holder
// of the pipe's write end (a child a concurrent start has forked but not
// yet executed) keeps it open.
func TestStatusCompleteWithStrayWriter(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	stray, err := os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", w.Fd()), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer stray.Close()
	pidC := make(chan int, 1)
	stc := make(chan status, 1)
	go func() { stc <- readStatus(r, pidC) }()
	w.Write([]byte(`{ "child-pid": 42, "cgroup-namespace": 1, "ipc-namespace": 2 }` + "\n"))
	if p := <-pidC; p != 42 {
		t.Fatalf("child-pid %d", p)
	}
	w.Write([]byte(`{ "exit-code": 3 }` + "\n"))
	w.Close() // bwrap exits; the stray copy stays open
	r.SetReadDeadline(time.Now())
	select {
	case st := <-stc:
		if st.childPid != 42 || st.exitCode == nil || *st.exitCode != 3 {
			t.Errorf("status %+v", st)
		}
	case <-time.After(time.Minute): // only a hang ends here
		t.Fatal("readStatus waited for the stray writer")
	}
}
