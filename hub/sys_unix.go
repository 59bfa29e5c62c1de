//go:build unix

package hub

import (
	"fmt"
	"os"
	"syscall"
)

// lockFile takes an exclusive flock on path (creating it), so two processes
// never write one blob at once (huggingface_hub's WeakFileLock on
// .locks/models--ORG--NAME/ETAG.lock). It returns the unlock function.
func lockFile(path string) (func(), error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking %s: %w", path, err)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// checkSpace fails when dir's file system has fewer than need bytes free
// for an unprivileged user (huggingface_hub's _check_disk_space only warns;
// we stop before writing).
func checkSpace(dir string, need int64) error {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return nil // unknown: let the writes tell
	}
	free := int64(st.Bavail) * int64(st.Bsize)
	if free >= 0 && need > free {
		return fmt.Errorf("not enough disk space in %s: the file needs %d more bytes (%s), %d (%s) are free", dir, need, FormatSize(need), free, FormatSize(free))
	}
	return nil
}
