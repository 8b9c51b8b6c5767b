#!/usr/bin/env bash
# Validates the Istio manifests: renders every Kustomize overlay, decodes every object strictly,
# and cross-checks them against the server's own configuration rules and envoy/envoy.yaml.
# A separate Go module (istio/go.mod) keeps the Kubernetes and Istio libraries out of the server's.
set -euo pipefail
cd "$(dirname "$0")"
go vet ./...
go test -count=1 "$@" ./...
