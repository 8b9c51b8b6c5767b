package istio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	earlyhmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/http/early_header_mutation/header_mutation/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	apinetworking "istio.io/api/networking/v1alpha3"
	clinetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	clinetworkingv1alpha3 "istio.io/client-go/pkg/apis/networking/v1alpha3"
	clisecurityv1 "istio.io/client-go/pkg/apis/security/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/llm-ratelimit/llm-ratelimit/internal/config"
)

// Facts of Envoy and Istio the checks rely on.
const (
	// extAuthzFilter is the name Istio gives the ext_authz HTTP filter it generates for a CUSTOM
	// AuthorizationPolicy; typed_per_filter_config must use the same key.
	extAuthzFilter = "envoy.filters.http.ext_authz"
	// extProcFilter is the name of the ext_proc HTTP filter, in envoy.yaml and the EnvoyFilters;
	// typed_per_filter_config must use the same key.
	extProcFilter = "envoy.filters.http.ext_proc"
	// envoyDefaultBuffer is Envoy's per_connection_buffer_limit_bytes when nothing sets it.
	envoyDefaultBuffer = 1 << 20
	// oneRead is the margin the listener buffer needs above max_request_bytes: ext_authz asks once
	// its buffer holds max_request_bytes, and the read that got it there is buffered whole.
	oneRead = 64 << 10
	// maxHeaderBytes bounds what a CheckRequest carries besides the body: Envoy's default
	// max_request_headers_kb is 60, plus room for the other attributes.
	maxHeaderBytes = 96 << 10
	// istioDefaultTimeout is what the gRPC provider uses without an explicit timeout.
	istioDefaultTimeout = 600 * time.Second
	// providerName is the extension provider the AuthorizationPolicies name.
	providerName = "llm-ratelimit"
)

// mesh is what the mesh-config snippets say about the provider.
type mesh struct {
	Source   string
	Provider *meshv1alpha1.MeshConfig_ExtensionProvider_EnvoyExternalAuthorizationGrpcProvider
}

// loadMesh decodes a meshConfig (JSON) strictly and returns its llm-ratelimit provider.
func loadMesh(source string, meshJSON []byte) (mesh, error) {
	if len(meshJSON) == 0 {
		return mesh{}, fmt.Errorf("%s: no meshConfig", source)
	}
	var mc meshv1alpha1.MeshConfig
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(meshJSON, &mc); err != nil {
		return mesh{}, fmt.Errorf("%s: meshConfig: %w", source, err)
	}
	for _, p := range mc.GetExtensionProviders() {
		if p.GetName() != providerName {
			continue
		}
		g := p.GetEnvoyExtAuthzGrpc()
		if g == nil {
			return mesh{}, fmt.Errorf("%s: provider %q is not envoyExtAuthzGrpc", source, providerName)
		}
		return mesh{Source: source, Provider: g}, nil
	}
	return mesh{}, fmt.Errorf("%s: no extensionProviders entry named %q", source, providerName)
}

// workload is the ext-authz workload found in a render.
type workload struct {
	Deployment *appsv1.Deployment
	Container  corev1.Container
	Service    *corev1.Service
	Limits     *config.Config
	LimitsYAML []byte
	// MaxRecvBytes is the server's gRPC receive limit as deployed.
	MaxRecvBytes int64
	// RedisTimeout is the server's -redis-timeout as deployed.
	RedisTimeout time.Duration
}

// flagValue returns the value of flag name (as "-name=v", "--name=v", "-name v") in args.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		a2 := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
		if a2 == name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a2, name+"="); ok && a2 != a {
			return v, true
		}
	}
	return "", false
}

func envValue(c corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

func containerPort(c corev1.Container, name string) (int32, bool) {
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort, true
		}
	}
	return 0, false
}

func subset(sel, labels map[string]string) bool {
	if len(sel) == 0 {
		return false
	}
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// checkWorkload checks the ext-authz Deployment, Service, PDB, ServiceAccount and limits
// ConfigMap of a render against each other and returns what it found.
func checkWorkload(objs []object) (*workload, []error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	deps := find[*appsv1.Deployment](objs)
	if len(deps) != 1 {
		return nil, []error{fmt.Errorf("want one Deployment, found %d", len(deps))}
	}
	d := deps[0]
	w := &workload{Deployment: d}
	if d.Spec.Replicas == nil || *d.Spec.Replicas < 2 {
		bad("Deployment %s: want at least 2 replicas", d.Name)
	}
	podLabels := d.Spec.Template.Labels
	if d.Spec.Selector == nil || !subset(d.Spec.Selector.MatchLabels, podLabels) {
		bad("Deployment %s: selector does not match the pod labels", d.Name)
	}
	pod := d.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		return nil, append(errs, fmt.Errorf("Deployment %s: want one container, found %d", d.Name, len(pod.Containers)))
	}
	c := pod.Containers[0]
	w.Container = c
	if len(c.Args) == 0 || c.Args[0] != "serve" {
		bad("container %s: first argument must be the serve command, got %q", c.Name, c.Args)
	}

	// Security: non-root, read-only root filesystem, no privilege escalation.
	if pod.SecurityContext == nil || pod.SecurityContext.RunAsNonRoot == nil || !*pod.SecurityContext.RunAsNonRoot {
		bad("Deployment %s: pod securityContext.runAsNonRoot must be true", d.Name)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
		bad("container %s: readOnlyRootFilesystem must be true", c.Name)
	}
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		bad("container %s: allowPrivilegeEscalation must be false", c.Name)
	}
	if sc == nil || sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") {
		bad("container %s: capabilities must drop ALL", c.Name)
	}
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			bad("container %s: no %s request", c.Name, r)
		}
	}
	if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
		bad("container %s: no memory limit", c.Name)
	}

	// Ports and probes: gRPC on the port GRPC_ADDR binds, native grpc.health.v1 probes.
	grpcPort, ok := containerPort(c, "grpc")
	if !ok {
		bad("container %s: no port named grpc", c.Name)
	}
	if e, ok := envValue(c, "GRPC_ADDR"); !ok {
		bad("container %s: GRPC_ADDR not set (the server's default listens on loopback only)", c.Name)
	} else if _, p, err := net.SplitHostPort(e.Value); err != nil || p != strconv.Itoa(int(grpcPort)) {
		bad("container %s: GRPC_ADDR %q does not listen on the grpc port %d", c.Name, e.Value, grpcPort)
	}
	if e, ok := envValue(c, "ADMIN_ADDR"); ok {
		h, p, err := net.SplitHostPort(e.Value)
		if admin, okp := containerPort(c, "http-admin"); err != nil || h != "" || p != strconv.Itoa(int(admin)) || !okp {
			bad("container %s: ADMIN_ADDR %q does not listen on all interfaces on the http-admin port", c.Name, e.Value)
		}
	}
	for name, p := range map[string]*corev1.Probe{"readiness": c.ReadinessProbe, "liveness": c.LivenessProbe} {
		switch {
		case p == nil:
			bad("container %s: no %s probe", c.Name, name)
		case p.GRPC == nil:
			bad("container %s: %s probe is not a native gRPC (grpc.health.v1) probe", c.Name, name)
		case p.GRPC.Port != grpcPort:
			bad("container %s: %s probe checks port %d, the server listens on %d", c.Name, name, p.GRPC.Port, grpcPort)
		case p.GRPC.Service != nil && *p.GRPC.Service != "":
			bad("container %s: %s probe asks for service %q; the server reports the overall status under \"\"", c.Name, name, *p.GRPC.Service)
		}
	}

	// Redis URL from a Secret, never inline.
	if e, ok := envValue(c, "REDIS_URL"); !ok {
		bad("container %s: REDIS_URL not set: the replicas would not share budgets", c.Name)
	} else if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		bad("container %s: REDIS_URL must come from a Secret (valueFrom.secretKeyRef)", c.Name)
	}
	if _, ok := flagValue(c.Args, "redis-url"); ok {
		bad("container %s: -redis-url on the command line exposes the password; use the Secret", c.Name)
	}

	// Server limits as deployed.
	w.MaxRecvBytes = config.DefaultMaxRecvBytes
	if v, ok := flagValue(c.Args, "max-recv-bytes"); ok {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			bad("container %s: -max-recv-bytes %q is not a positive number", c.Name, v)
		}
		w.MaxRecvBytes = n
	}
	w.RedisTimeout = 50 * time.Millisecond
	if v, ok := flagValue(c.Args, "redis-timeout"); ok {
		dur, err := time.ParseDuration(v)
		if err != nil || dur <= 0 {
			bad("container %s: -redis-timeout %q is not a positive duration", c.Name, v)
		}
		w.RedisTimeout = dur
	}

	// ServiceAccount.
	if pod.ServiceAccountName == "" {
		bad("Deployment %s: no serviceAccountName", d.Name)
	} else if !slices.ContainsFunc(find[*corev1.ServiceAccount](objs), func(sa *corev1.ServiceAccount) bool {
		return sa.Name == pod.ServiceAccountName && sa.Namespace == d.Namespace
	}) {
		bad("Deployment %s: ServiceAccount %s/%s is not in the render", d.Name, d.Namespace, pod.ServiceAccountName)
	}

	// Service: selects the pods, a port named grpc targeting the container's grpc port.
	for _, s := range find[*corev1.Service](objs) {
		if s.Namespace == d.Namespace && subset(s.Spec.Selector, podLabels) {
			w.Service = s
		}
	}
	if w.Service == nil {
		bad("no Service selects the pods of Deployment %s", d.Name)
	} else {
		var gp *corev1.ServicePort
		for i := range w.Service.Spec.Ports {
			if w.Service.Spec.Ports[i].Name == "grpc" {
				gp = &w.Service.Spec.Ports[i]
			}
		}
		switch {
		case gp == nil:
			bad("Service %s: no port named grpc (Istio would not speak HTTP/2 to it)", w.Service.Name)
		case gp.TargetPort.String() != "grpc" && gp.TargetPort.IntValue() != int(grpcPort):
			bad("Service %s: port grpc targets %s, the container's grpc port is %d", w.Service.Name, gp.TargetPort.String(), grpcPort)
		}
	}

	// PodDisruptionBudget.
	pdbs := find[*policyv1.PodDisruptionBudget](objs)
	if len(pdbs) != 1 {
		bad("want one PodDisruptionBudget, found %d", len(pdbs))
	} else {
		p := pdbs[0]
		if p.Spec.Selector == nil || !subset(p.Spec.Selector.MatchLabels, podLabels) {
			bad("PodDisruptionBudget %s: selector does not match the pods", p.Name)
		}
		if p.Spec.MinAvailable == nil || d.Spec.Replicas == nil || p.Spec.MinAvailable.IntValue() < 1 || p.Spec.MinAvailable.IntValue() >= int(*d.Spec.Replicas) {
			bad("PodDisruptionBudget %s: minAvailable must be at least 1 and below the replica count", p.Name)
		}
	}

	// The limits file: mounted as a directory (subPath mounts never see ConfigMap updates, so
	// hot reload would not work) from a ConfigMap in the render, named by -config.
	cfgPath, ok := flagValue(c.Args, "config")
	if !ok {
		return w, append(errs, fmt.Errorf("container %s: no -config: the server would run the embedded example limits", c.Name))
	}
	var cm *corev1.ConfigMap
	for _, m := range c.VolumeMounts {
		if path.Dir(cfgPath) != m.MountPath {
			continue
		}
		if m.SubPath != "" {
			bad("container %s: %s is a subPath mount: ConfigMap updates never reach it", c.Name, m.MountPath)
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.ConfigMap != nil {
				for _, o := range find[*corev1.ConfigMap](objs) {
					if o.Name == v.ConfigMap.Name && o.Namespace == d.Namespace {
						cm = o
					}
				}
				if cm == nil {
					bad("ConfigMap %s/%s (volume %s) is not in the render", d.Namespace, v.ConfigMap.Name, v.Name)
				}
			}
		}
	}
	if cm == nil {
		return w, append(errs, fmt.Errorf("container %s: -config %s is not in a mounted ConfigMap", c.Name, cfgPath))
	}
	data, ok := cm.Data[path.Base(cfgPath)]
	if !ok {
		return w, append(errs, fmt.Errorf("ConfigMap %s has no key %q (-config %s)", cm.Name, path.Base(cfgPath), cfgPath))
	}
	w.LimitsYAML = []byte(data)
	cfg, err := config.Parse(w.LimitsYAML, "ConfigMap "+cm.Name)
	if err != nil {
		return w, append(errs, err)
	}
	w.Limits = cfg
	return w, errs
}

// checkProvider checks the mesh's provider against the workload: address, timeout, failure
// policy and body settings. listenerBuffer is the per-connection buffer of the proxy that runs
// the check.
func checkProvider(m mesh, w *workload, listenerBuffer uint32) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(m.Source+": "+format, args...)) }
	p := m.Provider

	if w.Service != nil {
		want := fmt.Sprintf("%s.%s.svc.cluster.local", w.Service.Name, w.Service.Namespace)
		if p.GetService() != want {
			bad("provider service %q is not the Service %s", p.GetService(), want)
		}
		var port int32 = -1
		for _, sp := range w.Service.Spec.Ports {
			if sp.Name == "grpc" {
				port = sp.Port
			}
		}
		if int64(p.GetPort()) != int64(port) {
			bad("provider port %d is not the Service's grpc port %d", p.GetPort(), port)
		}
	}

	if p.GetTimeout() == nil {
		bad("no timeout: Istio's default is %s", istioDefaultTimeout)
	} else {
		t := p.GetTimeout().AsDuration()
		switch {
		case t <= 0 || t >= istioDefaultTimeout:
			bad("timeout %s is not between 0 and %s", t, istioDefaultTimeout)
		case t < 2*w.RedisTimeout:
			bad("timeout %s leaves no room for the server's -redis-timeout %s", t, w.RedisTimeout)
		}
		if w.Limits != nil {
			for _, r := range w.Limits.Rules {
				if r.MaxWait >= t {
					bad("timeout %s: rule %s holds requests up to max_wait %s, Envoy would give up first", t, r.Name, r.MaxWait)
				}
			}
		}
	}
	if s, err := strconv.Atoi(p.GetStatusOnError()); err != nil || s < 500 || s > 599 {
		bad("statusOnError %q is not a 5xx status", p.GetStatusOnError())
	}

	b := p.GetIncludeRequestBodyInCheck()
	switch {
	case b == nil:
		bad("includeRequestBodyInCheck not set: requests cannot be priced")
	default:
		if !b.GetPackAsBytes() {
			bad("packAsBytes is false: a body that is not valid UTF-8 would fail the check RPC")
		}
		if !b.GetAllowPartialMessage() {
			bad("allowPartialMessage is false: bodies above maxRequestBytes would get a 413 from Envoy")
		}
		n := int64(b.GetMaxRequestBytes())
		if n <= 0 {
			bad("maxRequestBytes %d: Envoy would send no body", n)
		}
		if n+oneRead > int64(listenerBuffer) {
			bad("maxRequestBytes %d plus one read (%d) is above the listener buffer %d: Envoy would answer 413 before checking", n, oneRead, listenerBuffer)
		}
		if n+maxHeaderBytes > w.MaxRecvBytes {
			bad("maxRequestBytes %d plus headers (%d) exceeds the server's gRPC receive limit %d (-max-recv-bytes)", n, maxHeaderBytes, w.MaxRecvBytes)
		}
	}
	return errs
}

// patch is one EnvoyFilter config patch with its value decoded as its Envoy type.
type patch struct {
	Filter *clinetworkingv1alpha3.EnvoyFilter
	Patch  *apinetworking.EnvoyFilter_EnvoyConfigObjectPatch
	Value  proto.Message
	// Ext is the ext_authz context_extensions of an HTTP_ROUTE patch (nil when none).
	Ext map[string]string
	// ExtAuthz is the ext_authz filter config of an HTTP_FILTER patch (nil when none).
	ExtAuthz *extauthzv3.ExtAuthz
	// ExtProc is the ext_proc filter an HTTP_FILTER patch inserts (nil when none), and
	// ExtProcDisabled its HttpFilter.disabled (off unless a route or virtual host enables it).
	ExtProc         *extprocv3.ExternalProcessor
	ExtProcDisabled bool
	// ExtProcEnabled is true for a VIRTUAL_HOST patch whose ExtProcPerRoute enables ext_proc.
	ExtProcEnabled bool
}

// envoyType returns the Envoy message an EnvoyFilter patch value must parse as.
func envoyType(applyTo apinetworking.EnvoyFilter_ApplyTo) (proto.Message, error) {
	switch applyTo {
	case apinetworking.EnvoyFilter_LISTENER:
		return &listenerv3.Listener{}, nil
	case apinetworking.EnvoyFilter_FILTER_CHAIN:
		return &listenerv3.FilterChain{}, nil
	case apinetworking.EnvoyFilter_NETWORK_FILTER:
		return &listenerv3.Filter{}, nil
	case apinetworking.EnvoyFilter_HTTP_FILTER:
		return &hcmv3.HttpFilter{}, nil
	case apinetworking.EnvoyFilter_ROUTE_CONFIGURATION:
		return &routev3.RouteConfiguration{}, nil
	case apinetworking.EnvoyFilter_VIRTUAL_HOST:
		return &routev3.VirtualHost{}, nil
	case apinetworking.EnvoyFilter_HTTP_ROUTE:
		return &routev3.Route{}, nil
	case apinetworking.EnvoyFilter_CLUSTER:
		return &clusterv3.Cluster{}, nil
	}
	return nil, fmt.Errorf("applyTo %s: no Envoy type known (add it to envoyType)", applyTo)
}

// decodePatches parses every patch value of the EnvoyFilters as the Envoy type its applyTo
// claims (protojson, unknown fields rejected, Any payloads resolved and parsed too), and the
// ext_authz per-route config of HTTP_ROUTE patches.
func decodePatches(efs []*clinetworkingv1alpha3.EnvoyFilter) ([]patch, []error) {
	var out []patch
	var errs []error
	for _, ef := range efs {
		for i, cp := range ef.Spec.GetConfigPatches() {
			where := fmt.Sprintf("EnvoyFilter %s/%s patch %d (%s)", ef.Namespace, ef.Name, i, cp.GetApplyTo())
			if cp.GetPatch().GetValue() == nil {
				errs = append(errs, fmt.Errorf("%s: no patch value", where))
				continue
			}
			msg, err := envoyType(cp.GetApplyTo())
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
				continue
			}
			j, err := protojson.Marshal(cp.GetPatch().GetValue())
			if err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", where, err))
				continue
			}
			if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(j, msg); err != nil {
				errs = append(errs, fmt.Errorf("%s: value is not a valid %s: %w", where, msg.ProtoReflect().Descriptor().FullName(), err))
				continue
			}
			p := patch{Filter: ef, Patch: cp, Value: msg}
			if f, ok := msg.(*hcmv3.HttpFilter); ok && f.GetTypedConfig() != nil {
				sub := cp.GetMatch().GetListener().GetFilterChain().GetFilter().GetSubFilter().GetName()
				var ea extauthzv3.ExtAuthz
				var ep extprocv3.ExternalProcessor
				switch {
				case f.GetTypedConfig().MessageIs(&ea):
					if err := f.GetTypedConfig().UnmarshalTo(&ea); err != nil {
						errs = append(errs, fmt.Errorf("%s: typed_config is not an ExtAuthz: %w", where, err))
					} else if sub != extAuthzFilter {
						errs = append(errs, fmt.Errorf("%s: ExtAuthz patch matches sub-filter %q, not Istio's %q", where, sub, extAuthzFilter))
					} else {
						p.ExtAuthz = &ea
					}
				case f.GetTypedConfig().MessageIs(&ep):
					// Responses pass the filters in reverse: after ext_authz, ext_proc reads the
					// provider's rate-limit headers before ext_authz overwrites them, and the
					// ext_authz metadata (the reservation) exists when it forwards it.
					switch {
					case f.GetName() != extProcFilter:
						errs = append(errs, fmt.Errorf("%s: ext_proc filter named %q, not %q (the typed_per_filter_config key)", where, f.GetName(), extProcFilter))
					case cp.GetPatch().GetOperation() != apinetworking.EnvoyFilter_Patch_INSERT_AFTER || sub != extAuthzFilter:
						errs = append(errs, fmt.Errorf("%s: the ext_proc filter must come after ext_authz (INSERT_AFTER sub-filter %s), got %s %q", where, extAuthzFilter, cp.GetPatch().GetOperation(), sub))
					default:
						if err := f.GetTypedConfig().UnmarshalTo(&ep); err != nil {
							errs = append(errs, fmt.Errorf("%s: typed_config is not an ExternalProcessor: %w", where, err))
						} else {
							p.ExtProc, p.ExtProcDisabled = &ep, f.GetDisabled()
						}
					}
				default:
					errs = append(errs, fmt.Errorf("%s: typed_config %s is neither an ExtAuthz nor an ExternalProcessor", where, f.GetTypedConfig().GetTypeUrl()))
				}
			}
			if vh, ok := msg.(*routev3.VirtualHost); ok {
				for name, a := range vh.GetTypedPerFilterConfig() {
					if name != extProcFilter {
						errs = append(errs, fmt.Errorf("%s: typed_per_filter_config key %q is not the ext_proc filter %q", where, name, extProcFilter))
						continue
					}
					var per extprocv3.ExtProcPerRoute
					if err := a.UnmarshalTo(&per); err != nil {
						errs = append(errs, fmt.Errorf("%s: %s config is not an ExtProcPerRoute: %w", where, name, err))
						continue
					}
					p.ExtProcEnabled = !per.GetDisabled()
				}
			}
			if r, ok := msg.(*routev3.Route); ok {
				for name, a := range r.GetTypedPerFilterConfig() {
					if name != extAuthzFilter {
						errs = append(errs, fmt.Errorf("%s: typed_per_filter_config key %q is not Istio's ext_authz filter %q", where, name, extAuthzFilter))
						continue
					}
					var per extauthzv3.ExtAuthzPerRoute
					if err := a.UnmarshalTo(&per); err != nil {
						errs = append(errs, fmt.Errorf("%s: %s config is not an ExtAuthzPerRoute: %w", where, name, err))
						continue
					}
					if per.GetDisabled() {
						errs = append(errs, fmt.Errorf("%s: disables ext_authz on the route", where))
					}
					p.Ext = per.GetCheckSettings().GetContextExtensions()
					if len(p.Ext) == 0 {
						errs = append(errs, fmt.Errorf("%s: ExtAuthzPerRoute sets no context_extensions", where))
					}
				}
			}
			out = append(out, p)
		}
	}
	return out, errs
}

// checkRouteLimits parses each route's context_extensions with the server's own rules, against
// the limits file deployed with it, and checks their max_wait against the mesh timeout.
func checkRouteLimits(patches []patch, w *workload, m mesh) []error {
	var errs []error
	if w.Limits == nil {
		return []error{errors.New("no valid limits file to check the routes against")}
	}
	for _, p := range patches {
		if p.Ext == nil {
			continue
		}
		rt, err := w.Limits.ParseRoute(p.Ext)
		if err != nil {
			errs = append(errs, fmt.Errorf("EnvoyFilter %s/%s: context_extensions rejected by the server: %w", p.Filter.Namespace, p.Filter.Name, err))
			continue
		}
		if rt.Rule != nil && m.Provider.GetTimeout() != nil && rt.Rule.MaxWait >= m.Provider.GetTimeout().AsDuration() {
			errs = append(errs, fmt.Errorf("EnvoyFilter %s/%s: max_wait %s is not below the mesh timeout", p.Filter.Namespace, p.Filter.Name, rt.Rule.MaxWait))
		}
		if rt.Rule != nil && rt.Rule.Per&config.PerTenant != 0 && w.Limits.File.Tenant.Source == "none" {
			errs = append(errs, fmt.Errorf("EnvoyFilter %s/%s: limit per tenant, but the limits file has tenant.source none", p.Filter.Namespace, p.Filter.Name))
		}
	}
	return errs
}

// checkIdentity: no identity comes from a header the application can send (the mesh passes the
// client's headers on: tenant.source is not header, and no priority.header), and a patch of the
// HTTP connection manager removes the client's x-envoy-auth-* headers before any filter, as
// envoy.yaml does, so that no client forges the fail-open or partial-body marks.
func checkIdentity(w *workload, patches []patch, context apinetworking.EnvoyFilter_PatchContext) []error {
	var errs []error
	if w.Limits != nil {
		if src := w.Limits.File.Tenant.Source; src == "header" {
			errs = append(errs, fmt.Errorf("limits file: tenant.source %s: the application can send any tenant", src))
		}
		if h := w.Limits.File.Priority.Header; h != "" {
			errs = append(errs, fmt.Errorf("limits file: priority.header %s: the application can name any class", h))
		}
	}
	removes := false
	for _, p := range patches {
		f, ok := p.Value.(*listenerv3.Filter)
		if !ok || p.Patch.GetMatch().GetContext() != context || f.GetTypedConfig() == nil {
			continue
		}
		var hcm hcmv3.HttpConnectionManager
		if err := f.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
			errs = append(errs, fmt.Errorf("EnvoyFilter %s/%s: NETWORK_FILTER typed_config is not an HttpConnectionManager: %w", p.Filter.Namespace, p.Filter.Name, err))
			continue
		}
		for _, ext := range hcm.GetEarlyHeaderMutationExtensions() {
			var hm earlyhmv3.HeaderMutation
			if ext.GetTypedConfig().UnmarshalTo(&hm) != nil {
				continue
			}
			for _, m := range hm.GetMutations() {
				if pre := m.GetRemoveOnMatch().GetKeyMatcher().GetPrefix(); pre == "x-envoy-auth-" || pre == "x-envoy-" {
					removes = true
				}
			}
		}
	}
	if !removes {
		errs = append(errs, errors.New("no EnvoyFilter patch removes the client's x-envoy-auth-* headers (early_header_mutation_extensions)"))
	}
	return errs
}

// listenerBuffer returns the per-connection buffer the patches set on listeners matching
// context, or Envoy's default.
func listenerBuffer(patches []patch, context apinetworking.EnvoyFilter_PatchContext) uint32 {
	buf := uint32(envoyDefaultBuffer)
	for _, p := range patches {
		l, ok := p.Value.(*listenerv3.Listener)
		if ok && p.Patch.GetMatch().GetContext() == context && l.GetPerConnectionBufferLimitBytes() != nil {
			buf = l.GetPerConnectionBufferLimitBytes().GetValue()
		}
	}
	return buf
}

// checkCustomPolicies checks that every AuthorizationPolicy is a CUSTOM policy naming the mesh's
// provider.
func checkCustomPolicies(objs []object) []error {
	var errs []error
	aps := find[*clisecurityv1.AuthorizationPolicy](objs)
	if len(aps) == 0 {
		return []error{errors.New("no AuthorizationPolicy: nothing would call ext-authz")}
	}
	for _, ap := range aps {
		if ap.Spec.GetAction().String() != "CUSTOM" {
			errs = append(errs, fmt.Errorf("AuthorizationPolicy %s/%s: action %s, want CUSTOM", ap.Namespace, ap.Name, ap.Spec.GetAction()))
		}
		if got := ap.Spec.GetProvider().GetName(); got != providerName {
			errs = append(errs, fmt.Errorf("AuthorizationPolicy %s/%s: provider %q is not the mesh's %q", ap.Namespace, ap.Name, got, providerName))
		}
	}
	return errs
}

// providerHosts are the hosts each install must cover.
var providerHosts = []string{"api.openai.com", "api.anthropic.com"}

// checkEgressGateway checks the egress-gateway path: ServiceEntry, Gateway, VirtualServices,
// DestinationRules, the CUSTOM policy on the gateway and the EnvoyFilter's route matches.
func checkEgressGateway(objs []object, patches []patch) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	gws := find[*clinetworkingv1.Gateway](objs)
	if len(gws) != 1 {
		return []error{fmt.Errorf("want one Istio Gateway, found %d", len(gws))}
	}
	gw := gws[0]
	selector := gw.Spec.GetSelector()
	if selector["istio"] != "egressgateway" {
		bad("Gateway %s: selector %v is not the egress gateway (istio: egressgateway)", gw.Name, selector)
	}

	// Ports and hosts.
	ses := find[*clinetworkingv1.ServiceEntry](objs)
	seHosts := map[string]bool{}
	for _, se := range ses {
		for _, h := range se.Spec.GetHosts() {
			seHosts[h] = true
		}
		var has80, has443 bool
		for _, p := range se.Spec.GetPorts() {
			has80 = has80 || (p.GetNumber() == 80 && p.GetProtocol() == "HTTP")
			has443 = has443 || (p.GetNumber() == 443 && p.GetProtocol() == "HTTPS")
		}
		if !has80 || !has443 {
			bad("ServiceEntry %s: want port 80 HTTP (apps) and 443 HTTPS (the gateway)", se.Name)
		}
		if se.Spec.GetLocation().String() != "MESH_EXTERNAL" {
			bad("ServiceEntry %s: location must be MESH_EXTERNAL", se.Name)
		}
	}
	type server struct {
		port  uint32
		hosts []string
	}
	var servers []server
	for _, s := range gw.Spec.GetServers() {
		if s.GetTls().GetMode().String() != "ISTIO_MUTUAL" {
			bad("Gateway %s: server %s is not ISTIO_MUTUAL: source.principal would be empty", gw.Name, s.GetPort().GetName())
		}
		servers = append(servers, server{port: s.GetPort().GetNumber(), hosts: s.GetHosts()})
	}

	drs := find[*clinetworkingv1.DestinationRule](objs)
	dr := func(host string) *clinetworkingv1.DestinationRule {
		for _, d := range drs {
			if d.Spec.GetHost() == host {
				return d
			}
		}
		return nil
	}
	gwHost := "istio-egressgateway.istio-system.svc.cluster.local"
	gwDR := dr(gwHost)
	if gwDR == nil {
		bad("no DestinationRule for %s (Istio mTLS to the gateway)", gwHost)
	}

	// gatewayRoutes[host] lists the route names the gateway builds for host.
	gatewayRoutes := map[string][]string{}
	vss := find[*clinetworkingv1.VirtualService](objs)
	for _, host := range providerHosts {
		if !seHosts[host] {
			bad("%s: no ServiceEntry host", host)
		}
		inServer := slices.ContainsFunc(servers, func(s server) bool { return slices.Contains(s.hosts, host) })
		if !inServer {
			bad("%s: not a host of Gateway %s", host, gw.Name)
		}
		// TLS origination to the provider on 443.
		if d := dr(host); d == nil {
			bad("%s: no DestinationRule (TLS origination)", host)
		} else {
			ok := false
			for _, pl := range d.Spec.GetTrafficPolicy().GetPortLevelSettings() {
				ok = ok || (pl.GetPort().GetNumber() == 443 && pl.GetTls().GetMode().String() == "SIMPLE" && pl.GetTls().GetSni() == host)
			}
			if !ok {
				bad("DestinationRule %s: want tls SIMPLE with sni %s on port 443", d.Name, host)
			}
		}
		var vs *clinetworkingv1.VirtualService
		for _, v := range vss {
			if slices.Contains(v.Spec.GetHosts(), host) {
				vs = v
			}
		}
		if vs == nil {
			bad("%s: no VirtualService", host)
			continue
		}
		if !slices.Contains(vs.Spec.GetGateways(), "mesh") || !slices.Contains(vs.Spec.GetGateways(), gw.Name) && !slices.Contains(vs.Spec.GetGateways(), gw.Namespace+"/"+gw.Name) {
			bad("VirtualService %s: gateways must be mesh and %s", vs.Name, gw.Name)
		}
		var toGateway, toProvider bool
		for _, r := range vs.Spec.GetHttp() {
			for _, m := range r.GetMatch() {
				for _, dst := range r.GetRoute() {
					h, port := dst.GetDestination().GetHost(), dst.GetDestination().GetPort().GetNumber()
					switch {
					case slices.Equal(m.GetGateways(), []string{"mesh"}) && h == gwHost:
						toGateway = true
						sub := dst.GetDestination().GetSubset()
						ok := false
						for _, s := range gwDR.Spec.GetSubsets() {
							for _, pl := range s.GetTrafficPolicy().GetPortLevelSettings() {
								ok = ok || (s.GetName() == sub && pl.GetPort().GetNumber() == port && pl.GetTls().GetMode().String() == "ISTIO_MUTUAL" && pl.GetTls().GetSni() == host)
							}
						}
						if !ok {
							bad("VirtualService %s: subset %q port %d of %s is not ISTIO_MUTUAL with sni %s", vs.Name, sub, port, gwHost, host)
						}
						if !slices.ContainsFunc(servers, func(s server) bool { return s.port == port }) {
							bad("VirtualService %s: sends to gateway port %d, the Gateway has no server there", vs.Name, port)
						}
					case slices.Contains(m.GetGateways(), gw.Name) && h == host:
						toProvider = true
						if port != 443 {
							bad("VirtualService %s: the gateway sends %s to port %d, want 443 (TLS origination)", vs.Name, host, port)
						}
						name := r.GetName()
						if m.GetName() != "" {
							name += "." + m.GetName()
						}
						gatewayRoutes[host] = append(gatewayRoutes[host], name)
					}
				}
			}
		}
		if !toGateway || !toProvider {
			bad("VirtualService %s: want a mesh -> egress gateway route and a gateway -> %s:443 route", vs.Name, host)
		}
	}

	// CUSTOM on the gateway, not on sidecars (where it would cover inbound traffic only).
	for _, ap := range find[*clisecurityv1.AuthorizationPolicy](objs) {
		if ap.Namespace != gw.Namespace || !sameMap(ap.Spec.GetSelector().GetMatchLabels(), selector) {
			bad("AuthorizationPolicy %s/%s does not select the egress gateway (%v in %s)", ap.Namespace, ap.Name, selector, gw.Namespace)
		}
		var hosts []string
		for _, r := range ap.Spec.GetRules() {
			for _, to := range r.GetTo() {
				hosts = append(hosts, to.GetOperation().GetHosts()...)
			}
		}
		for _, h := range providerHosts {
			if !slices.Contains(hosts, h) {
				bad("AuthorizationPolicy %s: host %s is not checked", ap.Name, h)
			}
		}
	}

	// EnvoyFilter: on the gateway; route and virtual host patches name routes and virtual hosts
	// the gateway really builds.
	var extProc *extprocv3.ExternalProcessor
	var extProcDisabled bool
	extProcOn := map[string]bool{}
	for _, p := range patches {
		ef := p.Filter
		if ef.Namespace != gw.Namespace || !sameMap(ef.Spec.GetWorkloadSelector().GetLabels(), selector) {
			bad("EnvoyFilter %s/%s does not select the egress gateway", ef.Namespace, ef.Name)
		}
		if p.Patch.GetMatch().GetContext() != apinetworking.EnvoyFilter_GATEWAY {
			bad("EnvoyFilter %s: patch context %s, want GATEWAY", ef.Name, p.Patch.GetMatch().GetContext())
		}
		if p.ExtProc != nil {
			extProc, extProcDisabled = p.ExtProc, p.ExtProcDisabled
		}
		if a := p.Patch.GetApplyTo(); a != apinetworking.EnvoyFilter_HTTP_ROUTE && a != apinetworking.EnvoyFilter_VIRTUAL_HOST {
			continue
		}
		vh := p.Patch.GetMatch().GetRouteConfiguration().GetVhost()
		host, port, err := net.SplitHostPort(vh.GetName())
		pn, _ := strconv.Atoi(port)
		if err != nil || !slices.ContainsFunc(servers, func(s server) bool { return s.port == uint32(pn) && slices.Contains(s.hosts, host) }) {
			bad("EnvoyFilter %s: vhost %q is not <host>:<port> of a Gateway %s server: the patch would match nothing", ef.Name, vh.GetName(), gw.Name)
			continue
		}
		if p.Patch.GetApplyTo() == apinetworking.EnvoyFilter_VIRTUAL_HOST {
			if vh.GetRoute() != nil {
				bad("EnvoyFilter %s: a VIRTUAL_HOST patch matching a route", ef.Name)
			}
			if p.ExtProcEnabled {
				extProcOn[vh.GetName()] = true
			}
			continue
		}
		if r := vh.GetRoute().GetName(); !slices.Contains(gatewayRoutes[host], r) {
			bad("EnvoyFilter %s: route %q is not a gateway route of %s (have %q): the patch would match nothing", ef.Name, r, host, gatewayRoutes[host])
		}
	}
	// The response path: a filter off by default must be on for every provider's virtual host.
	if extProc != nil && extProcDisabled {
		for _, s := range servers {
			for _, h := range s.hosts {
				if vh := fmt.Sprintf("%s:%d", h, s.port); slices.Contains(providerHosts, h) && !extProcOn[vh] {
					bad("the ext_proc filter is disabled by default and no VIRTUAL_HOST patch enables it on %s: its responses would never be reconciled", vh)
				}
			}
		}
	}
	return errs
}

// sameMap reports whether a and b hold the same entries (and are not empty).
func sameMap(a, b map[string]string) bool {
	if len(a) == 0 || len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// checkAmbient checks the ambient path: waypoint, ServiceEntries bound to it with TLS
// origination, CUSTOM policies targeting them, EnvoyFilters matching the waypoint's routes.
func checkAmbient(objs []object, patches []patch) []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	waypoints := map[string]*gwv1.Gateway{}
	for _, g := range find[*gwv1.Gateway](objs) {
		if g.Spec.GatewayClassName != "istio-waypoint" {
			bad("Gateway %s: class %q, want istio-waypoint", g.Name, g.Spec.GatewayClassName)
		}
		if len(g.Spec.Listeners) != 1 || g.Spec.Listeners[0].Port != 15008 || g.Spec.Listeners[0].Protocol != "HBONE" {
			bad("Gateway %s: a waypoint listens on 15008 HBONE", g.Name)
		}
		waypoints[g.Namespace+"/"+g.Name] = g
	}
	if len(waypoints) == 0 {
		bad("no waypoint Gateway")
	}
	if len(find[*clinetworkingv1.VirtualService](objs)) > 0 {
		bad("a VirtualService changes the waypoint's route names, and the EnvoyFilters would match nothing")
	}
	namespaces := map[string]*corev1.Namespace{}
	for _, n := range find[*corev1.Namespace](objs) {
		namespaces[n.Name] = n
		if n.Labels["istio.io/dataplane-mode"] != "ambient" {
			bad("Namespace %s: not in the ambient mesh (istio.io/dataplane-mode: ambient)", n.Name)
		}
		if _, ok := n.Labels["istio-injection"]; ok {
			bad("Namespace %s: sidecar injection label in the ambient overlay", n.Name)
		}
	}

	ses := map[string]*clinetworkingv1.ServiceEntry{}
	covered := map[string]bool{}
	for _, se := range find[*clinetworkingv1.ServiceEntry](objs) {
		ses[se.Namespace+"/"+se.Name] = se
		wp := se.Labels["istio.io/use-waypoint"]
		if waypoints[se.Namespace+"/"+wp] == nil {
			bad("ServiceEntry %s: istio.io/use-waypoint %q names no waypoint in %s", se.Name, wp, se.Namespace)
		}
		for _, h := range se.Spec.GetHosts() {
			covered[h] = true
			var dr *clinetworkingv1.DestinationRule
			for _, d := range find[*clinetworkingv1.DestinationRule](objs) {
				if d.Spec.GetHost() == h {
					dr = d
				}
			}
			if dr == nil || dr.Spec.GetTrafficPolicy().GetTls().GetMode().String() != "SIMPLE" || dr.Spec.GetTrafficPolicy().GetTls().GetSni() != h {
				bad("%s: want a DestinationRule with tls SIMPLE and sni %s (TLS origination at the waypoint)", h, h)
			}
		}
		for _, p := range se.Spec.GetPorts() {
			if p.GetProtocol() != "HTTP" || p.GetTargetPort() != 443 {
				bad("ServiceEntry %s: port %d must be HTTP with targetPort 443", se.Name, p.GetNumber())
			}
		}
	}
	for _, h := range providerHosts {
		if !covered[h] {
			bad("%s: no ServiceEntry", h)
		}
	}
	for _, ap := range find[*clisecurityv1.AuthorizationPolicy](objs) {
		if len(ap.Spec.GetTargetRefs()) == 0 {
			bad("AuthorizationPolicy %s: no targetRefs (a waypoint ignores selector policies)", ap.Name)
		}
		for _, r := range ap.Spec.GetTargetRefs() {
			if r.GetKind() != "ServiceEntry" || r.GetGroup() != "networking.istio.io" || ses[ap.Namespace+"/"+r.GetName()] == nil {
				bad("AuthorizationPolicy %s: targetRef %s/%s is not a ServiceEntry of the render in %s", ap.Name, r.GetKind(), r.GetName(), ap.Namespace)
			}
		}
	}
	for _, p := range patches {
		ef := p.Filter
		refs := ef.Spec.GetTargetRefs()
		if ef.Spec.GetWorkloadSelector() != nil || len(refs) == 0 {
			bad("EnvoyFilter %s: a waypoint ignores workloadSelector: use targetRefs", ef.Name)
			continue
		}
		var se *clinetworkingv1.ServiceEntry
		for _, r := range refs {
			switch {
			case r.GetKind() == "Gateway" && r.GetGroup() == "gateway.networking.k8s.io" && waypoints[ef.Namespace+"/"+r.GetName()] != nil:
			case r.GetKind() == "ServiceEntry" && r.GetGroup() == "networking.istio.io" && ses[ef.Namespace+"/"+r.GetName()] != nil:
				se = ses[ef.Namespace+"/"+r.GetName()]
			default:
				bad("EnvoyFilter %s: targetRef %s %s is not a waypoint or ServiceEntry of the render in %s", ef.Name, r.GetKind(), r.GetName(), ef.Namespace)
			}
		}
		if p.Patch.GetMatch().GetContext() != apinetworking.EnvoyFilter_SIDECAR_INBOUND {
			bad("EnvoyFilter %s: a waypoint applies patches in context SIDECAR_INBOUND, not %s", ef.Name, p.Patch.GetMatch().GetContext())
		}
		if p.ExtProc != nil && p.ExtProcDisabled {
			bad("EnvoyFilter %s: the ext_proc filter is disabled by default, and the waypoint's virtual hosts (inbound|http|<port>) are shared by every ServiceEntry: enable it on the filter", ef.Name)
		}
		switch p.Patch.GetApplyTo() {
		case apinetworking.EnvoyFilter_LISTENER, apinetworking.EnvoyFilter_HTTP_FILTER:
			if n := p.Patch.GetMatch().GetListener().GetName(); n != "main_internal" {
				bad("EnvoyFilter %s: listener %q: the waypoint's HTTP connection manager runs on main_internal", ef.Name, n)
			}
		case apinetworking.EnvoyFilter_HTTP_ROUTE:
			if se == nil {
				bad("EnvoyFilter %s: a route patch must target the ServiceEntry whose route it changes", ef.Name)
				continue
			}
			rc := p.Patch.GetMatch().GetRouteConfiguration()
			ok := false
			for _, h := range se.Spec.GetHosts() {
				for _, port := range se.Spec.GetPorts() {
					ok = ok || (rc.GetName() == fmt.Sprintf("inbound-vip|%d|http|%s", port.GetNumber(), h) &&
						rc.GetVhost().GetName() == fmt.Sprintf("inbound|http|%d", port.GetNumber()) &&
						rc.GetVhost().GetRoute().GetName() == "default")
				}
			}
			if !ok {
				bad("EnvoyFilter %s: match %s / %s / %s is not the waypoint route of ServiceEntry %s", ef.Name, rc.GetName(), rc.GetVhost().GetName(), rc.GetVhost().GetRoute().GetName(), se.Name)
			}
		}
	}
	return errs
}

// ext-authz binary, built once per test run from the root module.
var (
	binOnce sync.Once
	binPath string
	binErr  error
)

func extAuthzBinary() (string, error) {
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "llm-ratelimit-istio-")
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "ext-authz")
		ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "build", "-o", binPath, "./cmd/ext-authz")
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("go build ./cmd/ext-authz: %w\n%s", err, out)
		}
	})
	return binPath, binErr
}

// checkConfigCLI runs the server's own `ext-authz check-config` on data.
func checkConfigCLI(data []byte) (string, error) {
	bin, err := extAuthzBinary()
	if err != nil {
		return "", err
	}
	f, err := os.CreateTemp("", "limits-*.yaml")
	if err != nil {
		return "", err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		return "", err
	}
	f.Close()
	var out bytes.Buffer
	cmd := exec.Command(bin, "check-config", f.Name())
	cmd.Stdout, cmd.Stderr = &out, &out
	err = cmd.Run()
	return out.String(), err
}

func protoClone[T proto.Message](m T) T { return proto.Clone(m).(T) }
