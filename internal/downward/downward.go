// Package downward renders the pod metadata fields of the downward API
// (metadata.name, namespace, uid, labels, annotations and their
// ['key'] subscripts), shared by environment variables (podopts) and
// downwardAPI volumes (volumemgr).
package downward

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
)

// MetadataValue renders a metadata field path of the pod. ok is false when
// path is not a metadata field this package knows (the caller may handle
// spec and status fields); a subscript on any other field is an error.
func MetadataValue(pod *v1.Pod, path string) (value string, ok bool, err error) {
	if field, key, sub := splitSubscript(path); sub {
		switch field {
		case "metadata.annotations":
			if errs := validation.IsQualifiedName(strings.ToLower(key)); len(errs) != 0 {
				return "", true, fmt.Errorf("invalid key subscript in %s: %s", path, strings.Join(errs, ";"))
			}
			return pod.Annotations[key], true, nil
		case "metadata.labels":
			if errs := validation.IsQualifiedName(key); len(errs) != 0 {
				return "", true, fmt.Errorf("invalid key subscript in %s: %s", path, strings.Join(errs, ";"))
			}
			return pod.Labels[key], true, nil
		}
		return "", true, fmt.Errorf("field label does not support subscript: %s", path)
	}
	switch path {
	case "metadata.name":
		return pod.Name, true, nil
	case "metadata.namespace":
		return pod.Namespace, true, nil
	case "metadata.uid":
		return string(pod.UID), true, nil
	case "metadata.labels":
		return FormatMap(pod.Labels), true, nil
	case "metadata.annotations":
		return FormatMap(pod.Annotations), true, nil
	}
	return "", false, nil
}

// splitSubscript splits "metadata.labels['k']" into "metadata.labels" and "k".
func splitSubscript(path string) (field, key string, ok bool) {
	rest, found := strings.CutSuffix(path, "']")
	if !found {
		return "", "", false
	}
	field, key, found = strings.Cut(rest, "['")
	if !found || field == "" {
		return "", "", false
	}
	return field, key, true
}

// FormatMap renders a map as key="value" lines sorted by key, values
// Go-quoted, as the downward API does.
func FormatMap(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	lines := make([]string, len(keys))
	for i, k := range keys {
		lines[i] = k + "=" + strconv.Quote(m[k])
	}
	return strings.Join(lines, "\n")
}
