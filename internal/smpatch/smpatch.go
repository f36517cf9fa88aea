package smpatch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"
)

// The directives a two-way patch carries, as the API server reads them.
const (
	directiveKey         = "$patch"
	deleteDirective      = "delete"
	setOrderPrefix       = "$setElementOrder"
	deletePrimitivesList = "$deleteFromPrimitiveList"
	retainKeysKey        = "$retainKeys"
)

// TwoWay is the strategic merge patch from original to modified, two JSON
// objects of the Go type of dataStruct (a struct or a pointer to one).
// Empty documents are empty objects. The patch of two equal documents is
// {}.
func TwoWay(original, modified []byte, dataStruct any) ([]byte, error) {
	t := reflect.TypeOf(dataStruct)
	if t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil || t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("smpatch: the data type %T is not a struct", dataStruct)
	}
	before, err := decode(original)
	if err != nil {
		return nil, fmt.Errorf("smpatch: the original document: %w", err)
	}
	after, err := decode(modified)
	if err != nil {
		return nil, fmt.Errorf("smpatch: the modified document: %w", err)
	}
	patch, err := diffMaps(before, after, schema{t: t}, false)
	if err != nil {
		return nil, fmt.Errorf("smpatch: %w", err)
	}
	return json.Marshal(patch)
}

// decode reads a JSON object, numbers kept as written.
func decode(doc []byte) (map[string]any, error) {
	m := map[string]any{}
	if len(doc) == 0 {
		return m, nil
	}
	d := json.NewDecoder(bytes.NewReader(doc))
	d.UseNumber()
	if err := d.Decode(&m); err != nil {
		return nil, err
	}
	if m == nil { // the document was null
		m = map[string]any{}
	}
	return m, nil
}

// diffMaps is the patch of one object (a struct's or a map's document):
// added and changed fields, null for removed ones, and with retainKeys the
// $retainKeys list of the fields modified keeps.
func diffMaps(original, modified map[string]any, s schema, retainKeys bool) (map[string]any, error) {
	patch := map[string]any{}
	var retained []any
	for key, mv := range modified {
		if retainKeys && mv != nil {
			retained = append(retained, key)
		}
		ov, ok := original[key]
		if !ok || reflect.TypeOf(ov) != reflect.TypeOf(mv) {
			patch[key] = mv
			continue
		}
		var err error
		switch o := ov.(type) {
		case map[string]any:
			err = diffField(key, o, mv.(map[string]any), s, patch)
		case []any:
			err = diffList(key, o, mv.([]any), s, patch)
		default:
			if !reflect.DeepEqual(ov, mv) {
				patch[key] = mv
			}
		}
		if err != nil {
			return nil, err
		}
	}
	for key := range original {
		if _, ok := modified[key]; !ok {
			patch[key] = nil
		}
	}
	if len(retained) > 0 && (len(patch) > 0 || dropsAField(original, modified)) {
		patch[retainKeysKey] = sortScalars(retained)
	}
	return patch, nil
}

// dropsAField reports whether original has a non-null field modified
// lacks.
func dropsAField(original, modified map[string]any) bool {
	for k, v := range original {
		if _, ok := modified[k]; v != nil && !ok {
			return true
		}
	}
	return false
}

// diffField is the patch of the object field key, recorded in patch.
func diffField(key string, original, modified map[string]any, s schema, patch map[string]any) error {
	sub, meta, err := s.field(key)
	if err != nil {
		if reflect.DeepEqual(original, modified) {
			return nil
		}
		return err
	}
	if meta.strategy == "replace" {
		patch[key] = modified
		return nil
	}
	p, err := diffMaps(original, modified, sub, meta.retainKeys)
	if err != nil {
		return err
	}
	if len(p) > 0 {
		patch[key] = p
	}
	return nil
}

// diffList is the patch of the list field key, recorded in patch: the
// whole list when the field is replaced, else its merged changes and
// their directives.
func diffList(key string, original, modified []any, s schema, patch map[string]any) error {
	sub, meta, err := s.field(key)
	if err != nil {
		if reflect.DeepEqual(original, modified) {
			return nil
		}
		return err
	}
	if meta.strategy != "merge" {
		if !reflect.DeepEqual(original, modified) {
			patch[key] = modified
		}
		return nil
	}
	sub = sub.elem()
	changes, deletions, order, err := diffMergedList(original, modified, sub, meta)
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	if len(changes) > 0 {
		patch[key] = changes
	}
	if len(deletions) > 0 {
		patch[deletePrimitivesList+"/"+key] = deletions
	}
	if len(order) > 0 {
		patch[setOrderPrefix+"/"+key] = order
	}
	return nil
}

// diffMergedList diffs a list merged by meta's key (a list of objects) or
// by value (a list of scalars): the changed and added elements (with
// deletion directives after them for a list of objects), the scalars to
// delete, and the order of modified's elements when anything changed.
func diffMergedList(original, modified []any, s schema, meta fieldMeta) (changes, deletions, order []any, err error) {
	if len(original) == 0 {
		return modified, nil, nil, nil
	}
	kind, err := elementKind(original, modified)
	if err != nil {
		return nil, nil, nil, err
	}
	if kind == reflect.Slice {
		return nil, nil, nil, errors.New("lists of lists cannot be merged")
	}
	if kind != reflect.Map {
		changes, deletions = diffScalars(original, modified)
		changes = orderAs(changes, modified, "")
		// The order is sent when the lists differ as upstream compares
		// them: original sorted, modified as it is, so a list of scalars
		// out of order carries its order even when unchanged.
		if len(deletions) > 0 || !reflect.DeepEqual(sortScalars(append([]any(nil), original...)), modified) {
			order = modified
		}
		return changes, deletions, order, nil
	}
	key := meta.mergeKey
	if err := haveKey(key, original, modified); err != nil {
		return nil, nil, nil, err
	}
	changes, removed, err := diffObjects(original, modified, s, key, meta.retainKeys)
	if err != nil {
		return nil, nil, nil, err
	}
	changes = append(orderAs(changes, modified, key), removed...)
	if len(changes) > 0 || !sameKeys(original, modified, key) {
		order = make([]any, len(modified))
		for i, m := range modified {
			order[i] = map[string]any{key: m.(map[string]any)[key]}
		}
	}
	return changes, nil, order, nil
}

// diffObjects pairs the objects of two lists by their merge key and
// returns the patches of the changed ones (the key kept in each), the
// added ones whole, and a delete directive for each removed one.
func diffObjects(original, modified []any, s schema, key string, retainKeys bool) (changes, removed []any, err error) {
	os, ms := sortedByKey(original, key), sortedByKey(modified, key)
	for i, j := 0, 0; i < len(os) || j < len(ms); {
		var ok, mk string
		if i < len(os) {
			ok = keyString(os[i], key)
		}
		if j < len(ms) {
			mk = keyString(ms[j], key)
		}
		switch {
		case i < len(os) && j < len(ms) && ok == mk:
			p, err := diffMaps(os[i], ms[j], s, retainKeys)
			if err != nil {
				return nil, nil, err
			}
			if len(p) > 0 {
				p[key] = ms[j][key]
				changes = append(changes, p)
			}
			i++
			j++
		case i >= len(os) || (j < len(ms) && ok > mk):
			changes = append(changes, ms[j])
			j++
		default:
			removed = append(removed, map[string]any{key: os[i][key], directiveKey: deleteDirective})
			i++
		}
	}
	return changes, removed, nil
}

// diffScalars is what a list of scalars merged by value gains and loses,
// compared as their printed forms, as the API server's merge does.
func diffScalars(original, modified []any) (added, deleted []any) {
	os := sortScalars(append([]any(nil), original...))
	ms := sortScalars(append([]any(nil), modified...))
	added, deleted = []any{}, []any{}
	for i, j := 0, 0; i < len(os) || j < len(ms); {
		var o, m string
		if i < len(os) {
			o = fmt.Sprint(os[i])
		}
		if j < len(ms) {
			m = fmt.Sprint(ms[j])
		}
		switch {
		case i < len(os) && j < len(ms) && o == m:
			i++
			j++
		case i >= len(os) || (j < len(ms) && o > m):
			added = append(added, ms[j])
			j++
		default:
			deleted = append(deleted, os[i])
			i++
		}
	}
	return added, dedupScalars(deleted)
}

// orderAs orders list as its elements appear in order (by merge key for
// objects, by value for scalars); elements order lacks keep their place
// after those it has, as upstream's stable sort leaves them.
func orderAs(list, order []any, key string) []any {
	pos := func(v any) int {
		want := v
		if key != "" {
			want = v.(map[string]any)[key]
		}
		for i, o := range order {
			got := o
			if key != "" {
				got = o.(map[string]any)[key]
			}
			if got == want {
				return i
			}
		}
		return -1
	}
	sort.SliceStable(list, func(a, b int) bool {
		if pa := pos(list[a]); pa >= 0 {
			if pb := pos(list[b]); pb >= 0 {
				return pa < pb
			}
		}
		return true
	})
	return list
}

// sameKeys reports whether two lists of objects have the same merge keys
// in the same order.
func sameKeys(a, b []any, key string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if keyString(a[i].(map[string]any), key) != keyString(b[i].(map[string]any), key) {
			return false
		}
	}
	return true
}

// haveKey checks every element of the lists is an object with the merge
// key.
func haveKey(key string, lists ...[]any) error {
	for _, l := range lists {
		for _, v := range l {
			m, ok := v.(map[string]any)
			if !ok {
				return fmt.Errorf("element %v is not an object", v)
			}
			if _, ok := m[key]; !ok {
				return fmt.Errorf("element %v lacks the merge key %q", v, key)
			}
		}
	}
	return nil
}

// elementKind is the kind of the lists' elements, which must all be of
// one type.
func elementKind(lists ...[]any) (reflect.Kind, error) {
	var t reflect.Type
	for _, l := range lists {
		for _, v := range l {
			vt := reflect.TypeOf(v)
			if t != nil && vt != t {
				return reflect.Invalid, fmt.Errorf("list elements of different types: %v and %v", t, vt)
			}
			t = vt
		}
	}
	if t == nil {
		return reflect.Invalid, errors.New("no elements in the lists")
	}
	return t.Kind(), nil
}

// sortedByKey is a list of objects sorted by their merge keys' printed
// forms.
func sortedByKey(l []any, key string) []map[string]any {
	out := make([]map[string]any, len(l))
	for i, v := range l {
		out[i] = v.(map[string]any)
	}
	sort.SliceStable(out, func(a, b int) bool { return keyString(out[a], key) < keyString(out[b], key) })
	return out
}

func keyString(m map[string]any, key string) string { return fmt.Sprint(m[key]) }

// sortScalars sorts scalars by their printed forms.
func sortScalars(l []any) []any {
	sort.SliceStable(l, func(a, b int) bool { return fmt.Sprint(l[a]) < fmt.Sprint(l[b]) })
	return l
}

// dedupScalars drops repeated scalars, each repeat replaced by the list's
// last element, so the survivors' order is the API machinery's.
func dedupScalars(l []any) []any {
	for i := 0; i < len(l)-1; i++ {
		for j := i + 1; j < len(l); j++ {
			if l[i] == l[j] {
				l[j] = l[len(l)-1]
				l = l[:len(l)-1]
				j--
			}
		}
	}
	return l
}

// fieldMeta is what a field's tags say about merging it.
type fieldMeta struct {
	strategy   string // "merge", "replace" or ""
	retainKeys bool
	mergeKey   string
}

// schema is the Go type a document (or a part of one) is of.
type schema struct{ t reflect.Type }

// field is the type of the field a JSON key names in the struct s is
// (a map's value for a map), and its merge tags.
func (s schema) field(key string) (schema, fieldMeta, error) {
	t := s.t
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Map {
		return schema{t: t.Elem()}, fieldMeta{}, nil
	}
	if t.Kind() != reflect.Struct {
		return schema{}, fieldMeta{}, fmt.Errorf("field %q of %v, which is not a struct", key, t)
	}
	f, ok := jsonField(t, key)
	if !ok {
		return schema{}, fieldMeta{}, fmt.Errorf("%v has no field %q", t, key)
	}
	var meta fieldMeta
	for _, st := range strings.Split(f.Tag.Get("patchStrategy"), ",") {
		switch st {
		case "retainKeys":
			meta.retainKeys = true
		case "merge", "replace":
			meta.strategy = st
		}
	}
	meta.mergeKey = f.Tag.Get("patchMergeKey")
	return schema{t: f.Type}, meta, nil
}

// elem is the schema of a list's elements.
func (s schema) elem() schema {
	t := s.t
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	return schema{t: t}
}

// jsonField finds the struct field encoding/json writes as key, looking
// into embedded structs without a name of their own.
func jsonField(t reflect.Type, key string) (reflect.StructField, bool) {
	var fold reflect.StructField
	found := false
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				if sf, ok := jsonField(et, key); ok {
					return sf, true
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		if name == key {
			return f, true
		}
		if !found && strings.EqualFold(name, key) {
			fold, found = f, true
		}
	}
	return fold, found
}
