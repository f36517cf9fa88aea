package podutil_test

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/internal/podutil"
)

func Example() {
	static := &v1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "etcd", Namespace: "kube-system",
		Annotations: map[string]string{podutil.ConfigSourceAnnotation: "file"},
	}}
	fmt.Println(podutil.IsStatic(static), podutil.IsMirror(static))
	fmt.Println(podutil.FullName(static), podutil.NamespacedKey(static))
	// Output:
	// true false
	// etcd_kube-system kube-system/etcd
}
