// Package smpatch computes two-way strategic merge patches: the patch
// that turns one JSON document of a Kubernetes API type into another,
// lists merged by the keys the type's Go struct tags declare
// (patchStrategy, patchMergeKey), as the API server applies them.
//
// Its patches are byte for byte those of apimachinery's
// strategicpatch.CreateTwoWayMergePatch, tested against it: the same
// null for a removed field, the same $setElementOrder, $patch: delete,
// $deleteFromPrimitiveList and $retainKeys directives, the same key and
// element order. It exists because strategicpatch also carries OpenAPI
// schema support (kube-openapi, gnostic, two YAML libraries) that a node
// agent, which only diffs the Go types it holds, never uses, and that
// is linked into every binary importing it: about 1.5 MiB of code and a
// quarter of a megabyte of heap allocated at start-up.
//
// What it does not do, because no node agent's diff needs it: three-way
// patches, applying patches, directives in the input documents, and
// OpenAPI schemas.
package smpatch
