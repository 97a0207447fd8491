package bwrap

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// pidsCgroup is a cgroup of the pids controller (cgroup v2, or the v1 pids
// hierarchy) that caps how many tasks one sandbox may have. corral uses it
// where RLIMIT_NPROC does not hold: processes of uid 0 are exempt from it
// (kernel/fork.c: copy_process checks `real_cred->user != INIT_USER`).
type pidsCgroup struct {
	dir string
}

// pidsRoot finds where corral may create pids cgroups: "<v2 mount>/corral"
// when the unified hierarchy has the pids controller, else "<v1 pids
// mount><own cgroup>/corral". It returns "" when neither is writable.
func pidsRoot() string {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	var v1, v2 string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// mountinfo(5): ... mount-point ... - fstype source super-options
		left, right, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		lf, rf := strings.Fields(left), strings.Fields(right)
		if len(lf) < 5 || len(rf) < 3 {
			continue
		}
		mnt := lf[4]
		switch rf[0] {
		case "cgroup2":
			if v2 == "" {
				v2 = mnt
			}
		case "cgroup":
			for _, o := range strings.Split(rf[2], ",") {
				if o == "pids" {
					v1 = mnt
				}
			}
		}
	}
	if v2 != "" {
		if b, err := os.ReadFile(filepath.Join(v2, "cgroup.controllers")); err == nil && hasWord(string(b), "pids") {
			root := filepath.Join(v2, "corral")
			if ensureCgroupDir(root) == nil {
				// Let children use the pids controller (cgroup v2 "no
				// internal processes": corral's directory holds none).
				_ = os.WriteFile(filepath.Join(v2, "cgroup.subtree_control"), []byte("+pids"), 0)
				_ = os.WriteFile(filepath.Join(root, "cgroup.subtree_control"), []byte("+pids"), 0)
				if b, err := os.ReadFile(filepath.Join(root, "cgroup.subtree_control")); err == nil && hasWord(string(b), "pids") {
					return root
				}
			}
		}
	}
	if v1 != "" {
		own := "/"
		if b, err := os.ReadFile("/proc/self/cgroup"); err == nil {
			for _, line := range strings.Split(string(b), "\n") {
				parts := strings.SplitN(line, ":", 3)
				if len(parts) == 3 && hasWordSep(parts[1], "pids", ",") {
					own = parts[2]
				}
			}
		}
		root := filepath.Join(v1, own, "corral")
		if ensureCgroupDir(root) == nil {
			return root
		}
	}
	return ""
}

func ensureCgroupDir(d string) error {
	if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return err
	}
	// Writable? (a read-only cgroupfs in a container lets Mkdir fail above,
	// but an existing directory may still be foreign.)
	return unixAccessW(d)
}

func hasWord(s, w string) bool { return hasWordSep(s, w, " ") }

func hasWordSep(s, w, sep string) bool {
	for _, f := range strings.Split(strings.TrimSpace(s), sep) {
		if strings.TrimSpace(f) == w {
			return true
		}
	}
	return false
}

// newPidsCgroup creates a fresh cgroup under root with pids.max = max.
func newPidsCgroup(root string, max int) (*pidsCgroup, error) {
	var b [6]byte
	_, _ = rand.Read(b[:])
	dir := filepath.Join(root, "sbx-"+hex.EncodeToString(b[:]))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("creating pids cgroup: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(max)), 0); err != nil {
		_ = os.Remove(dir)
		return nil, fmt.Errorf("setting pids.max: %w", err)
	}
	return &pidsCgroup{dir: dir}, nil
}

// add moves process pid (all its threads) into the cgroup.
func (c *pidsCgroup) add(pid int) error {
	if err := os.WriteFile(filepath.Join(c.dir, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		return fmt.Errorf("moving bwrap into the pids cgroup: %w", err)
	}
	return nil
}

// hitMax reports whether a fork was refused because of pids.max
// (the "max" counter of pids.events, in both cgroup versions).
func (c *pidsCgroup) hitMax() bool {
	b, err := os.ReadFile(filepath.Join(c.dir, "pids.events"))
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "max" && f[1] != "0" {
			return true
		}
	}
	return false
}

// remove deletes the cgroup once its last task is gone; tasks of a killed
// pid namespace can take a moment to be reaped.
func (c *pidsCgroup) remove() {
	for i := 0; i < 50; i++ {
		if err := os.Remove(c.dir); err == nil || errors.Is(err, os.ErrNotExist) {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sweepCgroups removes the sandbox cgroups under root (sbx-*) that corral
// processes left: removal waits for the kernel to reap a sandbox's tasks,
// and a process that exits first (corral run) leaves the empty cgroup
// behind. rmdir(2) removes only a cgroup without tasks; one younger than a
// minute is left alone, as another corral may be about to move its bwrap
// in. It returns how many it removed.
func sweepCgroups(root string) int {
	ents, err := os.ReadDir(root)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range ents {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), "sbx-") {
			continue
		}
		if fi, err := e.Info(); err != nil || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		if os.Remove(filepath.Join(root, e.Name())) == nil {
			n++
		}
	}
	return n
}

// killAll sends SIGKILL to every task in the cgroup.
func (c *pidsCgroup) killAll() {
	b, err := os.ReadFile(filepath.Join(c.dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}
