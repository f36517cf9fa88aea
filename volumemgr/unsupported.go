package volumemgr

import (
	"errors"
	"fmt"
	"reflect"
	"strings"

	v1 "k8s.io/api/core/v1"
)

// ErrNoPluginMatched is wrapped by the error WaitForAttachAndMount returns
// for a volume no plugin handles (upstream's words).
var ErrNoPluginMatched = errors.New("no volume plugin matched")

// SourceName returns the name of vol's source as the API spells it
// ("persistentVolumeClaim", "csi", "image", ...), or "" when none is set.
// It walks v1.VolumeSource by reflection, so a source added to the API is
// named without a change here.
func SourceName(vol *v1.Volume) string {
	rv := reflect.ValueOf(vol.VolumeSource)
	rt := rv.Type()
	for i := range rt.NumField() {
		f := rv.Field(i)
		if f.Kind() == reflect.Pointer && !f.IsNil() {
			name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
			return name
		}
	}
	return ""
}

// noPluginError is upstream's error for a volume without a plugin, with
// what nodekit lacks: volumemgr has no CSI, persistent-volume or in-tree
// network-storage plugins.
func noPluginError(vol *v1.Volume) error {
	what := "a volume without a source"
	if s := SourceName(vol); s != "" {
		what = s + " volumes"
	}
	return fmt.Errorf("failed to get Plugin from volumeSpec for volume %q err=%w: %s are not supported by this node agent",
		vol.Name, ErrNoPluginMatched, what)
}

// joinErrors joins errs with "; ", as upstream joins a pod's volume errors,
// keeping them for errors.Is.
func joinErrors(errs []error) error {
	if len(errs) == 1 {
		return errs[0]
	}
	msgs := make([]string, len(errs))
	for i, err := range errs {
		msgs[i] = err.Error()
	}
	return &joined{msg: strings.Join(msgs, "; "), errs: errs}
}

type joined struct {
	msg  string
	errs []error
}

func (j *joined) Error() string   { return j.msg }
func (j *joined) Unwrap() []error { return j.errs }
