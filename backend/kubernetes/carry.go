package kubernetes

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/corralhq/corral/transfer"
)

// A session whose settings or profile change gets a new pod (its spec
// hash is part of its scope key), and the workspace is that pod's own
// volume: carryWorkspace copies the old pod's workspace into the new one
// before the old pod goes, so nothing the session's commands made is
// dropped; where it cannot, the new pod's first result says that the
// workspace was reset and why (carryNote).
//
// The archive passes through corral's host but lands in the session's
// own sandbox, never on the host's disk as files: corral's memory and
// disk are bounded (CopyOut's limit, the unlinked spool) and every entry
// is checked as transfer.Unpack checks it, but handback's policy (what a
// copy to the host holds back: git hooks, shell start-up files...) is
// not applied, since the session's commands wrote those files there and
// may write them again in the new pod; holding them back would only drop
// them.

// carryTimeout bounds one carry (the copy out and the copy in).
const carryTimeout = 10 * time.Minute

// carryMargin is the host's free space a carry's spool leaves: 5% of
// the file system, at most this.
const carryMargin = 64 << 20

// carryWorkspace copies the workspace of from (the session's pod of its
// old settings, still running) into to (its new pod, ready): a tar of it
// out of from (inside.ModeTar, CopyOut: hash-checked, bounded by the
// host's free space) into an unlinked spool file on the host, every
// entry checked there as any archive leaving a sandbox (checkCarried:
// transfer.CheckEntry's names and kinds), then unpacked in to
// (inside.ModeUntar, CopyIn: transfer.Unpack's checks again, beneath the
// workspace). It returns "" when the workspace was carried, else the note
// for to's first result saying that it was reset and why. from is not
// removed here (the caller does, after). The carry outlives ctx's
// cancellation (bounded by carryTimeout).
func (e *Engine) carryWorkspace(ctx context.Context, from, to *podRef) string {
	// Not the command's to cancel: the old pod goes after this, so a
	// carry given up would drop the workspace.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), carryTimeout)
	defer cancel()
	select {
	case <-from.ready:
	case <-ctx.Done():
		return carryNote(from.name, fmt.Sprintf("did not become ready in time (%v)", ctx.Err()))
	}
	if from.err != nil {
		// It never ran a command: there was nothing in it to carry.
		return ""
	}
	t0 := time.Now()
	f, err := carrySpool()
	if err != nil {
		return carryNote(from.name, fmt.Sprintf("could not be read: no spool file on corral's host: %v", err))
	}
	defer f.Close()
	limit, err := spoolBound(f)
	if err != nil {
		return carryNote(from.name, fmt.Sprintf("could not be read: %v", err))
	}
	src := &PodTarget{Name: from.name, Namespace: from.namespace, Workspace: from.workspace, cl: from.cl}
	if err := e.CopyOut(ctx, src, ".", "", f, limit); err != nil {
		if errors.Is(err, transfer.ErrTooLarge) {
			return carryNote(from.name, fmt.Sprintf("holds more than corral's host can spool (%d bytes free for it)", limit))
		}
		return carryNote(from.name, fmt.Sprintf("could not be read (%v)", err))
	}
	files, why, err := checkCarried(f)
	if err != nil {
		return carryNote(from.name, fmt.Sprintf("sent an archive corral could not read (%v)", err))
	}
	if why != "" {
		return carryNote(from.name, "sent an archive corral refused: "+why)
	}
	dst := &PodTarget{Name: to.name, Namespace: to.namespace, Workspace: to.workspace, cl: to.cl}
	// A read-only workspace (restricted) is written through the helper
	// container, the only one mounting it writable (helperMounts), as its
	// uid: the commands read it through the pod's group (fsGroup).
	container, o := ContainerName, transfer.Options{}
	if to.readOnly {
		container, o.GroupReads = HelperContainerName, true
	}
	st, err := e.copyIn(ctx, dst, container, f, o)
	if err != nil {
		return carryNote(from.name, fmt.Sprintf("could not be copied into the new pod %s (%v)", to.name, err))
	}
	e.log.Info("kubernetes.workspace.carried", "from", from.name, "to", to.name, "namespace", to.namespace,
		"files", st.Files, "bytes", st.Bytes, "entries", files, "duration", time.Since(t0).String())
	return ""
}

// carryNote is the note on the first result in a session's new pod when
// its old pod's workspace (named pod) could not be carried over (pure):
// why completes "the old pod ...".
func carryNote(pod, why string) string {
	return fmt.Sprintf("this session's settings changed, so it runs in a new pod; the workspace was reset: the files of the old pod %s (its workspace volume) could not be carried over, because the old pod %s; /tmp and the background processes were lost too; the session's working directory and exported variables carry over", pod, why)
}

// checkCarried reads the spooled archive f from its start and returns
// how many entries it holds and why the first refused one is refused
// (transfer.CheckEntry: an absolute or ".." name, a kind other than file,
// directory or symlink), "" when none is; err when it is no tar archive.
func checkCarried(f *os.File) (entries int, why string, err error) {
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return 0, "", err
	}
	tr := tar.NewReader(f)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			return entries, "", nil
		}
		if err != nil {
			return entries, "", err
		}
		entries++
		if r := transfer.CheckEntry(hdr.Name, hdr.Typeflag); r != "" {
			return entries, fmt.Sprintf("%q is %s", hdr.Name, r), nil
		}
	}
}

// carrySpool returns an unlinked read-write file in the temporary
// directory (O_TMPFILE where the file system has it).
func carrySpool() (*os.File, error) {
	dir := os.TempDir()
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	if err == nil {
		return os.NewFile(uintptr(fd), filepath.Join(dir, "corral-carry.tar (unlinked)")), nil
	}
	f, err := os.CreateTemp(dir, "corral-carry-*.tar")
	if err != nil {
		return nil, err
	}
	_ = os.Remove(f.Name())
	return f, nil
}

// spoolBound is how many bytes the spool f may take: its file system's
// free space (for corral's uid) less a margin (carryMargin).
func spoolBound(f *os.File) (int64, error) {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(int(f.Fd()), &fs); err != nil {
		return 0, fmt.Errorf("measuring the free space of the spool: %w", err)
	}
	bsize := int64(fs.Bsize)
	margin := min(int64(fs.Blocks)*bsize/20, carryMargin)
	return max(int64(fs.Bavail)*bsize-margin, 1), nil
}
