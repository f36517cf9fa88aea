package cgroupmgr

import (
	"fmt"
	"path"
	"strings"
)

// CgroupName is a cgroup as a list of components, independent of the
// driver: {"kubepods", "burstable", "pod1234"}. The empty name is the root.
// Components hold neither "/" nor "_": the systemd driver turns "-" into
// "_", and forbidding "_" keeps that mapping reversible.
type CgroupName []string

// NewCgroupName returns base with components appended, or an error naming
// the first component that holds "/" or "_" or is empty.
func NewCgroupName(base CgroupName, components ...string) (CgroupName, error) {
	for _, c := range components {
		if c == "" || strings.ContainsAny(c, "/_") {
			return nil, fmt.Errorf("cgroupmgr: invalid cgroup name component %q: must be non-empty and hold neither \"/\" nor \"_\"", c)
		}
	}
	out := make(CgroupName, 0, len(base)+len(components))
	return append(append(out, base...), components...), nil
}

// ToCgroupfs is the name as the cgroupfs driver spells it, and the literal
// path below every hierarchy's mount point: "/kubepods/burstable/pod1234".
func (n CgroupName) ToCgroupfs() string {
	return "/" + path.Join(n...)
}

// ToSystemd is the name as the systemd driver spells it, expanded to the
// path of nested slices systemd creates below the mount point:
// {"kubepods", "burstable", "pod12-34"} becomes
// "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice".
// Each slice's unit name repeats its parents' names joined by "-", so a "-"
// inside a component is written as "_".
func (n CgroupName) ToSystemd() string {
	if len(n) == 0 || (len(n) == 1 && n[0] == "") {
		return "/"
	}
	var b strings.Builder
	prefix := ""
	for _, c := range n {
		unit := strings.ReplaceAll(c, "-", "_")
		if prefix != "" {
			unit = prefix + "-" + unit
		}
		prefix = unit
		b.WriteString("/")
		b.WriteString(unit)
		b.WriteString(systemdSliceSuffix)
	}
	return b.String()
}

// ParseCgroupfs turns a cgroupfs path ("/kubepods/burstable") back into a
// name; "/" and "" are the root.
func ParseCgroupfs(literal string) CgroupName {
	trimmed := strings.Trim(path.Clean("/"+literal), "/")
	if trimmed == "" {
		return CgroupName{}
	}
	return CgroupName(strings.Split(trimmed, "/"))
}

// ParseSystemd turns a systemd slice (a unit name or its expanded path,
// "kubepods-burstable-pod12_34.slice") back into a name, undoing the "-"
// to "_" mapping of ToSystemd.
func ParseSystemd(literal string) CgroupName {
	unit := strings.TrimSuffix(path.Base(literal), systemdSliceSuffix)
	if unit == "" || unit == "/" || unit == "." || unit == "-" {
		return CgroupName{}
	}
	parts := strings.Split(unit, "-")
	out := make(CgroupName, len(parts))
	for i, p := range parts {
		out[i] = strings.ReplaceAll(p, "_", "-")
	}
	return out
}

// Driver names, as KubeletConfiguration's cgroupDriver.
const (
	DriverCgroupfs = "cgroupfs"
	DriverSystemd  = "systemd"
)

const systemdSliceSuffix = ".slice"

// literalName is name as the driver called driver spells it.
func literalName(driver string, name CgroupName) string {
	if driver == DriverSystemd {
		return name.ToSystemd()
	}
	return name.ToCgroupfs()
}
