package tenant

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// allocated returns the bytes f allocates (runtime.MemStats.TotalAlloc).
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestReadFileHostile: a snapshot file is read in memory proportional to
// its size, whatever its header claims: the worst files a 4 MiB bound
// allows (the most records, the longest overrides, nesting in a line, a
// header announcing 2^50 records or a negative count) cost at most
// perByte bytes allocated per byte of file, and are refused or read,
// never a panic. Before: a header of "records": -1 panicked (makeslice)
// and one of 2^40 asked for 40 TB.
func TestReadFileHostile(t *testing.T) {
	const (
		bound   = 4 << 20
		perByte = 64 // measured: 42 (most records: a json.Decoder per line, ~800 bytes)
	)
	header := func(records int) string {
		return fmt.Sprintf(`{"format":%q,"version":%d,"at":"2026-01-01T00:00:00Z","records":%d,"switches":[]}`+"\n", FileFormat, FileVersion, records)
	}
	fill := func(head string, line func(i int) string) string {
		var sb strings.Builder
		sb.WriteString(head)
		for i := 0; ; i++ {
			l := line(i)
			if sb.Len()+len(l) > bound-64 {
				break
			}
			sb.WriteString(l)
		}
		return sb.String()
	}
	ov := `{"domain":"` + strings.Repeat("d", MaxDomainLen) + `","path":"` + strings.Repeat("p", MaxDescriptorLen) + `","alg":"fixed_window","quota":1,"window_us":1000000}`
	longRec := `{"t":"x","tier":"pro","ovs":[` + strings.Repeat(ov+",", MaxOverrides-1) + ov + "]}\n"
	for _, tc := range []struct {
		name, text, wantErr string
	}{
		{"negative record count", header(-1) + `{"end":true,"records":0}` + "\n", "records: -1"},
		{"2^50 records announced", header(1<<50) + `{"t":"a","tier":"pro"}` + "\n", "cut short"},
		{"most records", fill(header(1<<30), func(i int) string { return fmt.Sprintf(`{"t":"%x","tier":"pro"}`+"\n", i) }), "cut short"},
		{"longest overrides", fill(header(1<<30), func(int) string { return longRec }), "cut short"},
		{"nested arrays in a line", header(1) + `{"t":"a","tier":"pro","ovs":` + strings.Repeat("[", 1<<20) + "\n", ""},
		{"nested objects in an unknown field", header(1) + `{"x":` + strings.Repeat(`{"a":`, 200_000) + "\n", ""},
		{"a line over the scanner's bound", header(1) + `{"t":"` + strings.Repeat("a", 3<<20) + "\n", "token too long"},
	} {
		path := filepath.Join(t.TempDir(), "snap")
		if err := os.WriteFile(path, []byte(tc.text), 0o600); err != nil {
			t.Fatal(err)
		}
		var err error
		got := allocated(func() { _, err = ReadFile(path, bound) })
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
			t.Errorf("%s: ReadFile = %.200v, want an error containing %q", tc.name, err, tc.wantErr)
		}
		if budget := uint64(perByte*len(tc.text)) + 4<<20; got > budget {
			t.Errorf("%s: %d-byte file: %d bytes allocated, want at most %d", tc.name, len(tc.text), got, budget)
		}
		t.Logf("%s: %d-byte file, %d KiB allocated", tc.name, len(tc.text), got>>10)
	}
}
