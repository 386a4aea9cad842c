package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/knbox/knbox/pkg/image"
	"github.com/knbox/knbox/pkg/image/imagetest"
)

// TestConsoleInBrowser drives the web console in Debian's headless
// chromium: the sign-in form with the kubeconfig's token, the Service in
// the list, its page with the traffic table and its Revision, and a
// request-rate graph that is not empty once traffic flowed, and the
// Service's recent events. With
// KNBOX_CONSOLE_SCREENSHOT=path it saves a screenshot of the Service page
// (docs/console.png is made so).
func TestConsoleInBrowser(t *testing.T) {
	requireTool(t, "runc")
	chromium := requireTool(t, "chromium")
	dir := t.TempDir()
	cfgPath := filepath.Join(t.TempDir(), "knbox.yaml")
	if err := os.WriteFile(cfgPath, []byte("observability:\n  console:\n    sampleInterval: 500ms\n    samples: 240\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := startServerWith(t, dir, "", "--config", cfgPath)
	k := &kubectlEnv{t: t, bin: requireTool(t, "kubectl"), srv: srv,
		env: []string{"KUBECONFIG=" + filepath.Join(dir, "kubeconfig"), "HOME=" + t.TempDir()}}
	reg := imagetest.StartRegistry(t)
	imagetest.PushGoImage(t, reg, "runtime-info:v1", "github.com/knbox/knbox/test/images/runtime-info", image.Config{})
	k.must(fmt.Sprintf("apiVersion: serving.knative.dev/v1\nkind: Service\nmetadata:\n  name: hello\nspec:\n  template:\n    spec:\n      containers:\n      - image: %s/runtime-info:v1\n", reg), "apply", "-f", "-")
	if out, err := k.run("", "wait", "ksvc/hello", "--for=condition=Ready", "--timeout=120s"); err != nil {
		t.Fatalf("service not ready: %v\n%s", err, out)
	}
	host := strings.TrimPrefix(k.must("", "get", "ksvc", "hello", "-o", "jsonpath={.status.url}"), "http://")
	kc, err := clientcmd.LoadFromFile(filepath.Join(dir, "kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}
	token := kc.AuthInfos[kc.Contexts[kc.CurrentContext].AuthInfo].Token

	// Traffic while the browser looks: bounded in count and time, ended
	// with the test.
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		c := &http.Client{Timeout: 10 * time.Second}
		for i := 0; i < 2000; i++ {
			select {
			case <-done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			req, _ := http.NewRequest("GET", "http://"+srv.httpAddr+"/", nil)
			req.Host = host
			if resp, err := c.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	}()
	defer wg.Wait()
	defer close(done)

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chromium), chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("ignore-certificate-errors", true), // knbox's own CA
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1000))
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	ctx, cancel := context.WithTimeout(bctx, 3*time.Minute)
	defer cancel()

	base := "https://" + srv.apiAddr + "/console/"
	page := func() string {
		html, _ := chromedp.Run(bctx, chromedp.OuterHTML("html"))
		return html
	}
	step := func(name string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(ctx, actions...); err != nil {
			t.Fatalf("%s: %v\npage:\n%s", name, err, page())
		}
	}
	text := func(name, sel string) string {
		t.Helper()
		v, err := chromedp.Run(ctx, chromedp.Text(sel))
		if err != nil {
			t.Fatalf("%s: %v\npage:\n%s", name, err, page())
		}
		return v
	}
	step("sign-in form", chromedp.Navigate(base), chromedp.WaitVisible("#token"))
	step("sign in", chromedp.SendKeys("#token", token), chromedp.Click("#signin"),
		chromedp.WaitVisible(`tr.service[data-name="hello"]`))
	if user := text("user", "#user"); user != "admin" {
		t.Errorf("signed in as %q, want admin", user)
	}
	if cookies, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.cookie`)); err != nil || strings.Contains(cookies, "knbox_console") {
		t.Errorf("the session cookie is readable by scripts: %q %v", cookies, err)
	}
	step("service page", chromedp.Click(`tr.service[data-name="hello"] a.name`),
		chromedp.WaitVisible("#traffic"),
		chromedp.WaitVisible(`section.revision[data-name="hello-00001"]`))
	// The controllers' and the instances' Events.
	step("events", chromedp.WaitVisible("#events tr.event"))
	if traffic := text("traffic", "#traffic"); !strings.Contains(traffic, "hello-00001") || !strings.Contains(traffic, "100%") {
		t.Errorf("traffic table %q lacks hello-00001 at 100%%", traffic)
	}
	// The page refreshes itself; the graph fills as samples arrive.
	step("request graph", chromedp.WaitVisible(
		`section.revision[data-name="hello-00001"] figure[data-series="rate"]:not([data-max="0"]) polyline`))
	if p := os.Getenv("KNBOX_CONSOLE_SCREENSHOT"); p != "" {
		// More samples make a fuller picture: up to 30 more seconds.
		for i := 0; i < 60; i++ {
			n, err := chromedp.Run(ctx, chromedp.Evaluate[int](
				`+(document.querySelector('section.revision[data-name="hello-00001"] figure[data-series="p95"]')||{dataset:{points:0}}).dataset.points`))
			if err != nil || n >= 30 {
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	step("log tail", chromedp.Navigate(base+"namespaces/default/revisions/hello-00001/log"), chromedp.WaitVisible("h1"))
}
