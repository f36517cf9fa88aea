package events

import (
	"fmt"
	"reflect"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/json"
)

// repeatPatch returns the patch that turns the stored copy of a repeated
// event into event. record builds it with strategicpatch from two JSON
// documents: event, and event with count and message cleared and
// lastTimestamp set to the Unix epoch. This builds the same bytes from
// the same pair.
func repeatPatch(event *v1.Event) ([]byte, error) {
	base := *event
	base.Count = 0
	base.LastTimestamp = metav1.NewTime(time.Unix(0, 0))
	base.Message = ""
	return mergePatch(&base, event)
}

// mergePatch returns the two-way strategic merge patch from original to
// modified, two objects that encode as JSON objects, for the case where
// no list differs between them (an error otherwise): then the strategic
// merge patch is the JSON merge patch (RFC 7386), which this computes.
// Both documents go through encoding/json and back through
// k8s.io/apimachinery's json (integers decode as int64), as in
// strategicpatch, so that values compare and re-encode as they do there;
// encoding/json sorts the patch's keys, as there.
func mergePatch(original, modified any) ([]byte, error) {
	from, err := jsonObject(original)
	if err != nil {
		return nil, err
	}
	to, err := jsonObject(modified)
	if err != nil {
		return nil, err
	}
	patch, err := diffObjects("", from, to)
	if err != nil {
		return nil, err
	}
	return json.Marshal(patch)
}

func jsonObject(v any) (map[string]any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	object := map[string]any{}
	if err := json.Unmarshal(data, &object); err != nil {
		return nil, err
	}
	return object, nil
}

// diffObjects returns the merge patch from one decoded JSON object to
// another: a field added or changed is set to its new value (a nested
// object, to the patch of its fields), a field removed is set to null.
// path names the object in errors.
func diffObjects(path string, from, to map[string]any) (map[string]any, error) {
	patch := map[string]any{}
	for key, newValue := range to {
		oldValue, ok := from[key]
		switch {
		case !ok:
			patch[key] = newValue
		case reflect.DeepEqual(oldValue, newValue):
		case reflect.TypeOf(oldValue) != reflect.TypeOf(newValue):
			patch[key] = newValue
		default:
			switch oldTyped := oldValue.(type) {
			case map[string]any:
				// Not equal, so the nested patch is not empty.
				nested, err := diffObjects(path+"."+key, oldTyped, newValue.(map[string]any))
				if err != nil {
					return nil, err
				}
				patch[key] = nested
			case []any:
				// Strategic merge patches diff lists by their merge
				// keys; a repeated event changes none.
				return nil, fmt.Errorf("merge patch: list %s.%s changed: not supported", path, key)
			default:
				patch[key] = newValue
			}
		}
	}
	for key := range from {
		if _, ok := to[key]; !ok {
			patch[key] = nil
		}
	}
	return patch, nil
}
