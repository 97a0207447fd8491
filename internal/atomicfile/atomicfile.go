// Package atomicfile writes files so that a reader sees the old content or
// the new, never a part: the data goes to a temporary file in the same
// directory, which is then renamed over the target (rename(2) is atomic
// within a filesystem).
package atomicfile

import (
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// Write replaces path with data. The file gets mode perm, or, when keepMode
// is set and path exists, its current permission bits. A directory at path
// gives syscall.EISDIR. The temporary file is removed on every failure.
// The data is on disk (fsync(2)) before the rename, so a crash of the
// machine leaves the old content or the new.
func Write(path string, data []byte, perm fs.FileMode, keepMode bool) error {
	return write(path, data, perm, keepMode, true)
}

// WriteUnsynced is Write without the fsync(2) before the rename: readers
// still see the old content or the new, never a part, while the machine
// runs; after a crash of the machine (power lost, kernel panic) the file
// may also be empty or hold zeros, as ext4 with noauto_da_alloc and xfs
// may commit the rename before the data (ext4(5) auto_da_alloc). For
// files rewritten often on a command's path whose reader takes such
// content as lost and says so (a session's state.json: session's
// loadState moves it aside with a note), where an fsync costs a journal
// commit, milliseconds on a busy disk.
func WriteUnsynced(path string, data []byte, perm fs.FileMode) error {
	return write(path, data, perm, false, false)
}

func write(path string, data []byte, perm fs.FileMode, keepMode, sync bool) error {
	mode := perm
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return syscall.EISDIR
		}
		if keepMode {
			mode = st.Mode().Perm()
		}
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return err
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	if err := f.Chmod(mode); err != nil {
		return fail(err)
	}
	// On disk before the rename: a crash then leaves the old file or the
	// new one, never an empty one (ext4 and xfs may commit the rename
	// first).
	if sync {
		if err := f.Sync(); err != nil {
			return fail(err)
		}
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}
