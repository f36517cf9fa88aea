package fsutil_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/nodekit/nodekit/internal/fsutil"
)

func ExampleWriteFileAtomic() {
	dir, err := os.MkdirTemp("", "fsutil-example")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "cpu_manager_state")
	for _, v := range []string{`{"v":1}`, `{"v":2}`} {
		if err := fsutil.WriteFileAtomic(path, []byte(v), 0o644); err != nil {
			fmt.Println(err)
			return
		}
	}
	b, _ := os.ReadFile(path)
	fmt.Println(string(b))
	// Output: {"v":2}
}
