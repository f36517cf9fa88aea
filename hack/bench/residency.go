package main

import (
	"cmp"
	"debug/buildinfo"
	"debug/dwarf"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// Residency of a Go binary's pages in a running process: which of its
// text, read-only data, pclntab and data pages are resident (the present
// bit of /proc/PID/pagemap, readable without privilege), charged to the
// Go package whose function, type descriptor, symbol or pclntab entry
// occupies the bytes of each resident page.
//
// Owners of bytes, finest first:
//   - .text: the ELF symbol table's functions;
//   - type descriptors: DWARF's DW_AT_go_runtime_type, each type owning
//     its descriptor up to the next one's (its name, methods and
//     uncommon data follow it);
//   - the pclntab (parsed as the runtime does: header, functab, _func):
//     a function's entry, name, pc tables (pcsp, pcfile, pcln, pcdata) and
//     funcdata (go:func.*), each owning up to the next owner's start;
//   - the other symbols with a size (itabs, generic dictionaries, package
//     variables in data and bss).
//
// Bytes no owner covers (strings, the unnamed tail of a region) are
// charged to the region ("go:string.*", "type:* (unattributed)") or the
// ELF section.

// dwAttrGoRuntimeType is the Go linker's DWARF attribute giving a type's
// runtime type descriptor address.
const dwAttrGoRuntimeType dwarf.Attr = 0x2904

const pageSize = 4096

// span is a range of the binary's addresses and who owns it.
type span struct {
	start, end uint64
	owner      string // a symbol or type name; its package is pkgOf(owner)
	kind       string // text, types, pclntab, funcdata, data, ...
}

// binLayout is where everything of a Go binary lives in memory.
type binLayout struct {
	sections []span // the loaded sections (owner = section name)
	regions  []span // named regions inside sections, for unowned bytes
	owners   []span // sorted, non-overlapping
	modules  []string
}

func loadLayout(path string) (*binLayout, error) {
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	l := &binLayout{}
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_ALLOC != 0 && s.Addr != 0 && s.Size > 0 {
			l.sections = append(l.sections, span{start: s.Addr, end: s.Addr + s.Size, owner: s.Name})
		}
	}
	syms, err := f.Symbols()
	if err != nil {
		return nil, fmt.Errorf("%s: symbols: %w", path, err)
	}
	symAddr := map[string]elf.Symbol{}
	var fine []span
	for _, s := range syms {
		symAddr[s.Name] = s
		if s.Size == 0 || s.Value == 0 || s.Name == "go:func.*" || s.Name == "runtime.findfunctab" {
			continue
		}
		kind := "data"
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			kind = "text"
		}
		fine = append(fine, span{s.Value, s.Value + s.Size, s.Name, kind})
	}
	if s, ok := symAddr["runtime.findfunctab"]; ok {
		l.regions = append(l.regions, span{s.Value, s.Value + s.Size, "runtime.findfunctab", "pclntab"})
	}
	types, err := dwarfTypes(f, symAddr)
	if err != nil {
		return nil, err
	}
	fine = append(fine, types...)
	pcln, err := pclntabOwners(f, symAddr)
	if err != nil {
		return nil, fmt.Errorf("%s: pclntab: %w", path, err)
	}
	fine = append(fine, pcln...)
	l.owners = disjoint(fine)
	for _, r := range [][2]string{{"type:*", "go:string.*"}, {"go:string.*", "go:funcdesc"}} {
		a, b := symAddr[r[0]], symAddr[r[1]]
		if a.Value != 0 && b.Value > a.Value {
			name := r[0]
			if name == "type:*" {
				name = "type:* (unattributed)"
			}
			l.regions = append(l.regions, span{a.Value, b.Value, name, "rodata"})
		}
	}
	if bi, err := buildinfo.ReadFile(path); err == nil {
		l.modules = append(l.modules, bi.Main.Path)
		for _, d := range bi.Deps {
			l.modules = append(l.modules, d.Path)
		}
	}
	return l, nil
}

// dwarfTypes lists every type descriptor DWARF names, each owning the
// bytes up to the next descriptor, within the type:* region.
func dwarfTypes(f *elf.File, symAddr map[string]elf.Symbol) ([]span, error) {
	d, err := f.DWARF()
	if err != nil {
		return nil, fmt.Errorf("DWARF: %w", err)
	}
	lo, hi := symAddr["type:*"].Value, symAddr["go:string.*"].Value
	var out []span
	r := d.Reader()
	for {
		e, err := r.Next()
		if err != nil {
			return nil, err
		}
		if e == nil {
			break
		}
		// The attribute holds the descriptor's offset from type:*.
		off, ok := e.Val(dwAttrGoRuntimeType).(uint64)
		addr := lo + off
		name, _ := e.Val(dwarf.AttrName).(string)
		if ok && addr >= lo && addr < hi && name != "" {
			out = append(out, span{start: addr, owner: name, kind: "types"})
		}
		if e.Children && e.Tag != dwarf.TagCompileUnit {
			r.SkipChildren()
		}
	}
	return extendToNext(out, hi), nil
}

// extendToNext sorts ss by start and gives each the bytes up to the next
// one's start (the last up to end); duplicates of a start keep the first.
func extendToNext(ss []span, end uint64) []span {
	slices.SortStableFunc(ss, func(a, b span) int { return cmp.Compare(a.start, b.start) })
	ss = slices.CompactFunc(ss, func(a, b span) bool { return a.start == b.start })
	for i := range ss {
		ss[i].end = end
		if i+1 < len(ss) {
			ss[i].end = ss[i+1].start
		}
	}
	return ss
}

// disjoint sorts ss and trims each span so none overlaps the one before.
func disjoint(ss []span) []span {
	slices.SortFunc(ss, func(a, b span) int {
		return cmp.Or(cmp.Compare(a.start, b.start), cmp.Compare(b.end, a.end))
	})
	out := ss[:0]
	var last uint64
	for _, s := range ss {
		s.start = max(s.start, last)
		if s.start >= s.end {
			continue
		}
		out = append(out, s)
		last = s.end
	}
	return out
}

// pclntabOwners parses the runtime's function table (runtime/symtab.go's
// pcHeader and _func, Go 1.20 and later) and charges every part of it to
// its function.
func pclntabOwners(f *elf.File, symAddr map[string]elf.Symbol) ([]span, error) {
	sec := f.Section(".gopclntab")
	if sec == nil {
		return nil, fmt.Errorf("no .gopclntab section")
	}
	data, err := sec.Data()
	if err != nil {
		return nil, err
	}
	le := binary.LittleEndian
	if len(data) < 72 || le.Uint32(data) != 0xfffffff1 || data[7] != 8 {
		return nil, fmt.Errorf("unknown pclntab header %x", data[:8])
	}
	word := func(i int) uint64 { return le.Uint64(data[8+8*i:]) }
	nfunc := int(word(0))
	funcname, pctab, pcln := word(3), word(6), word(7)
	base := sec.Addr
	gofunc := symAddr["go:func.*"]
	var names, tabs, structs, fdata []span
	for i := range nfunc {
		funcoff := uint64(le.Uint32(data[pcln+uint64(8*i)+4:]))
		fn := data[pcln+funcoff:]
		nameOff := uint64(le.Uint32(fn[4:]))
		name := cString(data[funcname+nameOff:])
		structs = append(structs, span{start: base + pcln + funcoff, owner: name, kind: "pclntab"})
		names = append(names, span{start: base + funcname + nameOff, owner: name, kind: "pclntab"})
		npcdata := int(le.Uint32(fn[28:]))
		nfuncdata := int(fn[43])
		offs := []uint32{le.Uint32(fn[16:]), le.Uint32(fn[20:]), le.Uint32(fn[24:])}
		for j := range npcdata {
			offs = append(offs, le.Uint32(fn[44+4*j:]))
		}
		for _, o := range offs {
			if o != 0 {
				tabs = append(tabs, span{start: base + pctab + uint64(o), owner: name, kind: "pclntab"})
			}
		}
		for j := range nfuncdata {
			if o := le.Uint32(fn[44+4*npcdata+4*j:]); o != ^uint32(0) && gofunc.Value != 0 {
				fdata = append(fdata, span{start: gofunc.Value + uint64(o), owner: name, kind: "funcdata"})
			}
		}
	}
	functab := span{base + pcln, base + pcln + uint64(8*(nfunc+1)), "runtime.functab", "pclntab"}
	var out []span
	out = append(out, extendToNext(names, base+word(4))...) // funcnametab ends at cutab
	out = append(out, extendToNext(tabs, base+pcln)...)     // pctab ends at the functab
	out = append(out, extendToNext(structs, structsEnd(base+uint64(len(data)), structs, gofunc.Value, symAddr["runtime.findfunctab"].Value))...)
	out = append(out, functab)
	if gofunc.Value != 0 {
		out = append(out, extendToNext(fdata, gofunc.Value+gofunc.Size)...)
	}
	return out, nil
}

// structsEnd is where the _func structs end: at the first of the regions
// the linker places after them in the section (go:func.*, findfunctab), or
// the section's end.
func structsEnd(end uint64, structs []span, after ...uint64) uint64 {
	last := uint64(0)
	for _, s := range structs {
		last = max(last, s.start)
	}
	for _, a := range after {
		if a > last && a < end {
			end = a
		}
	}
	return end
}

func cString(b []byte) string {
	if i := slices.Index(b, 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// residentPages reports which pages of [start, end) are present in pid's
// page tables.
func residentPages(pagemap *os.File, start, end uint64) ([]bool, error) {
	first, last := start/pageSize, (end+pageSize-1)/pageSize
	buf := make([]byte, 8*(last-first))
	if _, err := pagemap.ReadAt(buf, int64(first*8)); err != nil && err != io.EOF {
		return nil, err
	}
	out := make([]bool, last-first)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(buf[8*i:])&(1<<63) != 0
	}
	return out, nil
}

// residency is what one reading found: resident bytes by section, by
// owner's package and by kind.
type residency struct {
	bySection map[string]uint64
	total     map[string]uint64 // section sizes
	byPkg     map[string]uint64
	byPkgKind map[string]map[string]uint64 // package -> kind -> bytes
}

// measureResidency reads pid's pagemap for every loaded section of the
// binary l describes.
// With pid 0 every page counts as resident: the binary's sizes.
func measureResidency(pid int, l *binLayout) (*residency, error) {
	var pm *os.File
	if pid != 0 {
		var err error
		if pm, err = os.Open(fmt.Sprintf("/proc/%d/pagemap", pid)); err != nil {
			return nil, err
		}
		defer pm.Close()
	}
	r := &residency{bySection: map[string]uint64{}, total: map[string]uint64{}, byPkg: map[string]uint64{}, byPkgKind: map[string]map[string]uint64{}}
	charge := func(pkg, kind string, n uint64) {
		r.byPkg[pkg] += n
		if r.byPkgKind[pkg] == nil {
			r.byPkgKind[pkg] = map[string]uint64{}
		}
		r.byPkgKind[pkg][kind] += n
	}
	var err error
	for _, sec := range l.sections {
		r.total[sec.owner] += sec.end - sec.start
		present := make([]bool, (sec.end+pageSize-1)/pageSize-sec.start/pageSize)
		if pm == nil {
			for i := range present {
				present[i] = true
			}
		} else if present, err = residentPages(pm, sec.start, sec.end); err != nil {
			return nil, err
		}
		for i, ok := range present {
			if !ok {
				continue
			}
			lo := max(sec.start, (sec.start/pageSize+uint64(i))*pageSize)
			hi := min(sec.end, lo-lo%pageSize+pageSize)
			r.bySection[sec.owner] += hi - lo
			owned := uint64(0)
			for _, o := range overlapping(l.owners, lo, hi) {
				n := min(hi, o.end) - max(lo, o.start)
				owned += n
				charge(pkgOf(o.owner), o.kind, n)
			}
			rest := (hi - lo) - owned
			if rest == 0 {
				continue
			}
			region := sec.owner
			for _, g := range l.regions {
				if lo < g.end && g.start < hi {
					region = g.owner
				}
			}
			charge("("+region+")", strings.TrimPrefix(sec.owner, "."), rest)
		}
	}
	return r, nil
}

// overlapping returns the spans of sorted, disjoint ss that overlap
// [lo, hi).
func overlapping(ss []span, lo, hi uint64) []span {
	i, _ := slices.BinarySearchFunc(ss, lo, func(s span, t uint64) int { return cmp.Compare(s.end, t+1) })
	j := i
	for j < len(ss) && ss[j].start < hi {
		j++
	}
	return ss[i:j]
}

// pkgOf is the Go package a symbol or type name belongs to: "k8s.io/api/core/v1"
// for "k8s.io/api/core/v1.(*Pod).Unmarshal", "*k8s.io/api/core/v1.Pod" or
// "go:itab.*k8s.io/api/core/v1.X,io.Reader"; unnamed composite types are
// grouped by their shape.
func pkgOf(name string) string {
	for _, p := range []string{"go:itab.", "type:.eq.", "type:.hash.", "go:info.", "go:"} {
		name = strings.TrimPrefix(name, p)
	}
	for {
		switch {
		case strings.HasPrefix(name, "*"):
			name = name[1:]
		case strings.HasPrefix(name, "[]"):
			name = name[2:]
		case strings.HasPrefix(name, "chan "), strings.HasPrefix(name, "<-chan "), strings.HasPrefix(name, "chan<- "):
			name = name[strings.Index(name, " ")+1:]
		case strings.HasPrefix(name, "[") && strings.Contains(name, "]"):
			name = name[strings.Index(name, "]")+1:]
		default:
			goto named
		}
	}
named:
	switch {
	case strings.HasPrefix(name, "map["):
		return "(map types)"
	case strings.HasPrefix(name, "struct {"), strings.HasPrefix(name, "struct{"):
		return "(struct types)"
	case strings.HasPrefix(name, "func("):
		return "(func types)"
	case strings.HasPrefix(name, "interface {"), strings.HasPrefix(name, "interface{"):
		return "(interface types)"
	}
	if i := strings.IndexAny(name, "[(,"); i >= 0 {
		name = name[:i]
	}
	slash := strings.LastIndex(name, "/")
	dot := strings.Index(name[slash+1:], ".")
	if dot < 0 {
		if slash < 0 {
			return "(builtin types)"
		}
		return name
	}
	// The linker escapes dots in a path's last element (yaml%2ev3).
	return strings.ReplaceAll(name[:slash+1+dot], "%2e", ".")
}

// moduleOf is the module of l's build info that pkg belongs to, or pkg's
// standard library top (runtime, crypto, net...).
func (l *binLayout) moduleOf(pkg string) string {
	best := ""
	for _, m := range l.modules {
		if (pkg == m || strings.HasPrefix(pkg, m+"/")) && len(m) > len(best) {
			best = m
		}
	}
	if best != "" {
		return best
	}
	if strings.HasPrefix(pkg, "(") {
		return pkg
	}
	if top, _, _ := strings.Cut(pkg, "/"); !strings.Contains(top, ".") {
		return "std:" + top
	}
	return pkg
}
