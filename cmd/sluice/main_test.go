package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"runtime/debug"
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

// TestVersionLine: `sluice version` names the stamped version, else the
// module's, and the VCS revision the go command recorded.
func TestVersionLine(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.4.0"}, Settings: []debug.BuildSetting{
		{Key: "vcs.revision", Value: "aaeb3df"}, {Key: "vcs.time", Value: "2026-11-26T05:00:00Z"}, {Key: "vcs.modified", Value: "true"},
	}}
	for _, tc := range []struct {
		stamped string
		info    func() (*debug.BuildInfo, bool)
		want    string
	}{
		{"dev", func() (*debug.BuildInfo, bool) { return bi, true }, "sluice v0.4.0 (go1.26.8, revision aaeb3df+dirty of 2026-11-26T05:00:00Z)"},
		{"1.2.3", func() (*debug.BuildInfo, bool) { return bi, true }, "sluice 1.2.3 (go1.26.8, revision aaeb3df+dirty of 2026-11-26T05:00:00Z)"},
		{"dev", func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, true
		}, "sluice dev (go1.26.8)"},
		{"dev", func() (*debug.BuildInfo, bool) { return nil, false }, "sluice dev"},
		{"1.2.3+r", func() (*debug.BuildInfo, bool) {
			return &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, true
		}, "sluice 1.2.3 (go1.26.8, revision 0123abc)"}, // -buildvcs=false, revision stamped by scripts/release.sh
	} {
		old, oldRev := version, revision
		version = tc.stamped
		if v, ok := strings.CutSuffix(tc.stamped, "+r"); ok {
			version, revision = v, "0123abc"
		}
		got := versionLine(tc.info)
		version, revision = old, oldRev
		if got != tc.want {
			t.Errorf("versionLine (stamped %q) = %q, want %q", tc.stamped, got, tc.want)
		}
	}
}

// TestUnknownCommandSuggests: a mistyped command gets a suggestion, not the
// whole usage.
func TestUnknownCommandSuggests(t *testing.T) {
	for _, tc := range []struct{ arg, want string }{
		{"chek", "Did you mean this?\n\tcheck"},
		{"serv", "\tserve"},
		{"zzzzzzzz", ""},
	} {
		var errOut bytes.Buffer
		err := run(context.Background(), []string{tc.arg}, func(string) string { return "" }, io.Discard, &errOut)
		if !errors.Is(err, errUsage) {
			t.Errorf("sluice %s: error %v, want a usage error", tc.arg, err)
		}
		if tc.want != "" && !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("sluice %s printed %q, want it to contain %q", tc.arg, errOut.String(), tc.want)
		}
		if strings.Contains(errOut.String(), "Usage: sluice <command>") {
			t.Errorf("sluice %s printed the whole usage: %q", tc.arg, errOut.String())
		}
	}
}

// TestUnknownFlagSuggests: a mistyped flag gets one line naming it, the
// nearest flag of the command and where every flag is listed; not the
// command's usage (serve's is over 140 lines).
func TestUnknownFlagSuggests(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // the whole message
	}{
		{[]string{"serve", "--stroe", "memory"}, "serve: unknown flag --stroe (did you mean --store?); run 'sluice serve --help' for every flag"},
		{[]string{"serve", "-stroe=memory"}, "serve: unknown flag --stroe (did you mean --store?); run 'sluice serve --help' for every flag"},
		{[]string{"check", "--adr", "x:1"}, "check: unknown flag --adr (did you mean --addr?); run 'sluice check --help' for every flag"},
		{[]string{"switch", "set", "--stat", "on"}, "switch set: unknown flag --stat (did you mean --state?); run 'sluice switch set --help' for every flag"},
		{[]string{"validate", "--merge-domain", "x"}, "validate: unknown flag --merge-domain (did you mean --merge-domains?); run 'sluice validate --help' for every flag"},
		{[]string{"top", "--zzzzzzzz"}, "top: unknown flag --zzzzzzzz; run 'sluice top --help' for every flag"},
		{[]string{"serve", "--grpc-addr"}, "serve: --grpc-addr needs a value; run 'sluice serve --help' for every flag"},
	} {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), tc.args, func(string) string { return "" }, &stdout, &stderr)
		if !errors.Is(err, errUsage) {
			t.Errorf("sluice %q: error %v, want a usage error", tc.args, err)
			continue
		}
		if err.Error() != tc.want {
			t.Errorf("sluice %q: error\n%q, want\n%q", tc.args, err.Error(), tc.want)
		}
		if stderr.Len() > 0 || stdout.Len() > 0 {
			t.Errorf("sluice %q printed %q on stderr and %q on stdout, want nothing but the error (main prints it)", tc.args, stderr.String(), stdout.String())
		}
	}
}
