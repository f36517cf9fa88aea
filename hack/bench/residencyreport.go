package main

import (
	"cmp"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// residencyCommand, as the bench's first argument, prints where a running
// Go process's resident binary pages are:
//
//	go run ./hack/bench residency --pid PID [--top 25]
const residencyCommand = "residency"

func residencyMain(args []string) int {
	fs := flag.NewFlagSet(residencyCommand, flag.ContinueOnError)
	pid := fs.Int("pid", 0, "process to read (needs the pagemap of /proc/PID: root, or the process's owner)")
	bin := fs.String("bin", "", "instead of --pid: a Go binary, to list the sizes of everything it would map")
	top := fs.Int("top", 25, "packages and modules to list")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if (*pid <= 0) == (*bin == "") {
		fmt.Fprintln(os.Stderr, "residency: want one of --pid and --bin")
		return 2
	}
	if *bin != "" {
		*pid = 0
	}
	if err := printResidency(os.Stdout, *pid, *bin, *top); err != nil {
		fmt.Fprintln(os.Stderr, "residency:", err)
		return 1
	}
	return 0
}

// printResidency reads pid's binary (/proc/PID/exe) and prints its
// resident pages by section, by module and by package, with the
// process's anonymous RSS for scale.
// With pid 0 it prints the sizes of bin's loaded sections instead.
func printResidency(w io.Writer, pid int, bin string, top int) error {
	exe := bin
	if pid != 0 {
		var err error
		if exe, err = os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil {
			return err
		}
		bin = fmt.Sprintf("/proc/%d/exe", pid)
	}
	l, err := loadLayout(bin)
	if err != nil {
		return err
	}
	r, err := measureResidency(pid, l)
	if err != nil {
		return err
	}
	kib := func(n uint64) string { return fmt.Sprintf("%.0f", float64(n)/1024) }
	if pid != 0 {
		fmt.Fprintf(w, "Resident pages of %s (pid %d): RSS %d KiB, of it anonymous %d KiB, file %d KiB\n\n",
			exe, pid, rssKB(pid), anonRSSKB(pid), statusKB(pid, "RssFile"))
	} else {
		fmt.Fprintf(w, "Sizes of what %s maps (every page counted)\n\n", exe)
	}
	fmt.Fprintln(w, "| section | resident KiB | size KiB |")
	fmt.Fprintln(w, "|---|--:|--:|")
	var sum uint64
	for _, s := range l.sections {
		if r.total[s.owner] >= 64<<10 || r.bySection[s.owner] >= 64<<10 {
			fmt.Fprintf(w, "| %s | %s | %s |\n", s.owner, kib(r.bySection[s.owner]), kib(r.total[s.owner]))
		}
		sum += r.bySection[s.owner]
	}
	fmt.Fprintf(w, "| all sections | %s | |\n\n", kib(sum))

	kinds := []string{"text", "types", "pclntab", "funcdata", "data"}
	byMod := map[string]map[string]uint64{}
	for pkg, k := range r.byPkgKind {
		m := l.moduleOf(pkg)
		if byMod[m] == nil {
			byMod[m] = map[string]uint64{}
		}
		for kind, n := range k {
			byMod[m][kind] += n
		}
	}
	tableByKind(w, "module", byMod, kinds, top)
	tableByKind(w, "package", r.byPkgKind, kinds, top)
	return nil
}

// tableByKind prints the top rows of m (name -> kind -> bytes) by total,
// one column per kind and one for the rest.
func tableByKind(w io.Writer, what string, m map[string]map[string]uint64, kinds []string, top int) {
	type entry struct {
		name  string
		total uint64
	}
	var es []entry
	var all uint64
	for name, k := range m {
		var t uint64
		for _, n := range k {
			t += n
		}
		es = append(es, entry{name, t})
		all += t
	}
	slices.SortFunc(es, func(a, b entry) int { return cmp.Or(cmp.Compare(b.total, a.total), strings.Compare(a.name, b.name)) })
	fmt.Fprintf(w, "| %s (top %d of %d) | resident KiB | %s | other |\n", what, min(top, len(es)), len(es), strings.Join(kinds, " | "))
	fmt.Fprintln(w, "|---|--:|"+strings.Repeat("--:|", len(kinds)+1))
	for _, e := range es[:min(top, len(es))] {
		row := []string{e.name, fmt.Sprintf("%.0f", float64(e.total)/1024)}
		rest := e.total
		for _, k := range kinds {
			row = append(row, fmt.Sprintf("%.0f", float64(m[e.name][k])/1024))
			rest -= m[e.name][k]
		}
		row = append(row, fmt.Sprintf("%.0f", float64(rest)/1024))
		fmt.Fprintln(w, "| "+strings.Join(row, " | ")+" |")
	}
	fmt.Fprintf(w, "| all | %.0f |\n\n", float64(all)/1024)
}
