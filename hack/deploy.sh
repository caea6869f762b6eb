#!/usr/bin/env bash
# Installs or removes the operator as users do: deploy/ (CRDs, namespace, RBAC, the manager
# Deployment) applied with kubectl's kustomize, the image set to IMG. deploy/ itself is not edited:
# the image is set by an overlay in .local/deploy/ that names deploy/ as its base.
#
#   hack/deploy.sh apply IMG    apply, then wait until the operator's Deployment is rolled out
#   hack/deploy.sh delete IMG   delete everything apply created (the CRDs, and so every CR, too)
#
# Uses KUBECONFIG (make deploy sets the local cluster's when it is unset) and kubectl from PATH.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
overlay="$repo/.local/deploy"
namespace=ansible-operator-system
deployment=ansible-operator-controller-manager
# How long `delete` waits for everything to be gone.
delete_timeout=${DEPLOY_DELETE_TIMEOUT:-180s}

log() { echo "deploy: $*"; }
die() { echo "deploy: $*" >&2; exit 1; }

# The overlay: deploy/ with the image `ansible-operator` replaced by $1 (name[:tag] or name@digest).
write_overlay() {
  local image=$1 name tag="" digest=""
  if [[ "$image" == *@* ]]; then
    name=${image%@*} digest=${image#*@}
  elif [[ "${image##*/}" == *:* ]]; then
    name=${image%:*} tag=${image##*:}
  else
    name=$image
  fi
  mkdir -p "$overlay"
  {
    echo "# Written by hack/deploy.sh: deploy/ with the image $image."
    echo "apiVersion: kustomize.config.k8s.io/v1beta1"
    echo "kind: Kustomization"
    echo "resources:"
    echo "  - ../../deploy"
    echo "images:"
    echo "  - name: ansible-operator"
    echo "    newName: $name"
    if [[ -n "$tag" ]]; then echo "    newTag: \"$tag\""; fi
    if [[ -n "$digest" ]]; then echo "    digest: $digest"; fi
  } >"$overlay/kustomization.yaml"
}

action=${1:-}
image=${2:-}
[[ -n "$image" && ( "$action" == apply || "$action" == delete ) ]] || die "usage: $0 apply|delete IMG"
write_overlay "$image"
case "$action" in
  apply)
    log "kubectl apply -k deploy/ with image $image (${KUBECONFIG:-the current kubectl context})"
    kubectl apply -k "$overlay"
    log "waiting for deployment/$deployment in $namespace"
    kubectl -n "$namespace" rollout status "deployment/$deployment" --timeout=180s || {
      kubectl -n "$namespace" get pods -o wide >&2 || true
      die "the operator did not become ready; kubectl -n $namespace describe pods"
    }
    ;;
  delete)
    log "kubectl delete -k deploy/ (${KUBECONFIG:-the current kubectl context})"
    kubectl delete -k "$overlay" --ignore-not-found --wait=true --timeout="$delete_timeout" || {
      # A CRD goes only once every custom resource of it has: one whose finalizer no operator will
      # run any more (its operator was just deleted too) holds it for ever.
      crds=$(kubectl get -k "$overlay" --ignore-not-found -o name | sed -n 's|^customresourcedefinition[^/]*/||p')
      held=$(for crd in $crds; do
        kubectl get "$crd" --all-namespaces --ignore-not-found -o \
          jsonpath='{range .items[?(@.metadata.finalizers)]}{.kind} {.metadata.namespace}/{.metadata.name}: {.metadata.finalizers}{"\n"}{end}' \
          2>/dev/null || true
      done)
      if [[ -n "$held" ]]; then
        die "not deleted within $delete_timeout: these custom resources still have finalizers, and their CRDs go only after them; their operator is deleted, so remove the finalizers (kubectl patch <kind> <name> -n <namespace> --type=merge -p '{\"metadata\":{\"finalizers\":null}}') or delete the resources before undeploying:
$held"
      fi
      die "not deleted within $delete_timeout (DEPLOY_DELETE_TIMEOUT)"
    }
    ;;
esac
