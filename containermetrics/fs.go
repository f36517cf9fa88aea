package containermetrics

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nodekit/nodekit/internal/fsutil"
)

// partition is one filesystem the root cgroup's container_fs_* series
// are served for, keyed (in partitions) by its device label.
type partition struct {
	mountpoint   string
	fsType       string
	major, minor uint64
}

// statfsResult is what statfs(2) tells of a mounted filesystem, in bytes
// and inodes.
type statfsResult struct {
	capacity, free, inodes, inodesFree uint64
}

// statfsFunc reads one mountpoint's statfsResult; tests replace it.
type statfsFunc func(ctx context.Context, mountpoint string) (statfsResult, error)

// statfsTimeout bounds one statfs call, as cadvisor's (a hung NFS mount
// must not hang the scrape; the call is left behind).
const statfsTimeout = 2 * time.Second

func realStatfs(ctx context.Context, mountpoint string) (statfsResult, error) {
	ctx, cancel := context.WithTimeout(ctx, statfsTimeout)
	defer cancel()
	type result struct {
		r   statfsResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		var s unix.Statfs_t
		if err := unix.Statfs(mountpoint, &s); err != nil {
			done <- result{err: err}
			return
		}
		bs := uint64(s.Frsize) //nolint:gosec // a block size is positive
		done <- result{r: statfsResult{capacity: bs * s.Blocks, free: bs * s.Bfree, inodes: s.Files, inodesFree: s.Ffree}}
	}()
	select {
	case <-ctx.Done():
		return statfsResult{}, fmt.Errorf("statfs %s: %w", mountpoint, ctx.Err())
	case res := <-done:
		return res.r, res.err
	}
}

// fsKind is which of cadvisor's filesystem plugins (as kubelet installs
// them: vfs, tmpfs, overlay, nfs, btrfs, zfs) handles a filesystem type;
// "" for none (proc, cgroup, nsfs, ... are not served).
func fsKind(fsType string) string {
	switch {
	case fsType == "tmpfs", fsType == "overlay", fsType == "btrfs", fsType == "zfs":
		return fsType
	case strings.HasPrefix(fsType, "nfs"):
		return "nfs"
	case strings.HasPrefix(fsType, "ext"):
		return "vfs"
	}
	switch fsType {
	case "xfs", "squashfs", "f2fs", "jfs", "reiserfs", "hfs", "hfsplus",
		"ntfs", "vfat", "fat", "msdos", "exfat", "udf", "iso9660":
		return "vfs"
	}
	return ""
}

// mountEntry is the part of a /proc/self/mountinfo line used here.
type mountEntry struct {
	major, minor       uint64
	mountpoint, fsType string
	source             string
}

// readMountinfo parses a mountinfo file: "ID parent major:minor root
// mountpoint options [optional fields] - fstype source superoptions".
func readMountinfo(path string) ([]mountEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []mountEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		fields, tail := strings.Fields(pre), strings.Fields(post)
		if !ok || len(fields) < 5 || len(tail) < 2 {
			continue
		}
		maj, min, ok := strings.Cut(fields[2], ":")
		if !ok {
			continue
		}
		e := mountEntry{mountpoint: fsutil.UnescapeMountPath(fields[4]), fsType: tail[0], source: fsutil.UnescapeMountPath(tail[1])}
		e.major, _ = strconv.ParseUint(maj, 10, 64)
		e.minor, _ = strconv.ParseUint(min, 10, 64)
		out = append(out, e)
	}
	return out, sc.Err()
}

// partitionsOf picks the filesystems cadvisor lists from the mount table,
// in its order: a filesystem type some plugin handles; a source already
// seen is a bind mount and left out (but for tmpfs); a tmpfs is labelled
// by its mountpoint, an overlay by "overlay_MAJOR-MINOR", the rest by
// their source (the block device, e.g. /dev/vda). Cadvisor renumbers a
// btrfs mount of major 0 from the mountpoint's device; that only matters
// for finding its /proc/diskstats line by number, not done here.
func partitionsOf(mounts []mountEntry) map[string]partition {
	out := map[string]partition{}
	for _, m := range mounts {
		kind := fsKind(m.fsType)
		if kind == "" {
			continue
		}
		if _, seen := out[m.source]; seen && kind != "tmpfs" {
			continue
		}
		label := m.source
		switch kind {
		case "tmpfs":
			label = m.mountpoint
		case "overlay":
			label = fmt.Sprintf("%s_%d-%d", m.source, m.major, m.minor)
		}
		out[label] = partition{mountpoint: m.mountpoint, fsType: m.fsType, major: m.major, minor: m.minor}
	}
	return out
}

// diskStats is one /proc/diskstats line's counters (times in
// milliseconds, as the kernel counts them).
type diskStats struct {
	major, minor                                             uint64
	readsCompleted, readsMerged, sectorsRead, readTime       uint64
	writesCompleted, writesMerged, sectorsWritten, writeTime uint64
	ioInProgress, ioTime, weightedIoTime                     uint64
}

// diskName: cadvisor reads the diskstats of sd*, vd*, xvd* disks and
// partitions and device-mapper devices only.
var diskName = regexp.MustCompile(`^(?:(?:s|v|xv)d[a-z]+\d*|dm-\d+)$`)

// readDiskstats reads /proc/diskstats, by device path (/dev/NAME).
func readDiskstats(path string) (map[string]diskStats, error) {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		return nil, err
	}
	defer f.Close()
	out := map[string]diskStats{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		w := strings.Fields(sc.Text())
		if len(w) < 14 || !diskName.MatchString(w[2]) {
			continue
		}
		n := make([]uint64, 14)
		bad := false
		for i := range n {
			if i == 2 {
				continue
			}
			if n[i], err = strconv.ParseUint(w[i], 10, 64); err != nil {
				bad = true
			}
		}
		if bad {
			continue
		}
		out["/dev/"+w[2]] = diskStats{major: n[0], minor: n[1],
			readsCompleted: n[3], readsMerged: n[4], sectorsRead: n[5], readTime: n[6],
			writesCompleted: n[7], writesMerged: n[8], sectorsWritten: n[9], writeTime: n[10],
			ioInProgress: n[11], ioTime: n[12], weightedIoTime: n[13]}
	}
	return out, sc.Err()
}

// fsStat is one filesystem's usage and its disk's I/O counters, as
// cadvisor's FsStats.
type fsStat struct {
	device string
	statfsResult
	disk diskStats
}

// readFilesystems statfs()s every partition and finds its disk's
// counters: by device path, else by major:minor (a tmpfs or overlay has
// none: zeros, as cadvisor serves them). A partition statfs fails for
// (unmounted since, timed out) is left out.
func readFilesystems(ctx context.Context, parts map[string]partition, statfs statfsFunc, diskstatsPath string) []fsStat {
	if len(parts) == 0 {
		return nil
	}
	disks, _ := readDiskstats(diskstatsPath) // unreadable: usage without I/O counters
	var out []fsStat
	for device, p := range parts {
		st, err := statfs(ctx, p.mountpoint)
		if err != nil {
			continue
		}
		fs := fsStat{device: device, statfsResult: st}
		if d, ok := disks[device]; ok {
			fs.disk = d
		} else {
			for _, d := range disks {
				if d.major == p.major && d.minor == p.minor {
					fs.disk = d
					break
				}
			}
		}
		out = append(out, fs)
	}
	return out
}

// msAsCadvisorSeconds converts a diskstats time (milliseconds) as
// cadvisor does: it divides the raw count by 1e9 (as if nanoseconds), so
// its *_seconds_total series of a filesystem are 1/1e6 of the seconds
// spent. Served alike, so that the numbers agree with kubelet's.
func msAsCadvisorSeconds(v uint64) float64 { return float64(v) / float64(time.Second) }

// fsSeries are cadvisor's DiskUsageMetrics and the filesystem part of its
// DiskIOMetrics: one sample per filesystem for the root cgroup, after
// (as cadvisor) one per device of the cgroup's own blkio counters, for
// every cgroup that did block I/O (blkio.go).
var fsSeries = func() []series {
	var out []series
	for _, f := range []struct {
		name, help string
		counter    bool
		get        func(*fsStat) float64
	}{
		{"container_fs_inodes_free", "Number of available Inodes", false, func(f *fsStat) float64 { return float64(f.inodesFree) }},
		{"container_fs_inodes_total", "Number of Inodes", false, func(f *fsStat) float64 { return float64(f.inodes) }},
		{"container_fs_limit_bytes", "Number of bytes that can be consumed by the container on this filesystem.", false,
			func(f *fsStat) float64 { return float64(f.capacity) }},
		{"container_fs_usage_bytes", "Number of bytes that are consumed by the container on this filesystem.", false,
			func(f *fsStat) float64 { return float64(sub(f.capacity, f.free)) }},
		{"container_fs_reads_total", "Cumulative count of reads completed", true, func(f *fsStat) float64 { return float64(f.disk.readsCompleted) }},
		{"container_fs_sector_reads_total", "Cumulative count of sector reads completed", true, func(f *fsStat) float64 { return float64(f.disk.sectorsRead) }},
		{"container_fs_reads_merged_total", "Cumulative count of reads merged", true, func(f *fsStat) float64 { return float64(f.disk.readsMerged) }},
		{"container_fs_read_seconds_total", "Cumulative count of seconds spent reading", true, func(f *fsStat) float64 { return msAsCadvisorSeconds(f.disk.readTime) }},
		{"container_fs_writes_total", "Cumulative count of writes completed", true, func(f *fsStat) float64 { return float64(f.disk.writesCompleted) }},
		{"container_fs_sector_writes_total", "Cumulative count of sector writes completed", true, func(f *fsStat) float64 { return float64(f.disk.sectorsWritten) }},
		{"container_fs_writes_merged_total", "Cumulative count of writes merged", true, func(f *fsStat) float64 { return float64(f.disk.writesMerged) }},
		{"container_fs_write_seconds_total", "Cumulative count of seconds spent writing", true, func(f *fsStat) float64 { return msAsCadvisorSeconds(f.disk.writeTime) }},
		{"container_fs_io_current", "Number of I/Os currently in progress", false, func(f *fsStat) float64 { return float64(f.disk.ioInProgress) }},
		{"container_fs_io_time_seconds_total", "Cumulative count of seconds spent doing I/Os", true, func(f *fsStat) float64 { return msAsCadvisorSeconds(f.disk.ioTime) }},
		{"container_fs_io_time_weighted_seconds_total", "Cumulative weighted I/O time in seconds", true,
			func(f *fsStat) float64 { return msAsCadvisorSeconds(f.disk.weightedIoTime) }},
	} {
		disks, op, conv := blkioOf(f.name)
		out = append(out, series{name: f.name, help: f.help, counter: f.counter, extra: []string{"device"},
			values: func(s *cgroupStats) []sample {
				var v []sample
				if disks != nil {
					v = blkioSamples(disks(&s.blkio), op, conv)
				}
				// A root whose blkio counters name a disk that is also a
				// filesystem's device would repeat a label set, which
				// the registry rejects; kubelet's handler then serves the
				// first sample (the blkio one), and so is this.
				seen := len(v)
				for i := range s.fs {
					if !slices.ContainsFunc(v[:seen], func(x sample) bool { return x.labels[0] == s.fs[i].device }) {
						v = append(v, sample{v: f.get(&s.fs[i]), labels: []string{s.fs[i].device}})
					}
				}
				return v
			}})
	}
	return out
}()

// loadPartitions reads the mount table once, as cadvisor lists the
// partitions when kubelet starts; unreadable, no filesystem is served.
func loadPartitions(procDir string) map[string]partition {
	mounts, err := readMountinfo(filepath.Join(procDir, "self", "mountinfo"))
	if err != nil {
		return nil
	}
	return partitionsOf(mounts)
}
