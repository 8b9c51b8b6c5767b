package openai

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// Settings are the family's pricing settings (tokens.Options.OpenAI). The zero value is the
// defaults. Validate checks them and precomputes what the request path reads; after it, a
// Settings is read only, and so safe for concurrent use.
type Settings struct {
	// ImageTokens, when > 0, is the cost of an image whose size is unknown (an http(s) URL),
	// replacing the model rule's worst case (1445 for gpt-4o at detail high). 0 keeps the
	// worst case.
	ImageTokens int64
	// AzureDeployments maps an Azure OpenAI deployment name to its model, for requests to
	// /openai/deployments/{name}/... (DeploymentModel). Unmapped deployments are priced as the
	// model of their name.
	AzureDeployments map[string]string

	// folded is AzureDeployments with ASCII-lower-cased names (Validate).
	folded map[string]string
}

// Validate reports every invalid setting at once, each error naming it, and precomputes the
// case-folded deployment names DeploymentModel looks up. Call it once, before the Settings
// price a request.
func (s *Settings) Validate() error {
	var errs []error
	if s.ImageTokens < 0 {
		errs = append(errs, fmt.Errorf("openai: ImageTokens %d is negative", s.ImageTokens))
	}
	for name, model := range s.AzureDeployments {
		if name == "" || model == "" {
			errs = append(errs, fmt.Errorf("openai: AzureDeployments: empty deployment or model (%q: %q)", name, model))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	s.folded = make(map[string]string, len(s.AzureDeployments))
	for name, model := range s.AzureDeployments {
		s.folded[strings.ToLower(name)] = model
	}
	return nil
}

// DeploymentModel is the model of an Azure deployment (Deployment's value): its model in
// AzureDeployments, else the deployment name; "" when there is no deployment. The deployment
// decides, never the body's "model": Azure routes a request to the model deployed under the
// path's {deployment-id} ("POST {endpoint}/openai/deployments/{deployment-id}/chat/completions",
// deployment-id "Deployment id of the model which was deployed": Azure OpenAI REST API
// reference, learn.microsoft.com/azure/ai-foundry/openai/reference), so a body naming another
// model changes nothing at Azure and must change nothing here.
//
// A spelling that reaches the same deployment reaches the same model: the name is
// percent-decoded (%70rod is prod) and looked up regardless of ASCII case (once Validate has
// run). Both cost only the requests that use them; an exact match allocates nothing.
func (s *Settings) DeploymentModel(deployment string) string {
	d := deployment
	if d == "" {
		return ""
	}
	if m, ok := s.AzureDeployments[d]; ok {
		return m
	}
	if strings.IndexByte(d, '%') >= 0 {
		if u, err := url.PathUnescape(d); err == nil && u != "" {
			d = u
			if m, ok := s.AzureDeployments[d]; ok {
				return m
			}
		}
	}
	if len(d) <= maxFoldedName {
		var buf [maxFoldedName]byte
		for i := 0; i < len(d); i++ {
			c := d[i]
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			buf[i] = c
		}
		if m, ok := s.folded[string(buf[:len(d)])]; ok {
			return m
		}
	}
	return d
}

// maxFoldedName bounds the deployment names looked up regardless of case (in a buffer on the
// stack); longer names are looked up as they are sent.
const maxFoldedName = 128
