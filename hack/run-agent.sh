#!/usr/bin/env bash
# Runs examples/fullagent as node "$NODE" (default nodekit-node) against the
# local environment that hack/local-up.sh started, with its state under
# _output/local/agent. Ctrl-C stops the agent; its pods keep running.
# With --background the agent runs detached (log _output/local/agent/
# fullagent.log, pidfile fullagent.pid) and hack/local-down.sh stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
background=
if [[ ${1:-} == --background ]]; then
  background=1
  shift
fi
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
address: $NODEKIT_NODE_IP
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $NODEKIT_CA_FILE}
authorization:
  mode: Webhook
YAML
# Built as upstream builds its release kubelet (examples/fullagent/main.go
# says why grpcnotrace matters: a 40% smaller, less resident binary), but
# static: no cgo, so no libc mapped and no pthread stacks
# (examples/fullagent/doc.go says what that changes).
CGO_ENABLED=0 go build -trimpath -tags selinux,notest,grpcnotrace -o _output/bin/fullagent ./examples/fullagent
echo "run-agent: node $node, node IP $NODEKIT_NODE_IP, runtime $NODEKIT_CRI_ENDPOINT"
echo "run-agent: drop pod manifests into $state/manifests; KUBECONFIG=$KUBECONFIG for kubectl"
args=(--kubeconfig "$NODEKIT_NODE_KUBECONFIG"
  --config "$state/config.yaml"
  --hostname-override "$node"
  --node-ip "$NODEKIT_NODE_IP"
  --root-dir "$state/root"
  --container-runtime-endpoint "$NODEKIT_CRI_ENDPOINT" "$@")
if [[ -z $background ]]; then
  exec _output/bin/fullagent "${args[@]}"
fi
if [[ -f $state/fullagent.pid ]] && pid=$(cat "$state/fullagent.pid") &&
  [[ $(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null) == *fullagent* ]]; then
  echo "run-agent: fullagent already running in the background (pid $pid, log $state/fullagent.log)"
  exit 0
fi
setsid _output/bin/fullagent "${args[@]}" > "$state/fullagent.log" 2>&1 < /dev/null &
echo $! > "$state/fullagent.pid"
echo "run-agent: fullagent running in the background (pid $!, log $state/fullagent.log); make down stops it"
