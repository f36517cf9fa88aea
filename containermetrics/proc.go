package containermetrics

import (
	"bufio"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// netDev is one interface's counters from /proc/PID/net/dev.
type netDev struct {
	name                                    string
	rxBytes, rxPackets, rxErrors, rxDropped uint64
	txBytes, txPackets, txErrors, txDropped uint64
}

// ignoredInterface: cadvisor leaves out loopback, veth and bridge-like
// interfaces of container engines.
func ignoredInterface(name string) bool {
	n := strings.ToLower(name)
	for _, p := range []string{"lo", "veth", "docker", "nerdctl"} {
		if strings.HasPrefix(n, p) {
			return true
		}
	}
	return false
}

// readNetDev parses a /proc/PID/net/dev file.
func readNetDev(path string) []netDev {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []netDev
	sc := bufio.NewScanner(f)
	for line := 0; sc.Scan(); line++ {
		if line < 2 { // two header lines
			continue
		}
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		name = strings.TrimSpace(name)
		fields := strings.Fields(rest)
		if len(fields) < 16 || ignoredInterface(name) {
			continue
		}
		n := func(i int) uint64 { v, _ := strconv.ParseUint(fields[i], 10, 64); return v }
		out = append(out, netDev{name: name,
			rxBytes: n(0), rxPackets: n(1), rxErrors: n(2), rxDropped: n(3),
			txBytes: n(8), txPackets: n(9), txErrors: n(10), txDropped: n(11)})
	}
	return out
}

// countFds counts the open files and sockets of pids.
func countFds(procDir string, pids []int) (fds, sockets uint64) {
	for _, pid := range pids {
		dir := filepath.Join(procDir, strconv.Itoa(pid), "fd")
		entries, err := os.ReadDir(dir)
		if err != nil {
			continue // exited
		}
		fds += uint64(len(entries))
		for _, e := range entries {
			if l, err := os.Readlink(filepath.Join(dir, e.Name())); err == nil && strings.HasPrefix(l, "socket") {
				sockets++
			}
		}
	}
	return fds, sockets
}
