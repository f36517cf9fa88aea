// Package podconfig owns where a node agent's pods come from: the pod
// sources — the API server (APISource: pods bound to this node, through a
// field-selected list+watch), a static-manifest directory (FileSource) and an
// HTTP URL (HTTPSource), each a nodekit.Source — and the Merger that turns
// their snapshots and increments into one ordered stream of
// nodekit.PodUpdate with upstream kubelet semantics: REMOVE, ADD, UPDATE,
// DELETE, RECONCILE, and SeenAllSources once every source has been read.
//
// Static pods (from files and URLs) are decoded strictly and validated by
// DecodeManifest, get the defaults the API server would give them, a name
// suffixed with the node name, a UID derived from their content, node and
// source, and the kubernetes.io/config.* annotations. Errors name the file
// or URL and the field; one bad manifest never stops the others.
//
// CheckpointSource wraps the API source for offline autonomy: it keeps the
// node's pods and the ConfigMaps, Secrets, Services, service account tokens
// and Node they use, serves those objects through API server outages
// (Objects), and, given a file, persists them (WriteCheckpoint: atomic,
// versioned, checksummed, mode 0600 as it holds Secrets) so that an agent
// started while the API server is unreachable runs its pods from it.
//
// Cost and ownership. The API source sends a SET only for a list (the
// first, and a re-list after a watch could not be resumed, which catches
// deletions missed during an outage); each watch event in between is an ADD,
// UPDATE or REMOVE of one pod, dropped when its resourceVersion is not newer
// than the one sent. The merger's work for an increment is O(1) in the
// number of pods; a SET (lists, the file and HTTP sources) is diffed
// against the source's pods in O(n). Who owns what: a source gives the pods
// of an update away and never reads them again (the API source sends the
// objects the reflector decoded, uncopied, and keeps only their UIDs and
// resourceVersions; it drops their managedFields, which nothing on the
// node reads, so the pods the agent keeps and serves lack them where
// kubelet's have them); the merger keeps them as its state, unmodified (its
// annotations go into a shallow copy);
// every pod it emits is a deep copy the receiver owns and may change, the
// one copy a pod costs on its way through. With WithSharedPods (a receiver
// that modifies no pod, as syncloop; fullagent sets it) the merger emits
// its own pods instead, and no copy is made: it never changes a pod once
// emitted, a newer version of a pod is a new object sharing what did not
// change. The checkpoint source keeps copies of its own (without
// managedFields), or, with CheckpointConfig.SharedPods (its receiver a
// merger), the very pods it forwards.
//
// It does not run pods, admit them, create mirror pods or publish status;
// it never writes to the API server. A vendor's own source (an MQTT topic, a
// local database) is any nodekit.Source handed to New.
//
//	m := podconfig.New([]nodekit.Source{
//		podconfig.NewAPISource(nodeClient, nodeName),
//		podconfig.NewFileSource("/etc/kubernetes/manifests", nodeName, clock.RealClock{}),
//	}, podconfig.WithRecorder(recorder))
//	go m.Run(ctx)
//	for u := range m.Updates() {
//		// hand u to the sync loop; before removing pods it has not been
//		// told about, it checks m.SeenAllSources()
//	}
package podconfig
