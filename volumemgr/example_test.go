package volumemgr_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/nodekit/nodekit/volumemgr"
	"github.com/nodekit/nodekit/volumemgr/volumemgrtest"
)

func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	root, _ := os.MkdirTemp("", "volumemgr-example")
	defer os.RemoveAll(root)

	// Fakes stand in for the API server and the mount table; an agent uses
	// volumemgr.FromClient(clientset) and volumemgr.HostMounter{}.
	objects := &volumemgrtest.Objects{}
	objects.SetConfigMap(&v1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "settings"},
		Data:       map[string]string{"level": "debug"},
	})
	m, err := volumemgr.New(volumemgr.Config{
		RootDir: root, Objects: objects, Mounter: &volumemgrtest.Mounter{},
		Clock: testingclock.NewFakeClock(epoch),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	go func() { _ = m.Run(ctx) }()

	pod := &v1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "web-0", Namespace: "shop", UID: "uid-1"},
		Spec: v1.PodSpec{
			Volumes: []v1.Volume{
				{Name: "config", VolumeSource: v1.VolumeSource{ConfigMap: &v1.ConfigMapVolumeSource{
					LocalObjectReference: v1.LocalObjectReference{Name: "settings"}}}},
				{Name: "scratch", VolumeSource: v1.VolumeSource{EmptyDir: &v1.EmptyDirVolumeSource{}}},
			},
			Containers: []v1.Container{{Name: "app", VolumeMounts: []v1.VolumeMount{
				{Name: "config", MountPath: "/etc/app"},
				{Name: "scratch", MountPath: "/tmp"},
			}}},
		},
	}
	// The pod worker waits for the volumes, then asks for the mounts.
	if err := m.WaitForAttachAndMount(ctx, pod); err != nil {
		fmt.Println(err)
		return
	}
	mounts, err := m.ContainerMounts(ctx, pod, &pod.Spec.Containers[0])
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, mt := range mounts {
		fmt.Printf("%s -> %s read-only=%v\n", strings.TrimPrefix(mt.HostPath, root), mt.ContainerPath, mt.ReadOnly)
	}
	level, _ := os.ReadFile(filepath.Join(mounts[0].HostPath, "level"))
	fmt.Println("level:", string(level))

	// Once the containers are gone, the volumes go too.
	if err := m.WaitForUnmount(ctx, pod); err != nil {
		fmt.Println(err)
		return
	}
	_, err = os.Stat(filepath.Join(root, "pods", "uid-1", "volumes"))
	fmt.Println("volumes removed:", os.IsNotExist(err))
	// Output:
	// /pods/uid-1/volumes/kubernetes.io~configmap/config -> /etc/app read-only=true
	// /pods/uid-1/volumes/kubernetes.io~empty-dir/scratch -> /tmp read-only=false
	// level: debug
	// volumes removed: true
}
