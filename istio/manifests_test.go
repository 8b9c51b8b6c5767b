package istio

import (
	"encoding/json"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
	apinetworking "istio.io/api/networking/v1alpha3"
	clinetworkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// istioOperator is the part of an IstioOperator these manifests use. Decoded strictly: a field
// outside this subset is an error, so the snippet stays the small thing docs/istio.md describes.
type istioOperator struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		MeshConfig json.RawMessage `json:"meshConfig"`
		Components struct {
			EgressGateways []struct {
				Name    string `json:"name"`
				Enabled bool   `json:"enabled"`
			} `json:"egressGateways"`
		} `json:"components"`
	} `json:"spec"`
}

// istiodValues is the part of the istiod chart's values these manifests use.
type istiodValues struct {
	MeshConfig json.RawMessage `json:"meshConfig"`
}

func readStrict(t *testing.T, file string, v any) {
	t.Helper()
	y, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	j, err := yaml.YAMLToJSON(y)
	if err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	if err := strictJSON(j, v); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
}

// meshes loads both mesh-config snippets; they must declare the same provider.
func meshes(t *testing.T) []mesh {
	t.Helper()
	var op istioOperator
	readStrict(t, "mesh/istio-operator.yaml", &op)
	if op.APIVersion != "install.istio.io/v1alpha1" || op.Kind != "IstioOperator" {
		t.Fatalf("mesh/istio-operator.yaml: %s/%s is not an IstioOperator", op.APIVersion, op.Kind)
	}
	if !slices.ContainsFunc(op.Spec.Components.EgressGateways, func(g struct {
		Name    string `json:"name"`
		Enabled bool   `json:"enabled"`
	}) bool {
		return g.Name == "istio-egressgateway" && g.Enabled
	}) {
		t.Error("mesh/istio-operator.yaml: the istio-egressgateway the egress-gateway overlay needs is not enabled")
	}
	m1, err := loadMesh("mesh/istio-operator.yaml", op.Spec.MeshConfig)
	if err != nil {
		t.Fatal(err)
	}
	var vals istiodValues
	readStrict(t, "mesh/istiod-values.yaml", &vals)
	m2, err := loadMesh("mesh/istiod-values.yaml", vals.MeshConfig)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(m1.Provider, m2.Provider) {
		t.Fatalf("the providers of mesh/istio-operator.yaml and mesh/istiod-values.yaml differ:\n%v\n%v", m1.Provider, m2.Provider)
	}
	return []mesh{m1, m2}
}

func report(t *testing.T, what string, errs []error) {
	t.Helper()
	for _, err := range errs {
		t.Errorf("%s: %v", what, err)
	}
}

func envoyFilters(objs []object) []*clinetworkingv1alpha3.EnvoyFilter {
	return find[*clinetworkingv1alpha3.EnvoyFilter](objs)
}

// TestOverlays renders every overlay, decodes it strictly, and cross-checks it.
func TestOverlays(t *testing.T) {
	ms := meshes(t)
	std, err := loadStandalone("../envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	checks := map[string]struct {
		path    func([]object, []patch) []error
		context apinetworking.EnvoyFilter_PatchContext
		// routes: the overlay carries envoy.yaml's per-route limits.
		routes bool
	}{
		"overlays/egress-gateway": {checkEgressGateway, apinetworking.EnvoyFilter_GATEWAY, true},
		"overlays/ambient":        {checkAmbient, apinetworking.EnvoyFilter_SIDECAR_INBOUND, false},
	}
	for _, dir := range overlays {
		t.Run(strings.TrimPrefix(dir, "overlays/"), func(t *testing.T) {
			t.Parallel()
			objs := renderAndDecode(t, dir)
			w, errs := checkWorkload(objs)
			report(t, "workload", errs)
			if w == nil {
				t.FailNow()
			}
			if out, err := checkConfigCLI(w.LimitsYAML); err != nil {
				t.Errorf("ext-authz check-config rejects the ConfigMap's limits file: %v\n%s", err, out)
			}
			patches, errs := decodePatches(envoyFilters(objs))
			report(t, "EnvoyFilter", errs)
			c, ok := checks[dir]
			if !ok {
				t.Fatalf("no path checks for %s", dir)
			}
			buf := listenerBuffer(patches, c.context)
			for _, m := range ms {
				report(t, "provider", checkProvider(m, w, buf))
				report(t, "route limits", checkRouteLimits(patches, w, m))
				report(t, "parity", checkParity(std, m, patches, c.routes))
			}
			report(t, "AuthorizationPolicy", checkCustomPolicies(objs))
			report(t, "identity", checkIdentity(w, patches, c.context))
			report(t, dir, c.path(objs, patches))
			report(t, "namespaces", checkNamespaces(objs))
		})
	}
}

// checkNamespaces: every namespace the render uses exists in it, except istio-system (the
// mesh's own), and no object is left without one.
func checkNamespaces(objs []object) []error {
	var errs []error
	have := map[string]bool{"istio-system": true}
	for _, n := range find[*corev1.Namespace](objs) {
		have[n.Name] = true
	}
	for _, o := range objs {
		if o.Kind == "Namespace" {
			continue
		}
		if o.Namespace == "" {
			errs = append(errs, errors.New(o.String()+": no namespace"))
		} else if !have[o.Namespace] {
			errs = append(errs, errors.New(o.String()+": namespace not created by the render"))
		}
	}
	return errs
}

// TestBase renders the base alone: it must be a complete workload too.
func TestBase(t *testing.T) {
	t.Parallel()
	objs := renderAndDecode(t, "base")
	_, errs := checkWorkload(objs)
	report(t, "workload", errs)
	report(t, "namespaces", checkNamespaces(objs))
}

// TestEveryOverlayIsTested: a new overlay directory must be added to overlays (and checks).
func TestEveryOverlayIsTested(t *testing.T) {
	t.Parallel()
	got := overlayDirs(t)
	want := slices.Clone(overlays)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("overlays/ holds %q, the tests know %q", got, want)
	}
}

// TestDocs: docs/istio.md names what the manifests expect the reader to create and apply.
func TestDocs(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../docs/istio.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	objs := renderAndDecode(t, "base")
	d := one[*appsv1.Deployment](t, objs, "ext-authz")
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if ref := e.ValueFrom; ref != nil && ref.SecretKeyRef != nil {
			for _, s := range []string{ref.SecretKeyRef.Name, "--from-literal=" + ref.SecretKeyRef.Key + "="} {
				if !strings.Contains(doc, s) {
					t.Errorf("docs/istio.md does not tell how to create Secret %s key %s (no %q)", ref.SecretKeyRef.Name, ref.SecretKeyRef.Key, s)
				}
			}
		}
	}
	musts := []string{"istio/mesh/istio-operator.yaml", "istio/mesh/istiod-values.yaml", providerName}
	for _, dir := range overlays {
		musts = append(musts, "kubectl apply -k istio/"+dir, "kubectl delete -k istio/"+dir)
	}
	for _, s := range musts {
		if !strings.Contains(doc, s) {
			t.Errorf("docs/istio.md does not mention %q", s)
		}
	}
}
