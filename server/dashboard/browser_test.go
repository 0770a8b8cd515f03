package dashboard

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/sluice-rl/sluice/internal/proctest"
	"github.com/sluice-rl/sluice/rules"
	"github.com/sluice-rl/sluice/service"
)

// chromium returns the path of a headless-capable Chromium, skipping the
// test when there is none (failing under CI=true, where .ci/run installs
// Debian's chromium).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	proctest.Missing(t, "chromium", "chromium not found on PATH: the dashboard's browser test is skipped; install it (apt-get install -y chromium) or see .ci/run")
	return ""
}

// TestDashboardInBrowser loads the dashboard in a real headless Chromium:
// the page renders, its figures change after traffic, a denied key shows in
// the top list, and the console stays free of errors. With
// SLUICE_UPDATE_SCREENSHOT=1 it saves docs/dashboard.png.
func TestDashboardInBrowser(t *testing.T) {
	bin := chromium(t)
	in := newInstance(t, "sluice-0", nil)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 1100),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	ctx, cancel := chromedp.NewContext(actx)
	defer cancel()
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	defer cancelTimeout()

	var mu sync.Mutex
	var consoleErrors []string
	if err := chromedp.Listen(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.ConsoleAPICalledTypeError {
				var parts []string
				for _, a := range e.Args {
					parts = append(parts, string(a.Value))
				}
				consoleErrors = append(consoleErrors, strings.Join(parts, " "))
			}
		case *runtime.EventExceptionThrown:
			consoleErrors = append(consoleErrors, e.ExceptionDetails.Text)
		}
	}); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	headers := network.Headers{"Authorization": "Bearer " + testToken}
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: headers}); err != nil {
		t.Fatalf("setting the token header: %v", err)
	}
	if err := chromedp.Do(ctx,
		chromedp.Navigate(in.srv.URL+"/dashboard/"),
		chromedp.WaitVisible("#rate-chart"),
		chromedp.WaitVisible("#breakers li"),
	); err != nil {
		t.Fatalf("loading the dashboard: %v", err)
	}

	// Traffic while the page polls: one key far over its limit, a few
	// under it, and a shadow-mode rule that would deny.
	traffic := [][2]string{{"remote_address", "203.0.113.7"}, {"remote_address", "203.0.113.7"},
		{"remote_address", "198.51.100.23"}, {"path", "/checkout"}, {"api_key", "acme"}, {"api_key", "trial-7"}}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				for _, d := range traffic {
					_, _ = in.eng.Check(context.Background(), service.Request{Domain: "edge",
						Descriptors: []service.Descriptor{{Entries: []rules.Entry{{Key: d[0], Value: d[1]}}}}})
				}
			}
		}
	}()
	err := chromedp.Do(ctx,
		chromedp.WaitVisible(`#top tbody tr[data-key="remote_address=203.0.113.7"]`),
		chromedp.Poll[chromedp.Void](`parseFloat(document.getElementById("rate-denied").textContent) > 0`, chromedp.WithPollingTimeout(30*time.Second)),
	)
	var denied string
	if err == nil {
		denied, err = chromedp.Run(ctx, chromedp.Text("#rate-denied"))
	}
	if err == nil {
		err = chromedp.Do(ctx, chromedp.WaitVisible(`#tiers tbody tr`))
	}
	if err == nil && os.Getenv("SLUICE_UPDATE_SCREENSHOT") == "1" {
		err = screenshot(ctx)
	}
	close(stop)
	<-done
	if err != nil {
		t.Fatalf("waiting for the denied key and a denial rate on the page: %v", err)
	}
	if v, perr := strconv.ParseFloat(denied, 64); perr != nil || v <= 0 {
		t.Errorf("denied per second on the page = %q, want a positive number", denied)
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[int](`document.querySelectorAll("#rules tbody tr").length`))
	if err != nil || rows == 0 {
		t.Errorf("rules table rows = %d (%v), want at least one", rows, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(consoleErrors) > 0 {
		t.Errorf("console errors: %q", consoleErrors)
	}
}

// screenshot saves the page, after a few polls of traffic, to
// docs/dashboard.png (the README shows it).
func screenshot(ctx context.Context) error {
	if err := chromedp.Do(ctx, chromedp.Sleep(6*time.Second)); err != nil {
		return err
	}
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join("..", "..", "docs", "dashboard.png"), png, 0o644)
}
