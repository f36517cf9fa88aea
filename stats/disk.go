package stats

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"k8s.io/utils/clock"
)

// DiskUsage is what a directory tree occupies: bytes allocated on disk
// (st_blocks) and inodes, each hard-linked inode counted once.
type DiskUsage struct {
	Bytes, Inodes uint64
}

// Du walks the tree at path without crossing into other filesystems. A
// missing path uses nothing. Entries that vanish during the walk are
// skipped.
func Du(path string) (DiskUsage, error) {
	var root syscall.Stat_t
	if err := syscall.Lstat(path, &root); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return DiskUsage{}, nil
		}
		return DiskUsage{}, err
	}
	var u DiskUsage
	seen := map[uint64]bool{}
	err := filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return err
		}
		if st.Dev != root.Dev {
			return fs.SkipDir
		}
		if seen[st.Ino] {
			return nil
		}
		seen[st.Ino] = true
		u.Inodes++
		u.Bytes += uint64(st.Blocks) * 512
		return nil
	})
	return u, err
}

// duCache remembers Du results for a while: walking every emptyDir and
// log directory on each summary would cost too much.
type duCache struct {
	clock  clock.PassiveClock
	period time.Duration

	mu sync.Mutex
	m  map[string]duEntry
}

type duEntry struct {
	at  time.Time
	use DiskUsage
}

func (c *duCache) get(path string) (DiskUsage, error) {
	now := c.clock.Now()
	c.mu.Lock()
	e, ok := c.m[path]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < c.period {
		return e.use, nil
	}
	use, err := Du(path)
	if err != nil {
		return DiskUsage{}, err
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = map[string]duEntry{}
	}
	c.m[path] = duEntry{at: now, use: use}
	c.mu.Unlock()
	return use, nil
}

// prune forgets entries older than twice the period.
func (c *duCache) prune() {
	now := c.clock.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, e := range c.m {
		if now.Sub(e.at) > 2*c.period {
			delete(c.m, p)
		}
	}
}
