package rules

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// allocated returns the bytes f allocates (runtime.MemStats.TotalAlloc),
// a measure of work that does not depend on the machine's speed.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// flowFile is a rule file of flow-style descriptors item(0), item(1)… as
// many as fit in size bytes.
func flowFile(size int, item func(i int) string) string {
	var sb strings.Builder
	sb.WriteString("domain: d\ndescriptors: [")
	for i := 0; ; i++ {
		it := item(i)
		if sb.Len()+len(it)+3 > size {
			break
		}
		if i > 0 {
			sb.WriteByte(',')
		}
		sb.WriteString(it)
	}
	sb.WriteString("]\n")
	return sb.String()
}

// chain is descriptor i nested depth deep, each level with a rule when
// withRules.
func chain(i, depth int, withRules bool) string {
	level := fmt.Sprintf("{key: k%d, descriptors: [", i)
	if withRules {
		level = fmt.Sprintf("{key: k%d, rate_limit: {unit: second, requests_per_unit: 1}, descriptors: [", i)
	}
	return strings.Repeat(level, depth-1) + "{key: k}" + strings.Repeat("]}", depth-1)
}

// aliasBomb is a "billion laughs" rule file: levels of lists, each of fan
// descriptors whose children are the list of the level below, by alias;
// fan^levels descriptors once expanded.
func aliasBomb(levels, fan int) string {
	lvl := "&l0 [{key: x}]"
	for l := 1; l <= levels; l++ {
		var sb strings.Builder
		fmt.Fprintf(&sb, "&l%d [{key: b0, descriptors: %s}", l, lvl)
		for j := 1; j < fan; j++ {
			fmt.Fprintf(&sb, ", {key: b%d, descriptors: *l%d}", j, l-1)
		}
		sb.WriteString("]")
		lvl = sb.String()
	}
	return "domain: d\ndescriptors: [{key: top, descriptors: " + lvl + "}]\n"
}

// TestWorstRuleFileMemory: the worst rule files MaxFileBytes,
// MaxDescriptorDepth and the node budget allow cost memory in proportion
// to their size, at most perByte bytes allocated per byte of file (the
// YAML library's nodes are most of it), and a file that expands through
// aliases at most aliasBudget, whatever its size. Over the bounds, a file
// is refused for less. Measured on main before the bounds: a 300 KB file
// of 4,000 nested descriptors allocated 1.4 GiB.
func TestWorstRuleFileMemory(t *testing.T) {
	const (
		perByte     = 128      // measured: at most 96 (deep chains without rules)
		aliasBudget = 64 << 20 // measured: 46 MiB
	)
	full := MaxFileBytes - 64
	tests := []struct {
		name    string
		file    func(size int) string
		budget  func(size int) uint64
		wantErr string // "" when the file is accepted
		orErr   string // when accepted, or refused with this
	}{
		{"deepest chains with rules", func(n int) string {
			return flowFile(n, func(i int) string { return chain(i, MaxDescriptorDepth, true) })
		}, nil, "", ""},
		{"deepest chains without rules", func(n int) string {
			return flowFile(n, func(i int) string { return chain(i, MaxDescriptorDepth, false) })
		}, nil, "", ""},
		{"many rules", func(n int) string {
			return flowFile(n, func(i int) string {
				return fmt.Sprintf("{key: k%d, rate_limit: {unit: second, requests_per_unit: 1}}", i)
			})
		}, nil, "", ""},
		{"many wildcard rules", func(n int) string {
			return flowFile(n, func(i int) string {
				return fmt.Sprintf("{key: k, value: \"%x*%x\", rate_limit: {unit: second, requests_per_unit: 1}}", i*7919, i)
			})
		}, nil, "", ""},
		{"long wildcard value", func(n int) string {
			return "domain: d\ndescriptors: [{key: k, value: \"" + strings.Repeat("v", n/2-64) + "*" + strings.Repeat("w", n/2-64) + "\", rate_limit: {unit: second, requests_per_unit: 1}}]\n"
		}, nil, "", ""},
		{"many members", func(n int) string {
			return flowFile(n, func(i int) string { return fmt.Sprintf("{key: k%d}", i) })
		}, nil, "", "YAML nodes"},
		{"long value", func(n int) string {
			return "domain: d\ndescriptors: [{key: k, value: " + strings.Repeat("v", n-64) + "}]\n"
		}, nil, "", ""},
		{"nested past MaxDescriptorDepth", func(n int) string {
			return flowFile(n, func(i int) string { return chain(i, 1000, false) })
		}, nil, fmt.Sprintf("nested more than %d deep", MaxDescriptorDepth), ""},
		{"nested lists past the YAML library's depth", func(int) string {
			return "domain: d\ndescriptors: " + strings.Repeat("[", 20000) + strings.Repeat("]", 20000)
		}, func(int) uint64 { return 16 << 20 }, "max depth", ""},
		{"alias bomb", func(int) string { return aliasBomb(9, 9) },
			func(int) uint64 { return aliasBudget }, "YAML nodes", ""},
		{"over MaxFileBytes", func(int) string { return strings.Repeat("#", MaxFileBytes+1) },
			func(int) uint64 { return 64 << 10 }, "more than the limit of 1048576", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			perSize := map[int]float64{}
			for _, size := range []int{full / 4, full} {
				data := []byte(tc.file(size))
				var err error
				got := allocated(func() { _, err = Parse("x.yaml", data, Options{}) })
				if tc.wantErr == "" && err != nil && (tc.orErr == "" || !strings.Contains(err.Error(), tc.orErr)) {
					t.Fatalf("%d bytes: Parse = %v, want accepted", len(data), err)
				}
				if tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
					t.Fatalf("%d bytes: Parse = %.300v, want an error containing %q", len(data), err, tc.wantErr)
				}
				budget := uint64(perByte * len(data))
				if tc.budget != nil {
					budget = tc.budget(len(data))
				}
				if got > budget {
					t.Errorf("%d-byte file: %d bytes allocated (%.1f per byte), want at most %d", len(data), got, float64(got)/float64(len(data)), budget)
				}
				perSize[size] = float64(got) / float64(len(data))
				t.Logf("%d-byte file: %d KiB allocated (%.1f per byte)", len(data), got>>10, perSize[size])
			}
			// Linear: four times the file, not sixteen times the memory.
			if tc.budget == nil && perSize[full] > 1.5*perSize[full/4] {
				t.Errorf("%.1f bytes per byte of a %d-byte file, %.1f of a quarter of it: grows faster than the file", perSize[full], full, perSize[full/4])
			}
		})
	}
}

// TestRuleDirBounds: LoadDir refuses a file over MaxFileBytes without
// reading it, and a directory whose rule files come to more than
// MaxDirBytes, naming the file where the total went over.
func TestRuleDirBounds(t *testing.T) {
	t.Run("file over MaxFileBytes", func(t *testing.T) {
		dir := t.TempDir()
		good := "domain: a\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n"
		if err := os.WriteFile(filepath.Join(dir, "a.yaml"), []byte(good), 0o644); err != nil {
			t.Fatal(err)
		}
		huge := filepath.Join(dir, "huge.yaml")
		f, err := os.Create(huge)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(1 << 30); err != nil { // sparse: 1 GiB on no disk
			t.Fatal(err)
		}
		f.Close()
		var snap *Snapshot
		got := allocated(func() { snap, err = LoadDir(dir, Options{}) })
		var errs Errors
		if snap != nil || !errors.As(err, &errs) || len(errs) != 1 || errs[0].File != huge || !strings.Contains(errs[0].Msg, "1073741824 bytes, more than the limit of 1048576") {
			t.Fatalf("LoadDir = %v, %v; want one problem naming %s and its size", snap, err, huge)
		}
		if got > 1<<20 {
			t.Errorf("refusing a 1 GiB file allocated %d bytes, want at most 1 MiB (it must not be read)", got)
		}
	})
	t.Run("directory over MaxDirBytes", func(t *testing.T) {
		dir := t.TempDir()
		n := MaxDirBytes/MaxFileBytes + 1
		for i := range n {
			f, err := os.Create(filepath.Join(dir, fmt.Sprintf("f%02d.yaml", i)))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteString("domain: d" + fmt.Sprint(i) + "\ndescriptors: [{key: k, rate_limit: {unit: second, requests_per_unit: 1}}]\n#"); err != nil {
				t.Fatal(err)
			}
			if err := f.Truncate(MaxFileBytes); err != nil { // the rest: NULs after the comment sign
				t.Fatal(err)
			}
			f.Close()
		}
		_, err := LoadDir(dir, Options{})
		last := filepath.Join(dir, fmt.Sprintf("f%02d.yaml", n-1))
		if err == nil || !strings.Contains(err.Error(), last+": the rule files of "+dir+" come to more than 16777216 bytes") {
			t.Fatalf("LoadDir of %d files of %d bytes = %.500v; want the total refused at %s", n, MaxFileBytes, err, last)
		}
	})
	t.Run("ParseFiles over MaxDirBytes", func(t *testing.T) {
		data := make([]byte, MaxFileBytes)
		files := make([]File, MaxDirBytes/MaxFileBytes+1)
		for i := range files {
			files[i] = File{Name: fmt.Sprintf("xds:r%d", i), Data: data}
		}
		_, err := ParseFiles(files, Options{})
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("xds:r%d: the rule files come to more than 16777216 bytes", len(files)-1)) {
			t.Fatalf("ParseFiles = %.300v; want the total refused at the last file", err)
		}
	})
}
