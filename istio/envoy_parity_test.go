package istio

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"

	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/retry/host/previous_hosts/v3" // Any in envoy.yaml's ext_authz retry policy
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"sigs.k8s.io/yaml"
)

// standalone is what envoy/envoy.yaml (the standalone Envoy install) says about ext_authz and
// the ext_proc response path.
type standalone struct {
	ExtAuthz *extauthzv3.ExtAuthz
	ExtProc  *extprocv3.ExternalProcessor
	// Routes are the context_extensions of its routes, by rule name.
	Routes map[string]map[string]string
}

// loadStandalone reads file (envoy/envoy.yaml): its one ext_authz HTTP filter, decoded strictly
// as ExtAuthz, and every route's context_extensions.
func loadStandalone(file string) (*standalone, error) {
	y, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var tree any
	if err := yaml.Unmarshal(y, &tree); err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	s := &standalone{Routes: map[string]map[string]string{}}
	var errs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if v["name"] == extAuthzFilter && v["typed_config"] != nil {
				var ea extauthzv3.ExtAuthz
				if err := decodeAny(v["typed_config"], &ea); err != nil {
					errs = append(errs, fmt.Sprintf("ext_authz filter: %v", err))
				} else if s.ExtAuthz != nil {
					errs = append(errs, "more than one ext_authz filter")
				} else {
					s.ExtAuthz = &ea
				}
			}
			if v["name"] == extProcFilter && v["typed_config"] != nil {
				var ep extprocv3.ExternalProcessor
				if err := decodeAny(v["typed_config"], &ep); err != nil {
					errs = append(errs, fmt.Sprintf("ext_proc filter: %v", err))
				} else if s.ExtProc != nil {
					errs = append(errs, "more than one ext_proc filter")
				} else {
					s.ExtProc = &ep
				}
			}
			if ce, ok := v["context_extensions"].(map[string]any); ok {
				m := map[string]string{}
				for k, x := range ce {
					m[k] = fmt.Sprint(x)
				}
				s.Routes[m["rule"]] = m
			}
			for _, x := range v {
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(tree)
	if s.ExtAuthz == nil {
		errs = append(errs, "no ext_authz filter")
	}
	if s.ExtProc == nil {
		errs = append(errs, "no ext_proc filter")
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s: %s", file, strings.Join(errs, "; "))
	}
	return s, nil
}

// decodeAny decodes a typed_config (YAML as a tree, with "@type") strictly into m.
func decodeAny(tree any, m proto.Message) error {
	j, err := json.Marshal(tree)
	if err != nil {
		return err
	}
	var a anypb.Any
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(j, &a); err != nil {
		return err
	}
	return a.UnmarshalTo(m)
}

// checkParity compares the mesh provider and an overlay's EnvoyFilter patches with envoy.yaml:
// the same timeout, failure policy, body settings and credential filtering, the same ext_proc
// response path on Istio's cluster of the provider's service, and (wantRoutes) the same
// per-route limits.
func checkParity(s *standalone, m mesh, patches []patch, wantRoutes bool) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(m.Source+" vs envoy/envoy.yaml: "+format, args...))
	}
	p, ea := m.Provider, s.ExtAuthz
	if got, want := p.GetTimeout().AsDuration(), ea.GetGrpcService().GetTimeout().AsDuration(); got != want {
		bad("timeout %s, envoy.yaml %s", got, want)
	}
	if p.GetFailOpen() != ea.GetFailureModeAllow() {
		bad("failOpen %t, envoy.yaml failure_mode_allow %t", p.GetFailOpen(), ea.GetFailureModeAllow())
	}
	if got, want := p.GetStatusOnError(), strconv.Itoa(int(ea.GetStatusOnError().GetCode())); got != want {
		bad("statusOnError %q, envoy.yaml status_on_error %s", got, want)
	}
	b, wb := p.GetIncludeRequestBodyInCheck(), ea.GetWithRequestBody()
	if b.GetMaxRequestBytes() != wb.GetMaxRequestBytes() || b.GetAllowPartialMessage() != wb.GetAllowPartialMessage() || b.GetPackAsBytes() != wb.GetPackAsBytes() {
		bad("includeRequestBodyInCheck %v, envoy.yaml with_request_body %v", b, wb)
	}
	var filters []*extauthzv3.ExtAuthz
	var routes = map[string]map[string]string{}
	for _, pt := range patches {
		if pt.ExtAuthz != nil {
			filters = append(filters, pt.ExtAuthz)
		}
		if pt.Ext != nil {
			routes[pt.Ext["rule"]] = pt.Ext
		}
	}
	if len(filters) != 1 {
		bad("want one EnvoyFilter patch of the ext_authz filter (disallowed_headers), found %d", len(filters))
	} else if !proto.Equal(filters[0].GetDisallowedHeaders(), ea.GetDisallowedHeaders()) {
		bad("disallowed_headers %v, envoy.yaml %v", filters[0].GetDisallowedHeaders(), ea.GetDisallowedHeaders())
	}
	var procs []*extprocv3.ExternalProcessor
	for _, pt := range patches {
		if pt.ExtProc != nil {
			procs = append(procs, pt.ExtProc)
		}
	}
	if len(procs) != 1 {
		bad("want one EnvoyFilter patch adding the ext_proc filter (the response path), found %d", len(procs))
	} else {
		errs = append(errs, checkExtProc(m, procs[0], s.ExtProc)...)
	}
	if wantRoutes {
		got, want := slices.Sorted(maps.Keys(routes)), slices.Sorted(maps.Keys(s.Routes))
		if !slices.Equal(got, want) {
			bad("route limits %q, envoy.yaml %q", got, want)
		}
		for rule, ext := range s.Routes {
			if r, ok := routes[rule]; ok && !maps.Equal(r, ext) {
				bad("route %s: context_extensions %v, envoy.yaml %v", rule, sortedMap(r), sortedMap(ext))
			}
		}
	}
	return errs
}

func sortedMap(m map[string]string) string {
	keys := slices.Collect(maps.Keys(m))
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%s ", k, m[k])
	}
	return strings.TrimSpace(b.String())
}

// checkExtProc compares an overlay's ext_proc filter with envoy.yaml's: every setting equal but
// the gRPC target, which must be the cluster Istio builds for the mesh provider's service and
// port (the one its ext_authz filter uses), with an authority free of '|'.
func checkExtProc(m mesh, got, want *extprocv3.ExternalProcessor) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf(m.Source+" vs the ext_proc EnvoyFilter patch: "+format, args...))
	}
	eg := got.GetGrpcService().GetEnvoyGrpc()
	if eg == nil {
		bad("grpc_service is not envoy_grpc")
		return errs
	}
	cluster := fmt.Sprintf("outbound|%d||%s", m.Provider.GetPort(), m.Provider.GetService())
	if eg.GetClusterName() != cluster {
		bad("cluster %q is not Istio's cluster of the mesh provider %q: the response path would go nowhere", eg.GetClusterName(), cluster)
	}
	if eg.GetAuthority() == "" || strings.Contains(eg.GetAuthority(), "|") {
		bad("authority %q: empty makes the cluster name (with '|') the gRPC authority, which servers reject", eg.GetAuthority())
	}
	g, w := protoClone(got), protoClone(want)
	g.GrpcService.TargetSpecifier, w.GrpcService.TargetSpecifier = nil, nil
	if !proto.Equal(g, w) {
		bad("settings differ from envoy/envoy.yaml's ext_proc filter (gRPC target aside):\n  got  %v\n  want %v", g, w)
	}
	return errs
}
