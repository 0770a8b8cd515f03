package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

func TestRunBuiltins(t *testing.T) {
	tests := []struct {
		args    []string
		wantOut string
		wantErr error
	}{
		{args: []string{"version"}, wantOut: "sluice dev"},
		{args: []string{"help"}, wantOut: "Usage: sluice <command>"},
		{args: nil, wantErr: errUsage},
		{args: []string{"frobnicate"}, wantErr: errUsage},
	}
	for _, tt := range tests {
		var out, errOut bytes.Buffer
		err := run(context.Background(), tt.args, func(string) string { return "" }, &out, &errOut)
		if !errors.Is(err, tt.wantErr) {
			t.Errorf("run(%q) error = %v, want %v", tt.args, err, tt.wantErr)
		}
		if !strings.Contains(out.String(), tt.wantOut) {
			t.Errorf("run(%q) stdout = %q, want it to contain %q", tt.args, out.String(), tt.wantOut)
		}
	}
}
