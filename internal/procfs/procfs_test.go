package procfs

import (
	"golang.org/x/sys/unix"
	"os"
	"testing"
)

func TestSelf(t *testing.T) {
	sid, ok := SessionID(os.Getpid())
	want, _ := unix.Getsid(0)
	if !ok || sid != want {
		t.Errorf("SessionID = %d %v, want %d", sid, ok, want)
	}
	if st, ok := StartTime(os.Getpid()); !ok || st == 0 {
		t.Errorf("StartTime = %d %v", st, ok)
	}
	if Zombie(os.Getpid()) {
		t.Error("this process is a zombie")
	}
	if _, ok := StartTime(1 << 30); ok {
		t.Error("a pid that cannot exist has a start time")
	}
}
