package config

import (
	"os"
	"regexp"
	"testing"

	"go.yaml.in/yaml/v3"
)

// Every configuration example in the README loads: limits files (yaml blocks that start with
// "# limits") through Parse, and route context_extensions through ParseRoute.
func TestREADMEExamples(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```yaml\n(.*?)```").FindAllSubmatch(data, -1)
	files, routes := 0, 0
	for _, b := range blocks {
		src := b[1]
		if regexp.MustCompile(`^# limits`).Match(src) {
			files++
			if _, err := Parse(src, "README example"); err != nil {
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
				if _, err := c.ParseRoute(ext); err != nil {
					t.Errorf("README context_extensions example %v: %v", ext, err)
				}
			}
		}
	}
	if files == 0 || routes == 0 {
		t.Errorf("found %d limits examples and %d route examples in the README; want both", files, routes)
	}
}
