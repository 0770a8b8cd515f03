package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	bad := t.TempDir()
	writeFile(t, filepath.Join(bad, "edge.yaml"), "domain: edge\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n  - kee: b\n")
	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		wantOut []string
		wantErr bool
		usage   bool
	}{
		{name: "example rules", args: []string{"../../examples/rules"}, wantOut: []string{"ok: 2 domain(s)"}},
		{name: "every problem, with file and line", args: []string{bad}, wantErr: true,
			wantOut: []string{"edge.yaml:4: descriptors[0].rate_limit.unit:", "edge.yaml:5: descriptors[1].kee:"}},
		{name: "no arguments", args: nil, wantErr: true, usage: true},
		{name: "bad default algorithm", args: []string{"--default-algorithm", "nope", bad}, wantErr: true, usage: true},
		{name: "env default algorithm", args: []string{"../../examples/rules"}, env: map[string]string{"SLUICE_DEFAULT_ALGORITHM": "gcra"}, wantOut: []string{"ok"}},
		{name: "money budgets with their prices", args: []string{"--prices", "../../examples/llm/prices.yaml", "../../examples/llm/rules"}, wantOut: []string{"ok: 1 domain(s), 6 rule(s)"}},
		{name: "money budgets, prices from the env", args: []string{"../../examples/llm/rules"}, env: map[string]string{"SLUICE_PRICES": "../../examples/llm/prices.yaml"}, wantOut: []string{"ok"}},
		{name: "money budgets without prices", args: []string{"../../examples/llm/rules"}, wantErr: true, wantOut: []string{"budgets.yaml:24: descriptors[0].descriptors[0].descriptors[0].descriptors[0].descriptors[0].rate_limit.usage: a money budget needs a price table"}},
		{name: "missing path", args: []string{filepath.Join(bad, "nope")}, wantErr: true, wantOut: []string{"nope"}},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		getenv := func(k string) string { return tt.env[k] }
		err := run(context.Background(), append([]string{"validate"}, tt.args...), getenv, &out, &errOut)
		if (err != nil) != tt.wantErr {
			t.Errorf("%s: validate %q error = %v, want error %v\nstdout: %s", tt.name, tt.args, err, tt.wantErr, out.String())
		}
		if errors.Is(err, errUsage) != tt.usage {
			t.Errorf("%s: validate %q error = %v, usage error want %v", tt.name, tt.args, err, tt.usage)
		}
		for _, w := range tt.wantOut {
			if !strings.Contains(out.String(), w) {
				t.Errorf("%s: validate %q stdout = %q, want it to contain %q", tt.name, tt.args, out.String(), w)
			}
		}
	}
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}
