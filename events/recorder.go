package events

import (
	"errors"
	"fmt"
	"maps"
	"reflect"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
)

// Recorder records events about objects on behalf of one source. Its
// methods have the signatures of client-go's record.EventRecorder, which
// it satisfies. They never block: the event is queued for the
// Broadcaster, or dropped with an error in the log when the queue is full,
// the Broadcaster is shut down, the object cannot be referenced or the
// type is neither Normal nor Warning. A Recorder is safe for concurrent
// use.
type Recorder struct {
	b      *Broadcaster
	scheme *runtime.Scheme
	source v1.EventSource
}

// NewRecorder returns a Recorder whose events come from source and go to
// b. scheme gives the kind and API version of objects that do not carry
// them in their TypeMeta; it may be nil if all do.
func (b *Broadcaster) NewRecorder(scheme *runtime.Scheme, source v1.EventSource) *Recorder {
	return &Recorder{b: b, scheme: scheme, source: source}
}

// Event records an event of type eventtype (v1.EventTypeNormal or
// v1.EventTypeWarning) about object, in the object's namespace. object
// may be a *v1.ObjectReference, used as it is (to name a field of an
// object with FieldPath). reason is a short UpperCamelCase word that
// programs match on; message is for humans.
func (r *Recorder) Event(object runtime.Object, eventtype, reason, message string) {
	r.record(object, nil, eventtype, reason, message)
}

// Eventf is Event with the message formatted by fmt.Sprintf.
func (r *Recorder) Eventf(object runtime.Object, eventtype, reason, messageFmt string, args ...interface{}) {
	r.record(object, nil, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

// AnnotatedEventf is Eventf with annotations on the event; they are
// copied, the caller keeps the map.
func (r *Recorder) AnnotatedEventf(object runtime.Object, annotations map[string]string, eventtype, reason, messageFmt string, args ...interface{}) {
	r.record(object, annotations, eventtype, reason, fmt.Sprintf(messageFmt, args...))
}

func (r *Recorder) record(object runtime.Object, annotations map[string]string, eventtype, reason, message string) {
	logger := r.b.logger
	ref, err := reference(r.scheme, object)
	if err != nil {
		logger.Error(err, "Could not construct reference, will not report event",
			"object", object, "eventType", eventtype, "reason", reason, "message", message)
		return
	}
	if eventtype != v1.EventTypeNormal && eventtype != v1.EventTypeWarning {
		logger.Error(nil, "Unsupported event type", "eventType", eventtype)
		return
	}
	r.b.enqueue(r.makeEvent(ref, annotations, eventtype, reason, message))
}

// makeEvent builds a first occurrence of an event, as record's recorder.
func (r *Recorder) makeEvent(ref *v1.ObjectReference, annotations map[string]string, eventtype, reason, message string) *v1.Event {
	now := metav1.Time{Time: r.b.clock.Now()}
	namespace := ref.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	return &v1.Event{
		ObjectMeta: metav1.ObjectMeta{
			Name:        r.b.eventName(ref.Name, now.UnixNano()),
			Namespace:   namespace,
			Annotations: maps.Clone(annotations),
		},
		InvolvedObject:      *ref,
		Reason:              reason,
		Message:             message,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		Type:                eventtype,
		Source:              r.source,
		ReportingController: r.source.Component,
		ReportingInstance:   r.source.Host,
	}
}

// eventName names an event about the object named refName at time
// unixNano: the two joined by a dot, the time in hex. When that is not a
// valid object name (a long or oddly named object), a random UUID instead.
func (b *Broadcaster) eventName(refName string, unixNano int64) string {
	name := fmt.Sprintf("%s.%x", refName, unixNano)
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		return b.rand.uuid()
	}
	return name
}

var errNilObject = errors.New("can't reference a nil object")

// reference returns the reference to object that an event about it
// carries, as client-go's reference.GetReference builds it: a
// *v1.ObjectReference is used as given; any other object gives its kind
// and API version (from its TypeMeta, or the scheme when that is empty)
// and its name, namespace, UID and resourceVersion (only the
// resourceVersion for a list).
func reference(scheme *runtime.Scheme, object runtime.Object) (*v1.ObjectReference, error) {
	if isNil(object) {
		return nil, errNilObject
	}
	if ref, ok := object.(*v1.ObjectReference); ok {
		return ref, nil
	}
	var common metav1.Common
	objectMeta, err := meta.Accessor(object)
	if err == nil {
		common = objectMeta
	} else if common, err = meta.CommonAccessor(object); err != nil {
		return nil, err
	}
	gvk := object.GetObjectKind().GroupVersionKind()
	if gvk.Empty() {
		if scheme == nil {
			return nil, errors.New("scheme is required to look up gvk")
		}
		gvks, _, err := scheme.ObjectKinds(object)
		if err != nil {
			return nil, err
		}
		if len(gvks) == 0 || gvks[0].Empty() {
			return nil, fmt.Errorf("unexpected gvks registered for object %T: %v", object, gvks)
		}
		gvk = gvks[0]
	}
	ref := &v1.ObjectReference{
		Kind:            gvk.Kind,
		APIVersion:      gvk.GroupVersion().String(),
		ResourceVersion: common.GetResourceVersion(),
	}
	if objectMeta != nil {
		ref.Name = objectMeta.GetName()
		ref.Namespace = objectMeta.GetNamespace()
		ref.UID = objectMeta.GetUID()
	}
	return ref, nil
}

// isNil reports whether object is nil or a nil pointer, which record
// would dereference.
func isNil(object runtime.Object) bool {
	if object == nil {
		return true
	}
	v := reflect.ValueOf(object)
	return v.Kind() == reflect.Pointer && v.IsNil()
}
