package podconfig

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	v1 "k8s.io/api/core/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// MaxManifestBytes is the largest manifest (file or HTTP body) a source
// reads, as upstream kubelet.
const MaxManifestBytes = 10 << 20

// FieldError is one problem of a manifest.
type FieldError struct {
	// Field is the JSON path of the offending field, e.g.
	// "spec.containers[1].name" ("items[0].spec..." in a PodList). It is
	// empty when the document as a whole is unusable (not YAML, empty).
	Field string
	// Detail says what is wrong.
	Detail string
}

func (e FieldError) String() string {
	if e.Field == "" {
		return e.Detail
	}
	return e.Field + ": " + e.Detail
}

// ManifestError reports a pod manifest that was rejected: its source (a file
// path or URL) and every problem found, each naming its field.
type ManifestError struct {
	Source string
	Fields []FieldError
}

func (e *ManifestError) Error() string {
	var b strings.Builder
	b.WriteString("invalid pod manifest")
	if e.Source != "" {
		b.WriteString(" ")
		b.WriteString(e.Source)
	}
	for i, f := range e.Fields {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		b.WriteString(f.String())
	}
	return b.String()
}

// HasField reports whether one of the problems is about field.
func (e *ManifestError) HasField(field string) bool {
	for _, f := range e.Fields {
		if f.Field == field {
			return true
		}
	}
	return false
}

func manifestErr(source, field, format string, args ...any) *ManifestError {
	return &ManifestError{Source: source, Fields: []FieldError{{Field: field, Detail: fmt.Sprintf(format, args...)}}}
}

// DecodeManifest decodes a static pod manifest — one v1 Pod or a v1 PodList,
// in YAML or JSON — strictly (unknown and duplicate fields are errors),
// validates each pod and applies the defaults the API server would apply to
// the fields a node agent relies on (restart and DNS policy, grace period,
// image pull policy, termination message, probe timings, ...). source names
// the manifest (a file path or URL) in errors; any error is a
// *ManifestError. It does not make the pods static: the file and HTTP
// sources add the node name, UID and config annotations.
//
// DecodeManifest never panics on bad input and owns nothing it returns.
func DecodeManifest(data []byte, source string) (pods []*v1.Pod, err error) {
	if len(data) > MaxManifestBytes {
		return nil, manifestErr(source, "", "larger than %d bytes", MaxManifestBytes)
	}
	doc, err := singleDocumentJSON(data, source)
	if err != nil {
		return nil, err
	}
	var meta struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := json.Unmarshal(doc, &meta); err != nil {
		return nil, manifestErr(source, "", "not an object: %v", err)
	}
	var fields []FieldError
	if meta.APIVersion != "v1" {
		fields = append(fields, FieldError{Field: "apiVersion", Detail: fmt.Sprintf("must be %q, got %q", "v1", meta.APIVersion)})
	}
	switch meta.Kind {
	case "Pod":
		pod := &v1.Pod{}
		fields = append(fields, strictUnmarshal(doc, pod)...)
		pods = []*v1.Pod{pod}
	case "PodList":
		list := &v1.PodList{}
		fields = append(fields, strictUnmarshal(doc, list)...)
		for i := range list.Items {
			item := &list.Items[i]
			if (item.Kind != "" && item.Kind != "Pod") || (item.APIVersion != "" && item.APIVersion != "v1") {
				fields = append(fields, FieldError{
					Field:  fmt.Sprintf("items[%d]", i),
					Detail: fmt.Sprintf("must be a v1 Pod, got %s %s", item.APIVersion, item.Kind),
				})
			}
			pods = append(pods, item)
		}
	default:
		fields = append(fields, FieldError{Field: "kind", Detail: fmt.Sprintf("must be Pod or PodList, got %q", meta.Kind)})
	}
	if len(fields) > 0 {
		return nil, &ManifestError{Source: source, Fields: fields}
	}
	for i, pod := range pods {
		prefix := ""
		if meta.Kind == "PodList" {
			prefix = fmt.Sprintf("items[%d].", i)
		}
		fields = append(fields, validatePod(pod, prefix)...)
	}
	if len(fields) > 0 {
		return nil, &ManifestError{Source: source, Fields: fields}
	}
	for _, pod := range pods {
		pod.APIVersion, pod.Kind = "v1", "Pod"
		applyAPIDefaults(pod)
	}
	return pods, nil
}

// singleDocumentJSON turns data (YAML or JSON) into the JSON of its one
// document. More than one document is an error: only the first would be
// used, and the rest would be lost silently.
func singleDocumentJSON(data []byte, source string) (doc []byte, err error) {
	// The YAML parser has panicked on hostile input before; bad input must
	// come back as an error.
	defer func() {
		if r := recover(); r != nil {
			doc, err = nil, manifestErr(source, "", "cannot parse: %v", r)
		}
	}()
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for n := 1; ; n++ {
		chunk, rerr := reader.Read()
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return nil, manifestErr(source, "", "cannot split YAML documents: %v", rerr)
		}
		j, cerr := yaml.YAMLToJSONStrict(chunk)
		if cerr != nil {
			return nil, manifestErr(source, "", "document %d: %v", n, cerr)
		}
		j = bytes.TrimSpace(j)
		if len(j) == 0 || bytes.Equal(j, []byte("null")) {
			continue // empty or comment-only document
		}
		if doc != nil {
			return nil, manifestErr(source, "", "document %d: more than one YAML document; use one pod per file or a PodList", n)
		}
		doc = j
	}
	if doc == nil {
		return nil, manifestErr(source, "", "empty manifest")
	}
	return doc, nil
}

// strictUnmarshal decodes doc into v, case-sensitively, reporting unknown
// and duplicate fields and type mismatches with their paths.
func strictUnmarshal(doc []byte, v any) []FieldError {
	strict, err := kjson.UnmarshalStrict(doc, v)
	var fields []FieldError
	if err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			fields = append(fields, FieldError{Field: typeErr.Field, Detail: fmt.Sprintf("cannot decode %s into %s", typeErr.Value, typeErr.Type)})
		} else {
			fields = append(fields, FieldError{Detail: err.Error()})
		}
	}
	for _, s := range strict {
		var fe kjson.FieldError
		if errors.As(s, &fe) {
			detail := "invalid field"
			if msg := s.Error(); strings.HasPrefix(msg, "duplicate field") {
				detail = "duplicate field"
			} else if strings.HasPrefix(msg, "unknown field") {
				detail = "unknown field"
			}
			fields = append(fields, FieldError{Field: fe.FieldPath(), Detail: detail})
			continue
		}
		fields = append(fields, FieldError{Detail: s.Error()})
	}
	return fields
}
