package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFileToken: a --token-file holds a bare token or the server's
// --admin-token-file lines; anything else is refused saying which format is
// expected, and no error quotes a token.
func TestFileToken(t *testing.T) {
	const rw, ro = "rw-token-0123456789", "ro-token-0123456789"
	server := "# ops first\nops rw " + rw + "\n\nviewer ro " + ro + "\n"
	for _, tc := range []struct {
		name, data, tokenName string
		want                  string // the token, or "" for an error
		errHas                string
	}{
		{"bare", rw + "\n", "", rw, ""},
		{"bare with comment", "# mine\n  " + rw + "  \n", "", rw, ""},
		{"server file, one line", "ops rw " + rw + "\n", "", rw, ""},
		{"server file, named", server, "viewer", ro, ""},
		{"server file, first named", server, "ops", rw, ""},
		{"server file, several, no name", server, "", "", "holds 2 tokens (ops, viewer): give --token-name NAME"},
		{"server file, unknown name", server, "nobody", "", `--token-name "nobody": no such line (the file names ops, viewer)`},
		{"bare with a name", rw, "ops", "", "holds a bare token, with no name"},
		{"two fields", "ops " + rw, "", "", "line 1 has 2 fields: want a file holding the token alone, or the server's --admin-token-file lines '<name> <rw|ro|charge> <token>'"},
		{"mixed", rw + "\nops rw " + rw, "", "", "a bare token among named lines"},
		{"empty", "# nothing\n", "", "", "no token in it"},
	} {
		got, err := fileToken([]byte(tc.data), tc.tokenName)
		switch {
		case tc.want != "" && (err != nil || got != tc.want):
			t.Errorf("%s: fileToken = %q, %v; want %q", tc.name, got, err, tc.want)
		case tc.want == "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)):
			t.Errorf("%s: fileToken = %q, %v; want an error containing %q", tc.name, got, err, tc.errHas)
		case err != nil && (strings.Contains(err.Error(), rw) || strings.Contains(err.Error(), ro)):
			t.Errorf("%s: the error quotes a token: %v", tc.name, err)
		}
	}
}

// TestTokenFileBothWays: the server's --admin-token-file works as the
// client's --token-file against a real server (with --token-name when it
// holds several tokens), as a bare token does; and the server given a
// client's bare-token file says which format it wants.
func TestTokenFileBothWays(t *testing.T) {
	dir := t.TempDir()
	serverFile := filepath.Join(dir, "tokens")
	if err := os.WriteFile(serverFile, []byte("viewer ro "+dashRO+"\nops rw "+e2eRW+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	oneLine := filepath.Join(dir, "one")
	if err := os.WriteFile(oneLine, []byte("viewer ro "+dashRO+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bare := filepath.Join(dir, "bare")
	if err := os.WriteFile(bare, []byte(dashRO+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := startServer(t, filepath.Join(repoRoot, "testdata/rules/failure"), func(c *serveConfig) { c.Tenants.AdminTokenFile = serverFile })
	noEnv := func(string) string { return "" }
	for _, tc := range []struct {
		name   string
		args   []string
		errHas string // "" when it must work
	}{
		{"server file, --token-name", []string{"--token-file", serverFile, "--token-name", "viewer"}, ""},
		{"server file, one line", []string{"--token-file", oneLine}, ""},
		{"bare token", []string{"--token-file", bare}, ""},
		{"server file, several, no name", []string{"--token-file", serverFile}, "holds 2 tokens (viewer, ops): give --token-name NAME"},
	} {
		var out, errOut bytes.Buffer
		err := run(context.Background(), append([]string{"top", "--admin-url", a.base}, tc.args...), noEnv, &out, &errOut)
		switch {
		case tc.errHas == "" && (err != nil || !strings.Contains(out.String(), "instance(s)")):
			t.Errorf("%s: sluice top: %v\n%s%s\nwant the top list", tc.name, err, out.String(), errOut.String())
		case tc.errHas != "" && (err == nil || !strings.Contains(err.Error(), tc.errHas)):
			t.Errorf("%s: sluice top: %v, want an error containing %q", tc.name, err, tc.errHas)
		}
	}

	// The other way: the server refuses a bare token, naming both formats.
	err := run(context.Background(), []string{"serve", "--rules", filepath.Join(repoRoot, "testdata/rules/failure"), "--admin-token-file", bare,
		"--grpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--debug-addr", "off"}, noEnv, io.Discard, io.Discard)
	if want := "line 1: a bare token (the format of the client's --token-file): want <name> <rw|ro|charge> <token>"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("sluice serve --admin-token-file with a bare token: %v, want an error containing %q", err, want)
	}
	if err != nil && strings.Contains(err.Error(), dashRO) {
		t.Errorf("the server's error quotes the token: %v", err)
	}
}
