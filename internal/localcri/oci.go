package localcri

import "runtime"

// The parts of the OCI image spec the builder writes.
const (
	mediaTypeIndex    = "application/vnd.oci.image.index.v1+json"
	mediaTypeManifest = "application/vnd.oci.image.manifest.v1+json"
	mediaTypeConfig   = "application/vnd.oci.image.config.v1+json"
	mediaTypeLayer    = "application/vnd.oci.image.layer.v1.tar+gzip"

	// annotationImageName is the full image name containerd's importer
	// gives the image an index entry points at.
	annotationImageName = "io.containerd.image.name"
	annotationRefName   = "org.opencontainers.image.ref.name"

	defaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

type platform struct {
	Architecture string `json:"architecture"`
	OS           string `json:"os"`
}

type descriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Size        int64             `json:"size"`
	Annotations map[string]string `json:"annotations,omitempty"`
	Platform    *platform         `json:"platform,omitempty"`
}

type manifest struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Config        descriptor   `json:"config"`
	Layers        []descriptor `json:"layers"`
}

type index struct {
	SchemaVersion int          `json:"schemaVersion"`
	MediaType     string       `json:"mediaType"`
	Manifests     []descriptor `json:"manifests"`
}

type containerConfig struct {
	Env        []string `json:"Env"`
	Entrypoint []string `json:"Entrypoint,omitempty"`
	Cmd        []string `json:"Cmd,omitempty"`
	User       string   `json:"User,omitempty"`
	WorkingDir string   `json:"WorkingDir"`
}

type rootFS struct {
	Type    string   `json:"type"`
	DiffIDs []string `json:"diff_ids"`
}

type history struct {
	Created   string `json:"created"`
	CreatedBy string `json:"created_by"`
}

type imageConfig struct {
	Created      string          `json:"created"`
	Architecture string          `json:"architecture"`
	OS           string          `json:"os"`
	Config       containerConfig `json:"config"`
	RootFS       rootFS          `json:"rootfs"`
	History      []history       `json:"history"`
}

func newImageConfig(s imageSpec, layers []layerBlob) imageConfig {
	created := epoch().Format("2006-01-02T15:04:05Z")
	c := imageConfig{
		Created:      created,
		Architecture: runtime.GOARCH,
		OS:           "linux",
		Config: containerConfig{
			Env:        []string{defaultPath},
			Entrypoint: s.entrypoint,
			Cmd:        s.cmd,
			User:       s.user,
			WorkingDir: "/",
		},
		RootFS: rootFS{Type: "layers"},
	}
	for i, l := range layers {
		c.RootFS.DiffIDs = append(c.RootFS.DiffIDs, l.diffID)
		by := "nodekit localcri: busybox rootfs"
		if i > 0 {
			by = "nodekit localcri: " + s.name + " files"
		}
		c.History = append(c.History, history{Created: created, CreatedBy: by})
	}
	return c
}
