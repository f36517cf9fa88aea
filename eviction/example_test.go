package eviction_test

import (
	"fmt"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodekit/nodekit/eviction"
)

func Example() {
	ths, err := eviction.ParseThresholds(eviction.ThresholdConfig{
		Hard: map[string]string{"memory.available": "100Mi", "nodefs.available": "10%"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	obs := eviction.Observations{
		eviction.SignalMemoryAvailable: {Available: 1 << 30, Capacity: 4 << 30},
		eviction.SignalNodeFsAvailable: {Available: 5 << 30, Capacity: 100 << 30},
	}
	met := eviction.ThresholdsMet(ths, obs, false)
	conds := eviction.Conditions(met)
	fmt.Println(conds)

	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "web"}, Spec: v1.PodSpec{Containers: []v1.Container{{Name: "app"}}}}
	d := eviction.AdmitUnderPressure(pod, conds)
	fmt.Printf("admit=%v reason=%s message=%q\n", d.Admit, d.Reason, d.Message)

	_, err = eviction.ParseThresholds(eviction.ThresholdConfig{Soft: map[string]string{"nodefs.available": "15%"}})
	fmt.Println(err)
	// Output:
	// [DiskPressure]
	// admit=false reason=Evicted message="The node had condition: [DiskPressure]. "
	// evictionSoftGracePeriod: grace period must be specified for the soft eviction threshold nodefs.available
}
