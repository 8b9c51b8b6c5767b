package istio

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
	apinetworking "istio.io/api/networking/v1alpha3"
	clinetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	clinetworkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	clisecurityv1 "istio.io/client-go/pkg/apis/security/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"

	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
)

// The tests below prove that the checks of manifests_test.go can fail: each broken fixture or
// mutation of a good render must be rejected with the expected message.

func wantErr(t *testing.T, errs []error, want string) {
	t.Helper()
	for _, err := range errs {
		if strings.Contains(err.Error(), want) {
			return
		}
	}
	t.Errorf("want an error containing %q, got %d error(s): %v", want, len(errs), errs)
}

// TestBrokenManifestsDoNotDecode: every file of testdata/broken/decode names, in its first
// line ("# want: ..."), the error strict decoding must give.
func TestBrokenManifestsDoNotDecode(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("testdata/broken/decode/*.yaml")
	if err != nil || len(files) < 5 {
		t.Fatalf("broken fixtures missing: %v %v", files, err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			t.Parallel()
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(b), "\n")
			want, ok := strings.CutPrefix(first, "# want: ")
			if !ok {
				t.Fatalf("%s: first line must be '# want: <error>'", f)
			}
			_, err = decodeStrict(b)
			if err == nil {
				t.Fatalf("decoded without error, want %q", want)
			}
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not contain %q", err, want)
			}
		})
	}
}

func TestBrokenEnvoyFilterPayloads(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/broken/envoyfilter-payloads.yaml")
	if err != nil {
		t.Fatal(err)
	}
	o, err := decodeStrict(b)
	if err != nil {
		t.Fatal(err) // the envelope is valid; only the Envoy payloads are not
	}
	_, errs := decodePatches([]*clinetworkingv1alpha3.EnvoyFilter{o.Typed.(*clinetworkingv1alpha3.EnvoyFilter)})
	wants := []string{
		`patch 0 (HTTP_ROUTE): value is not a valid envoy.config.route.v3.Route`,
		`patch 1 (HTTP_ROUTE): typed_per_filter_config key "envoy.ext_authz" is not Istio's ext_authz filter`,
		`patch 2 (LISTENER): value is not a valid envoy.config.listener.v3.Listener`,
		`patch 3 (HTTP_ROUTE): envoy.filters.http.ext_authz config is not an ExtAuthzPerRoute`,
		`patch 4 (HTTP_FILTER): value is not a valid envoy.extensions.filters.network.http_connection_manager.v3.HttpFilter`,
		`patch 5 (HTTP_FILTER): the ext_proc filter must come after ext_authz`,
		`patch 6 (VIRTUAL_HOST): envoy.filters.http.ext_proc config is not an ExtProcPerRoute`,
	}
	if len(errs) != len(wants) {
		t.Errorf("want %d errors, got %d: %v", len(wants), len(errs), errs)
	}
	for _, w := range wants {
		wantErr(t, errs, w)
	}
	wantErr(t, errs, `unknown field "check_setting"`)
	wantErr(t, errs, `unknown field "per_connection_buffer_limit"`)
	wantErr(t, errs, `unknown field "observability"`)
}

func TestBrokenLimitsFile(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("testdata/broken/limits.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = config.Parse(b, "broken")
	if err == nil || !strings.Contains(err.Error(), "tokns") || !strings.Contains(err.Error(), "fortnight") {
		t.Errorf("config.Parse: want both problems reported, got %v", err)
	}
	out, err := checkConfigCLI(b)
	if err == nil {
		t.Errorf("ext-authz check-config accepted a broken file:\n%s", out)
	} else if !strings.Contains(out, "tokns") {
		t.Errorf("ext-authz check-config failed without naming the problem (%v):\n%s", err, out)
	}
}

func TestBrokenKustomization(t *testing.T) {
	t.Parallel()
	_, err := render("testdata/broken/kustomize-missing")
	if err == nil || !strings.Contains(err.Error(), "serviceentry.yaml") {
		t.Fatalf("want a kustomize build error naming the missing file, got %v", err)
	}
}

// TestBrokenCrossChecks mutates a good render in one way per case and expects the named error.
func TestBrokenCrossChecks(t *testing.T) {
	t.Parallel()
	ms := meshes(t)
	std, err := loadStandalone("../envoy/envoy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// run renders dir, applies mutate, and runs every check of TestOverlays.
	run := func(t *testing.T, dir string, mutate func(objs []object, m *mesh)) []error {
		objs := renderAndDecode(t, dir)
		m := mesh{Source: ms[0].Source, Provider: protoClone(ms[0].Provider)}
		mutate(objs, &m)
		w, errs := checkWorkload(objs)
		if w == nil {
			return errs
		}
		patches, perrs := decodePatches(envoyFilters(objs))
		errs = append(errs, perrs...)
		ctx := apinetworking.EnvoyFilter_GATEWAY
		path := checkEgressGateway
		if dir == "overlays/ambient" {
			ctx, path = apinetworking.EnvoyFilter_SIDECAR_INBOUND, checkAmbient
		}
		errs = append(errs, checkProvider(m, w, listenerBuffer(patches, ctx))...)
		errs = append(errs, checkRouteLimits(patches, w, m)...)
		errs = append(errs, checkCustomPolicies(objs)...)
		errs = append(errs, checkIdentity(w, patches, ctx)...)
		errs = append(errs, path(objs, patches)...)
		errs = append(errs, checkParity(std, m, patches, dir == "overlays/egress-gateway")...)
		return errs
	}
	deployment := func(objs []object) *appsv1.Deployment { return find[*appsv1.Deployment](objs)[0] }
	egress, ambient := "overlays/egress-gateway", "overlays/ambient"
	cases := []struct {
		name, dir, want string
		mutate          func([]object, *mesh)
	}{
		{"unmutated egress render passes", egress, "", func([]object, *mesh) {}},
		{"unmutated ambient render passes", ambient, "", func([]object, *mesh) {}},
		{"service port differs from provider", egress, "provider port 9001 is not the Service's grpc port 9002", func(o []object, _ *mesh) {
			find[*corev1.Service](o)[0].Spec.Ports[0].Port = 9002
		}},
		{"provider service in another namespace", egress, "is not the Service ext-authz.llm-ratelimit.svc.cluster.local", func(_ []object, m *mesh) {
			m.Provider.Service = "ext-authz.default.svc.cluster.local"
		}},
		{"no timeout", egress, "no timeout", func(_ []object, m *mesh) { m.Provider.Timeout = nil }},
		{"timeout below redis timeout", egress, "leaves no room for the server's -redis-timeout", func(_ []object, m *mesh) {
			m.Provider.Timeout = durationpb.New(60e6)
		}},
		{"body above listener buffer", egress, "is above the listener buffer 2097152", func(_ []object, m *mesh) {
			m.Provider.IncludeRequestBodyInCheck.MaxRequestBytes = 2 << 20
		}},
		{"body above server receive limit", egress, "exceeds the server's gRPC receive limit 1048576", func(o []object, _ *mesh) {
			c := &deployment(o).Spec.Template.Spec.Containers[0]
			for i, a := range c.Args {
				if strings.HasPrefix(a, "-max-recv-bytes=") {
					c.Args[i] = "-max-recv-bytes=1048576"
				}
			}
		}},
		{"body as string", egress, "packAsBytes is false", func(_ []object, m *mesh) {
			m.Provider.IncludeRequestBodyInCheck.PackAsBytes = false
		}},
		{"one replica", egress, "want at least 2 replicas", func(o []object, _ *mesh) { deployment(o).Spec.Replicas = ptr.To[int32](1) }},
		{"writable root filesystem", egress, "readOnlyRootFilesystem must be true", func(o []object, _ *mesh) {
			deployment(o).Spec.Template.Spec.Containers[0].SecurityContext.ReadOnlyRootFilesystem = ptr.To(false)
		}},
		{"probe on the wrong port", egress, "readiness probe checks port 9090", func(o []object, _ *mesh) {
			deployment(o).Spec.Template.Spec.Containers[0].ReadinessProbe.GRPC.Port = 9090
		}},
		{"limits mounted with subPath", egress, "is a subPath mount", func(o []object, _ *mesh) {
			deployment(o).Spec.Template.Spec.Containers[0].VolumeMounts[0].SubPath = "limits.yaml"
		}},
		{"inline redis url", egress, "REDIS_URL must come from a Secret", func(o []object, _ *mesh) {
			c := &deployment(o).Spec.Template.Spec.Containers[0]
			for i := range c.Env {
				if c.Env[i].Name == "REDIS_URL" {
					c.Env[i] = corev1.EnvVar{Name: "REDIS_URL", Value: "redis://:secret@redis:6379"}
				}
			}
		}},
		{"egress tenant from a client header", egress, "tenant.source header: the application can send any tenant", func(o []object, _ *mesh) {
			cm := find[*corev1.ConfigMap](o)[0]
			cm.Data["limits.yaml"] = strings.Replace(cm.Data["limits.yaml"], "source: principal", "source: header\n  header: x-tenant-id", 1)
		}},
		{"egress class from a client header", egress, "priority.header x-llm-priority: the application can name any class", func(o []object, _ *mesh) {
			cm := find[*corev1.ConfigMap](o)[0]
			cm.Data["limits.yaml"] = strings.Replace(cm.Data["limits.yaml"], "priority:\n", "priority:\n  header: x-llm-priority\n", 1)
		}},
		{"egress keeps the client's x-envoy-auth headers", egress, "removes the client's x-envoy-auth-* headers", func(o []object, _ *mesh) {
			ps := envoyFilters(o)[0].Spec.ConfigPatches
			envoyFilters(o)[0].Spec.ConfigPatches = ps[:len(ps)-1]
		}},
		{"ambient keeps the client's x-envoy-auth headers", ambient, "removes the client's x-envoy-auth-* headers", func(o []object, _ *mesh) {
			ps := envoyFilters(o)[0].Spec.ConfigPatches
			envoyFilters(o)[0].Spec.ConfigPatches = ps[:len(ps)-1]
		}},
		{"invalid limits in the ConfigMap", egress, "tenant.source", func(o []object, _ *mesh) {
			cm := find[*corev1.ConfigMap](o)[0]
			cm.Data["limits.yaml"] = strings.Replace(cm.Data["limits.yaml"], "source: principal", "source: spiffe", 1)
		}},
		{"route patch names no route", egress, `route "openai-x" is not a gateway route of api.openai.com`, func(o []object, _ *mesh) {
			envoyFilters(o)[0].Spec.ConfigPatches[2].Match.GetRouteConfiguration().GetVhost().GetRoute().Name = "openai-x"
		}},
		{"route patch names no vhost", egress, `vhost "api.openai.com:443" is not <host>:<port>`, func(o []object, _ *mesh) {
			envoyFilters(o)[0].Spec.ConfigPatches[2].Match.GetRouteConfiguration().GetVhost().Name = "api.openai.com:443"
		}},
		{"route limits the server rejects", egress, `context_extensions[requests_burst]: needs a requests_per_* key`, func(o []object, _ *mesh) {
			setExt(envoyFilters(o)[0].Spec.ConfigPatches[2], "requests_burst", "10")
		}},
		{"policy on sidecars", egress, "does not select the egress gateway", func(o []object, _ *mesh) {
			find[*clisecurityv1.AuthorizationPolicy](o)[0].Spec.Selector.MatchLabels = map[string]string{"app": "chatbot"}
		}},
		{"policy of another provider", egress, `provider "opa" is not the mesh's`, func(o []object, _ *mesh) {
			find[*clisecurityv1.AuthorizationPolicy](o)[0].Spec.GetProvider().Name = "opa"
		}},
		{"gateway hop without mTLS", egress, "is not ISTIO_MUTUAL: source.principal would be empty", func(o []object, _ *mesh) {
			find[*clinetworkingv1.Gateway](o)[0].Spec.Servers[0].Tls.Mode = 0
		}},
		{"no TLS origination", egress, "want tls SIMPLE with sni api.anthropic.com on port 443", func(o []object, _ *mesh) {
			for _, d := range find[*clinetworkingv1.DestinationRule](o) {
				if d.Spec.Host == "api.anthropic.com" {
					d.Spec.TrafficPolicy.PortLevelSettings[0].Tls.Mode = 0
				}
			}
		}},
		{"ambient listener buffer left at the default", ambient, "is above the listener buffer 1048576", func(o []object, _ *mesh) {
			envoyFilters(o)[0].Spec.ConfigPatches = envoyFilters(o)[0].Spec.ConfigPatches[1:]
		}},
		{"ambient EnvoyFilter by selector", ambient, "a waypoint ignores workloadSelector", func(o []object, _ *mesh) {
			envoyFilters(o)[0].Spec.TargetRefs = nil
		}},
		{"ambient EnvoyFilter on the wrong listener", ambient, `listener "virtualInbound"`, func(o []object, _ *mesh) {
			envoyFilters(o)[0].Spec.ConfigPatches[0].Match.GetListener().Name = "virtualInbound"
		}},
		{"egress credentials sent to the limiter", egress, "disallowed_headers", func(o []object, _ *mesh) {
			envoyFilters(o)[0].Spec.ConfigPatches[1].Patch.Value.GetFields()["typed_config"].GetStructValue().Fields["disallowed_headers"] =
				structpb.NewStructValue(&structpb.Struct{Fields: map[string]*structpb.Value{"patterns": structpb.NewListValue(&structpb.ListValue{})}})
		}},
		{"egress fails closed unlike envoy.yaml", egress, "failOpen false, envoy.yaml failure_mode_allow true", func(_ []object, m *mesh) {
			m.Provider.FailOpen = false
		}},
		{"egress route limit differs from envoy.yaml", egress, "route openai-embeddings: context_extensions", func(o []object, _ *mesh) {
			setExt(envoyFilters(o)[0].Spec.ConfigPatches[2], "tokens_per_minute", "999")
		}},
		{"egress response path on another cluster", egress, `cluster "outbound|9001||ext-authz.default.svc.cluster.local" is not Istio's cluster of the mesh provider`, func(o []object, _ *mesh) {
			extProcConfig(envoyFilters(o)[0].Spec.ConfigPatches[3]).Fields["grpc_service"].GetStructValue().
				Fields["envoy_grpc"].GetStructValue().Fields["cluster_name"] = structString("outbound|9001||ext-authz.default.svc.cluster.local")
		}},
		{"egress provider moved, response path left behind", egress, `is not Istio's cluster of the mesh provider "outbound|9002||`, func(o []object, m *mesh) {
			find[*corev1.Service](o)[0].Spec.Ports[0].Port = 9002
			m.Provider.Port = 9002
		}},
		{"egress response path holds responses", egress, "settings differ from envoy/envoy.yaml's ext_proc filter", func(o []object, _ *mesh) {
			extProcConfig(envoyFilters(o)[0].Spec.ConfigPatches[3]).Fields["observability_mode"] = structpb.NewBoolValue(false)
		}},
		{"egress response path without the reservation", egress, "settings differ from envoy/envoy.yaml's ext_proc filter", func(o []object, _ *mesh) {
			delete(extProcConfig(envoyFilters(o)[0].Spec.ConfigPatches[3]).Fields, "metadata_options")
		}},
		{"egress without the response path", egress, "want one EnvoyFilter patch adding the ext_proc filter", func(o []object, _ *mesh) {
			ps := envoyFilters(o)[0].Spec.ConfigPatches
			envoyFilters(o)[0].Spec.ConfigPatches = append(ps[:3:3], ps[4:]...)
		}},
		{"egress response path never enabled for anthropic", egress, "no VIRTUAL_HOST patch enables it on api.anthropic.com:80", func(o []object, _ *mesh) {
			envoyFilters(o)[0].Spec.ConfigPatches = envoyFilters(o)[0].Spec.ConfigPatches[:5]
		}},
		{"ambient response path disabled by default", ambient, "the ext_proc filter is disabled by default", func(o []object, _ *mesh) {
			envoyFilters(o)[0].Spec.ConfigPatches[2].Patch.Value.Fields["disabled"] = structpb.NewBoolValue(true)
		}},
		{"ambient response path on another cluster", ambient, "is not Istio's cluster of the mesh provider", func(o []object, _ *mesh) {
			extProcConfig(envoyFilters(o)[0].Spec.ConfigPatches[2]).Fields["grpc_service"].GetStructValue().
				Fields["envoy_grpc"].GetStructValue().Fields["cluster_name"] = structString("ext_authz")
		}},
		{"ambient policy by selector", ambient, "no targetRefs", func(o []object, _ *mesh) {
			find[*clisecurityv1.AuthorizationPolicy](o)[0].Spec.TargetRefs = nil
		}},
		{"ambient service entry without waypoint", ambient, `istio.io/use-waypoint "" names no waypoint`, func(o []object, _ *mesh) {
			delete(find[*clinetworkingv1.ServiceEntry](o)[0].Labels, "istio.io/use-waypoint")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			errs := run(t, c.dir, c.mutate)
			if c.want == "" {
				for _, err := range errs {
					t.Error(err)
				}
				return
			}
			wantErr(t, errs, c.want)
		})
	}
}

// setExt sets one context_extensions key in the ExtAuthzPerRoute of an HTTP_ROUTE patch.
func setExt(cp *apinetworking.EnvoyFilter_EnvoyConfigObjectPatch, key, value string) {
	ext := cp.GetPatch().GetValue().GetFields()["typed_per_filter_config"].GetStructValue().
		GetFields()[extAuthzFilter].GetStructValue().GetFields()["check_settings"].GetStructValue().
		GetFields()["context_extensions"].GetStructValue()
	ext.Fields[key] = structString(value)
}

func structString(s string) *structpb.Value { return structpb.NewStringValue(s) }

// extProcConfig is the ExternalProcessor (typed_config) of an HTTP_FILTER patch.
func extProcConfig(cp *apinetworking.EnvoyFilter_EnvoyConfigObjectPatch) *structpb.Struct {
	return cp.GetPatch().GetValue().GetFields()["typed_config"].GetStructValue()
}
