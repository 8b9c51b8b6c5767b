// Package istio holds no production code. Its tests render the Kustomize manifests under
// istio/ (base and every overlay), decode every object strictly into its Kubernetes, Istio or
// Gateway API type, and cross-check the pieces against each other and against the server's own
// configuration rules: the mesh's ext_authz provider against the Service and the Deployment, the
// limits ConfigMap against `ext-authz check-config`, the EnvoyFilter patches against the Envoy
// types they claim and the per-route keys the server accepts, and the body-size settings against
// the listener buffer and the server's gRPC receive limit.
//
// It is a separate Go module so that the Kubernetes, Istio and Kustomize dependencies stay out of
// the server's module. Run it with `cd istio && go test ./...` (or istio/test.sh).
package istio
