#!/usr/bin/env bash
# Runs examples/fullagent as node "$NODE" (default nodekit-node) against the
# local environment that hack/local-up.sh started, with its state under
# _output/local/agent. Ctrl-C stops the agent; its pods keep running.
set -euo pipefail
cd "$(dirname "$0")/.."
node=${NODE:-nodekit-node}
state=$PWD/_output/local/agent
eval "$(go run ./hack/localenv env --node "$node")"
mkdir -p "$state/manifests"
cat > "$state/config.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
staticPodPath: $state/manifests
podLogsDir: $state/logs
clusterDomain: cluster.local
YAML
go build -o _output/bin/fullagent ./examples/fullagent
echo "run-agent: node $node, node IP $NODEKIT_NODE_IP, runtime $NODEKIT_CRI_ENDPOINT"
echo "run-agent: drop pod manifests into $state/manifests; KUBECONFIG=$KUBECONFIG for kubectl"
exec _output/bin/fullagent \
  --kubeconfig "$NODEKIT_NODE_KUBECONFIG" \
  --config "$state/config.yaml" \
  --hostname-override "$node" \
  --node-ip "$NODEKIT_NODE_IP" \
  --root-dir "$state/root" \
  --container-runtime-endpoint "$NODEKIT_CRI_ENDPOINT" "$@"
