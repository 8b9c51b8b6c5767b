package istio

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	clinetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	clinetworkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	clisecurityv1 "istio.io/client-go/pkg/apis/security/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// overlays are the installable renders. Every directory under overlays/ must be listed here
// (TestEveryOverlayIsTested), so that a new overlay cannot go unvalidated.
var overlays = []string{"overlays/egress-gateway", "overlays/ambient"}

// object is one rendered manifest: its raw YAML and its strictly decoded typed form.
type object struct {
	Kind      string
	Name      string
	Namespace string
	YAML      []byte
	Typed     any
}

func (o object) String() string { return fmt.Sprintf("%s %s/%s", o.Kind, o.Namespace, o.Name) }

// render runs kustomize (the pinned sigs.k8s.io/kustomize/api, in process) on dir and returns
// each resource's YAML.
func render(dir string) ([][]byte, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, fmt.Errorf("kustomize build %s: %w", dir, err)
	}
	var out [][]byte
	for _, r := range m.Resources() {
		y, err := r.AsYAML()
		if err != nil {
			return nil, fmt.Errorf("kustomize build %s: %s: %w", dir, r.CurId(), err)
		}
		out = append(out, y)
	}
	return out, nil
}

// renderAndDecode renders dir and decodes every resource strictly.
func renderAndDecode(t *testing.T, dir string) []object {
	t.Helper()
	docs, err := render(dir)
	if err != nil {
		t.Fatal(err)
	}
	var objs []object
	var errs []string
	for _, y := range docs {
		o, err := decodeStrict(y)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		objs = append(objs, o)
	}
	if len(errs) > 0 {
		t.Fatalf("%s: %d object(s) do not decode strictly:\n  %s", dir, len(errs), strings.Join(errs, "\n  "))
	}
	return objs
}

// envelope is a manifest with its spec left raw, decoded with unknown fields rejected.
type envelope struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       json.RawMessage   `json:"spec"`
}

// decodeStrict decodes one manifest into its API type, rejecting unknown and mistyped fields.
//
// Kubernetes and Gateway API types are plain Go structs: encoding/json with
// DisallowUnknownFields is strict. Istio's client-go types embed the istio.io/api protos, whose
// JSON unmarshalers allow unknown fields, so their spec is decoded again with protojson, which
// rejects them.
func decodeStrict(y []byte) (object, error) {
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		return object{}, fmt.Errorf("yaml: %w", err)
	}
	var tm metav1.TypeMeta
	if err := json.Unmarshal(j, &tm); err != nil {
		return object{}, fmt.Errorf("type meta: %w", err)
	}
	gvk := tm.APIVersion + "/" + tm.Kind
	var typed any
	var spec func() proto.Message // the istio.io/api proto of an Istio object's spec
	switch gvk {
	case "v1/Namespace":
		typed = &corev1.Namespace{}
	case "v1/ServiceAccount":
		typed = &corev1.ServiceAccount{}
	case "v1/Service":
		typed = &corev1.Service{}
	case "v1/ConfigMap":
		typed = &corev1.ConfigMap{}
	case "apps/v1/Deployment":
		typed = &appsv1.Deployment{}
	case "policy/v1/PodDisruptionBudget":
		typed = &policyv1.PodDisruptionBudget{}
	case "gateway.networking.k8s.io/v1/Gateway":
		typed = &gwv1.Gateway{}
	case "networking.istio.io/v1/ServiceEntry":
		o := &clinetworkingv1.ServiceEntry{}
		typed, spec = o, func() proto.Message { return &o.Spec }
	case "networking.istio.io/v1/Gateway":
		o := &clinetworkingv1.Gateway{}
		typed, spec = o, func() proto.Message { return &o.Spec }
	case "networking.istio.io/v1/VirtualService":
		o := &clinetworkingv1.VirtualService{}
		typed, spec = o, func() proto.Message { return &o.Spec }
	case "networking.istio.io/v1/DestinationRule":
		o := &clinetworkingv1.DestinationRule{}
		typed, spec = o, func() proto.Message { return &o.Spec }
	case "networking.istio.io/v1alpha3/EnvoyFilter":
		o := &clinetworkingv1alpha3.EnvoyFilter{}
		typed, spec = o, func() proto.Message { return &o.Spec }
	case "security.istio.io/v1/AuthorizationPolicy":
		o := &clisecurityv1.AuthorizationPolicy{}
		typed, spec = o, func() proto.Message { return &o.Spec }
	default:
		return object{}, fmt.Errorf("%s: no API type known for this apiVersion/kind (add it to decodeStrict)", gvk)
	}
	if spec == nil {
		if err := strictJSON(j, typed); err != nil {
			return object{}, fmt.Errorf("%s: %w", gvk, err)
		}
	} else {
		var env envelope
		if err := strictJSON(j, &env); err != nil {
			return object{}, fmt.Errorf("%s %s: %w", gvk, env.Metadata.Name, err)
		}
		// Type meta and metadata through the client-go type (spec is re-done strictly below).
		if err := json.Unmarshal(j, typed); err != nil {
			return object{}, fmt.Errorf("%s %s: %w", gvk, env.Metadata.Name, err)
		}
		if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(env.Spec, spec()); err != nil {
			return object{}, fmt.Errorf("%s %s: spec: %w", gvk, env.Metadata.Name, err)
		}
	}
	m, ok := typed.(metav1.Object)
	if !ok {
		return object{}, fmt.Errorf("%s: %T has no object metadata", gvk, typed)
	}
	if m.GetName() == "" {
		return object{}, fmt.Errorf("%s: no metadata.name", gvk)
	}
	return object{Kind: tm.Kind, Name: m.GetName(), Namespace: m.GetNamespace(), YAML: y, Typed: typed}, nil
}

// strictJSON decodes j into v, rejecting unknown fields and trailing data.
func strictJSON(j []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("trailing data after the object")
	}
	return nil
}

// find returns the objects of type T (a pointer type), sorted by namespace and name.
func find[T any](objs []object) []T {
	var out []T
	for _, o := range objs {
		if v, ok := o.Typed.(T); ok {
			out = append(out, v)
		}
	}
	return out
}

// one returns the only object of type T named name, failing the test otherwise.
func one[T metav1.Object](t *testing.T, objs []object, name string) T {
	t.Helper()
	var found []T
	for _, v := range find[T](objs) {
		if v.GetName() == name {
			found = append(found, v)
		}
	}
	if len(found) != 1 {
		var zero T
		t.Fatalf("want exactly one %T named %q, found %d", zero, name, len(found))
	}
	return found[0]
}

// overlayDirs lists the directories under overlays/.
func overlayDirs(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir("overlays")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, filepath.ToSlash(filepath.Join("overlays", e.Name())))
		}
	}
	sort.Strings(out)
	return out
}
