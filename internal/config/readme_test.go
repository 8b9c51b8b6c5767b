package config

import (
	"fmt"
	"os"
	"regexp"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// readmeHoldLimit is the longest max_wait ext-authz serve honours with its default flags: the 1s
// -check-timeout less twice the 50ms -redis-timeout and the 25ms answer margin.
const readmeHoldLimit = 875 * time.Millisecond

// Every configuration example in the README and docs/configuration.md loads, and starts with the
// default flags: limits files (yaml blocks that start with "# limits") through Parse, and route
// context_extensions through ParseRoute.
func TestREADMEExamples(t *testing.T) {
	t.Parallel()
	var data []byte
	for _, name := range []string{"../../README.md", "../../docs/configuration.md"} {
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		data = append(append(data, b...), '\n')
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(data, -1)
	files, routes := 0, 0
	for _, b := range blocks {
		src := b[1]
		if regexp.MustCompile(`^# limits`).Match(src) {
			files++
			c, err := Parse(src, "README example")
			if err == nil {
				err = c.CheckMaxWait(readmeHoldLimit, "README example")
			}
			if err != nil {
				t.Errorf("README limits example:\n%s\n%v", src, err)
			}
			continue
		}
		var doc struct {
			PerFilter map[string]struct {
				CheckSettings struct {
					ContextExtensions map[string]string `yaml:"context_extensions"`
				} `yaml:"check_settings"`
			} `yaml:"typed_per_filter_config"`
		}
		if err := yaml.Unmarshal(src, &doc); err != nil {
			continue
		}
		for _, f := range doc.PerFilter {
			if ext := f.CheckSettings.ContextExtensions; len(ext) > 0 {
				routes++
				c, _ := Default()
				rt, err := c.ParseRoute(ext)
				if err == nil && rt.Rule != nil && rt.Rule.MaxWait > readmeHoldLimit {
					err = fmt.Errorf("max_wait %v is above %v", rt.Rule.MaxWait, readmeHoldLimit)
				}
				if err != nil {
					t.Errorf("README context_extensions example %v: %v", ext, err)
				}
			}
		}
	}
	if files == 0 || routes == 0 {
		t.Errorf("found %d limits examples and %d route examples in the README and docs/configuration.md; want both", files, routes)
	}
}
