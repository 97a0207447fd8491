package bwrap

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/internal/forkfds"
	"github.com/corralhq/corral/sandbox"
)

// idmapCache keeps, for each (owner, identity) pair, a user namespace whose
// only uid and gid lines map the owner's ids to the identity's: the
// idmapping of a writable directory's mount (mount_setattr(2): on-disk id
// X is shown as the id the namespace maps X to). Made once per process and
// pair, kept open for the process's life.
type idmapCache struct {
	mu sync.Mutex
	ns map[[4]int]*os.File
}

// userns returns the user namespace mapping owner to ra.
func (c *idmapCache) userns(owner, ra sandbox.RunAs) (*os.File, error) {
	key := [4]int{owner.UID, owner.GID, ra.UID, ra.GID}
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.ns[key]; f != nil {
		return f, nil
	}
	f, err := newMappedUserns(owner, ra)
	if err != nil {
		return nil, err
	}
	if c.ns == nil {
		c.ns = map[[4]int]*os.File{}
	}
	c.ns[key] = f
	return f, nil
}

// newMappedUserns makes a user namespace with the single mappings
// owner.UID -> ra.UID and owner.GID -> ra.GID, as root may write them
// (user_namespaces(7)). A process is needed to make one: cat(1), waiting
// on a pipe only corral holds, is kept while its namespace is opened (Go
// writes the maps before the child executes anything), then let go.
func newMappedUserns(owner, ra sandbox.RunAs) (*os.File, error) {
	cat, err := LocateTool("cat", "")
	if err != nil {
		return nil, fmt.Errorf("making the user namespace of an idmapped mount: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("making the user namespace of an idmapped mount: %w", err)
	}
	defer w.Close()
	cmd := exec.Command(cat)
	cmd.Env = []string{}
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: owner.UID, HostID: ra.UID, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: owner.GID, HostID: ra.GID, Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	err = forkfds.Start(cmd)
	r.Close()
	if err != nil {
		return nil, fmt.Errorf("making the user namespace of an idmapped mount: %w", err)
	}
	defer func() {
		w.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}()
	f, err := os.Open("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/ns/user")
	if err != nil {
		return nil, fmt.Errorf("making the user namespace of an idmapped mount: %w", err)
	}
	return f, nil
}

// enterHostView moves the calling thread into a new, private mount
// namespace prepared for a sandbox of plan held by ra (see runas.go): the
// directories ra cannot enter on the way to the plan's paths covered, the
// writable directories idmapped to ra. The caller's thread must be locked
// and must never run other goroutines again (it ends locked): the mount
// namespace is the thread's. Errors wrap sandbox.ErrUnavailable.
func enterHostView(plan *Plan, ra sandbox.RunAs, maps *idmapCache) error {
	// format may wrap its cause (%w): a full descriptor table (EMFILE)
	// stays in the chain, where sandbox.IsTransient finds it.
	fail := func(format string, a ...any) error {
		return fmt.Errorf("%w: preparing the mounts of a sandbox that runs as %s instead of root: %w", sandbox.ErrUnavailable, ra, fmt.Errorf(format, a...))
	}
	if err := enterPrivateMounts(); err != nil {
		return fail("%w", err)
	}
	owned := ownedSources(plan)
	for _, t := range blockedDirs(neededPaths(plan), ra, idmappedStat(owned, ra, statDir)) {
		if err := coverDir(t); err != nil {
			return vanished(err, fail)
		}
	}
	for _, w := range owned {
		if err := idmapAt(w, ra, maps); err != nil {
			return vanished(err, fail)
		}
	}
	return nil
}

// vanished returns a path that went away since the plan (ENOENT) as a
// startFailure, which Run retries with a fresh plan as it does bwrap's own
// (the host changed: a directory made and removed); any other error as
// fail says.
func vanished(err error, fail func(string, ...any) error) error {
	if errors.Is(err, unix.ENOENT) {
		return &startFailure{line: "corral: preparing the sandbox's mounts: " + err.Error()}
	}
	return fail("%w", err)
}

// statDir reports directory d's permission bits and owner.
func statDir(d string) (dirInfo, bool) {
	var st unix.Stat_t
	if unix.Stat(d, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return dirInfo{}, false
	}
	return dirInfo{Mode: st.Mode & 0o7777, UID: int(st.Uid), GID: int(st.Gid)}, true
}

// coverDir puts a tmpfs (mode 0711: entered, not listed) over t.Dir and
// binds back, from the covered directory, the entries on the way on.
func coverDir(t traversal) error {
	fd, err := unix.Open(t.Dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", t.Dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Mount("tmpfs", t.Dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0711,size=64k"); err != nil {
		return fmt.Errorf("covering %s: %w", t.Dir, err)
	}
	for _, name := range t.Entries {
		var st unix.Stat_t
		if err := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			continue // gone since the plan: bwrap says what is missing
		}
		dst := filepath.Join(t.Dir, name)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFLNK:
			buf := make([]byte, unix.PathMax)
			n, err := unix.Readlinkat(fd, name, buf)
			if err != nil {
				return fmt.Errorf("reading the symlink %s: %w", dst, err)
			}
			if err := unix.Symlink(string(buf[:n]), dst); err != nil {
				return fmt.Errorf("recreating the symlink %s: %w", dst, err)
			}
			continue
		case unix.S_IFDIR:
			if err := unix.Mkdir(dst, 0o700); err != nil {
				return fmt.Errorf("making the mount point %s: %w", dst, err)
			}
		default:
			f, err := unix.Open(dst, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
			if err != nil {
				return fmt.Errorf("making the mount point %s: %w", dst, err)
			}
			unix.Close(f)
		}
		src := "/proc/self/fd/" + strconv.Itoa(fd) + "/" + name
		if err := unix.Mount(src, dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("binding %s back: %w", dst, err)
		}
	}
	return nil
}

// idmapAt replaces the mount at w (a writable directory or file) by an
// idmapped copy of itself (open_tree(2) OPEN_TREE_CLONE, mount_setattr(2)
// MOUNT_ATTR_IDMAP, move_mount(2); Linux 5.12) whose owner's ids are ra's.
// Mounts below w keep their own ids.
func idmapAt(w string, ra sandbox.RunAs, maps *idmapCache) error {
	var st unix.Stat_t
	if err := unix.Stat(w, &st); err != nil {
		return fmt.Errorf("%s: %w", w, err)
	}
	owner := sandbox.RunAs{UID: int(st.Uid), GID: int(st.Gid)}
	if owner == ra {
		return nil
	}
	ns, err := maps.userns(owner, ra)
	if err != nil {
		return err
	}
	tree, err := unix.OpenTree(unix.AT_FDCWD, w, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_RECURSIVE)
	if err != nil {
		return fmt.Errorf("cloning the mount of %s: %w", w, err)
	}
	defer unix.Close(tree)
	attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_IDMAP, Userns_fd: uint64(ns.Fd())}
	if err := unix.MountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr); err != nil {
		var fs unix.Statfs_t
		_ = unix.Statfs(w, &fs)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.EPERM) {
			return fmt.Errorf("%s lies on a filesystem (type %#x) that cannot be idmapped (Linux 5.12+; ext4, xfs, btrfs, overlayfs, tmpfs 6.3+), so files the sandbox writes there could not be its owner's; set run_as to the owner of %s (uid %d), or run corral as that user", w, fs.Type, w, owner.UID)
		}
		return fmt.Errorf("idmapping %s: %w", w, err)
	}
	if err := unix.MoveMount(tree, "", unix.AT_FDCWD, w, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mounting the idmapped %s: %w", w, err)
	}
	return nil
}

// idmaps are the process's idmapping namespaces: kept across Backends (the
// CLI builds one per command) and sandboxes, as making one costs a process.
var idmaps idmapCache

// startAs runs launch, which starts bwrap, on a thread of its own that
// first enters a mount namespace prepared for a sandbox held by ra
// (enterHostView) and, under allowlist, the session's network namespace
// (setns(2) is per thread; the child inherits both). Go's runtime never
// starts other threads from a locked one, and the thread is never unlocked,
// so nothing else runs in those namespaces: it ends when release is called,
// which the caller does once bwrap has been reaped (the parent-death signal
// that ends bwrap with corral is tied to the thread that started it,
// prctl(2) PR_SET_PDEATHSIG). Errors of the preparation wrap
// sandbox.ErrUnavailable; launch's are returned as they are.
func (b *Backend) startAs(plan *Plan, ra sandbox.RunAs, ens *egressNS, launch func() error) (release func(), err error) {
	res := make(chan error, 1)
	done := make(chan struct{})
	onThrowawayThread(func() {
		if err := enterHostView(plan, ra, &idmaps); err != nil {
			res <- err
			return
		}
		if ens != nil {
			if err := unix.Setns(int(ens.netns.Fd()), unix.CLONE_NEWNET); err != nil {
				res <- fmt.Errorf("%w: entering the session's network namespace: %w", sandbox.ErrUnavailable, err)
				return
			}
		}
		// The thread takes ra's identity itself, so bwrap is its child
		// as ra from the start, and the limits gate acts on a process of
		// its own uid, as for an unprivileged caller: prlimit(2) on a
		// process of another uid takes CAP_SYS_RESOURCE, which root may
		// lack (a container's bounding set). Credentials are per thread in
		// the kernel; the raw calls change this thread's only (Go's
		// syscall.Setuid would change every thread's).
		if err := dropThreadCreds(ra); err != nil {
			res <- fmt.Errorf("%w: taking the identity %s: %v", sandbox.ErrUnavailable, ra, err)
			return
		}
		err := launch()
		res <- err
		if err == nil {
			<-done
		}
	})
	err = <-res
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }, err
}

// dropThreadCreds gives the calling thread (locked, never unlocked) the
// identity ra with no supplementary groups and, as its uids are then none
// of them 0, no capabilities (capabilities(7), "Effect of user ID changes
// on capabilities").
func dropThreadCreds(ra sandbox.RunAs) error {
	if _, _, e := unix.RawSyscall(unix.SYS_SETGROUPS, 0, 0, 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESGID, uintptr(ra.GID), uintptr(ra.GID), uintptr(ra.GID)); e != 0 {
		return fmt.Errorf("setresgid: %w", e)
	}
	if _, _, e := unix.RawSyscall(unix.SYS_SETRESUID, uintptr(ra.UID), uintptr(ra.UID), uintptr(ra.UID)); e != 0 {
		return fmt.Errorf("setresuid: %w", e)
	}
	return nil
}

// onThrowawayThread runs fn in a new goroutine locked to an OS thread that
// is not the process's main thread and that ends with fn (a goroutine that
// exits locked takes its thread with it; runtime.LockOSThread). The main
// thread is never used: the runtime parks it instead of ending it, and its
// namespaces and credentials are what /proc/PID shows of the whole process.
func onThrowawayThread(fn func()) {
	go func() {
		runtime.LockOSThread()
		if unix.Gettid() != unix.Getpid() {
			fn()
			return // still locked: the thread ends here
		}
		// Holding the main thread, start another goroutine: it cannot be
		// scheduled on this thread while this one holds it.
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread()
			fn()
		}()
		<-done
		runtime.UnlockOSThread()
	}()
}

// runProbe runs the probe's bwrap as a command's would start: as root, as
// an unprivileged identity (sandbox.NobodyRunAs: a root caller's commands
// never run as root) from a private mount namespace (startAs), so the
// probe says what commands meet, and a host whose mounts change does not
// fail it; otherwise as it is.
func runProbe(cmd *exec.Cmd) error {
	if os.Getuid() != 0 {
		return cmd.Run()
	}
	res := make(chan error, 1)
	onThrowawayThread(func() {
		if err := enterPrivateMounts(); err != nil {
			res <- err
			return
		}
		if err := dropThreadCreds(sandbox.NobodyRunAs); err != nil {
			res <- err
			return
		}
		// Waited for on this thread: a parent-death signal would be tied
		// to it (prctl(2)).
		res <- cmd.Run()
	})
	return <-res
}

// enterPrivateMounts moves the calling thread (locked, never unlocked) into
// a copy of its mount namespace that shares no propagation with the host:
// nothing done in it reaches the host, nor a change of the host this copy
// (mount_namespaces(7), MS_PRIVATE).
func enterPrivateMounts() error {
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
		return fmt.Errorf("unshare(CLONE_NEWNS): %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making the mount namespace private: %w", err)
	}
	return nil
}
