package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/limitkit/ratelimit/internal/browsertest"
)

// console collects what the pages report as errors: uncaught exceptions,
// console.error calls, and log entries (a CSP violation, a failed load).
// A response the test provokes on purpose (a 401, a 400) is logged by
// Chromium as a network error too: those on expected paths are let through.
type console struct {
	mu       sync.Mutex
	errors   []string
	expected []string // URL paths whose 4xx responses the test provokes
}

func (c *console) listen(ev any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch ev := ev.(type) {
	case *runtime.EventExceptionThrown:
		d := ev.ExceptionDetails
		msg := d.Text
		if d.Exception != nil {
			msg += " " + d.Exception.Description
		}
		c.errors = append(c.errors, fmt.Sprintf("exception at %s:%d: %s", d.URL, d.LineNumber, msg))
	case *runtime.EventConsoleAPICalled:
		if ev.Type == runtime.ConsoleAPICalledTypeError || ev.Type == runtime.ConsoleAPICalledTypeAssert {
			var args []string
			for _, a := range ev.Args {
				args = append(args, string(a.Value)+a.Description)
			}
			c.errors = append(c.errors, "console."+string(ev.Type)+": "+strings.Join(args, " "))
		}
	case *log.EventEntryAdded:
		e := ev.Entry
		if e.Level != log.EntryLevelError {
			return
		}
		if e.Source == log.EntrySourceNetwork {
			for _, p := range c.expected {
				if strings.Contains(e.URL, p) {
					return
				}
			}
		}
		c.errors = append(c.errors, fmt.Sprintf("%s %s: %s (%s)", e.Source, e.Level, e.Text, e.URL))
	}
}

// TestBrowser uses both pages in headless Chromium as a person would:
// a burst of 30 against a stored policy of 10 reads 10 allowed and 20
// refused; two algorithms run side by side at a window edge; a wrong token
// shows an error and changes nothing; an invalid limit is shown beside its
// field; a lowered limit and a reset key make the next burst admit 5.
// No JavaScript error is allowed on either page. Screenshots of both
// pages are left in the test's temporary directory.
func TestBrowser(t *testing.T) {
	bin := browsertest.Chromium(t, "the server's browser test")

	// The server, in this process, as the command runs it, with Envoy
	// rules for the management page to list.
	envoyConfig := filepath.Join(t.TempDir(), "web.yaml")
	os.WriteFile(envoyConfig, []byte("domain: web\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"), 0o600)
	sctx, stop := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	ran := make(chan error, 1)
	go func() {
		ran <- run(sctx, []string{"-addr", "127.0.0.1:0", "-token", testToken, "-envoy-config", envoyConfig}, io.Discard, io.Discard, func(u string) { ready <- u })
	}()
	var base string
	select {
	case base = <-ready:
	case err := <-ran:
		t.Fatalf("run: %v", err)
	}
	defer func() {
		stop()
		if err := <-ran; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.WindowSize(1200, 900))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses root otherwise; the pages are our own
	}
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc() // stops the browser this test started
	// /demo/sessions is opened as a page (a 405), and then Chromium asks
	// for /favicon.ico (a 404), which only the pages name (as data:).
	cons := &console{expected: []string{"/api/policies", "/demo/run", "/demo/sessions", "/favicon.ico"}}
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithListener(cons.listen))
	defer cancelBrowser()

	// Screenshots go to the test's temporary directory, or to
	// RATELIMIT_SCREENSHOT_DIR when set (to keep them, in CI say).
	dir := os.Getenv("RATELIMIT_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	shot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Errorf("screenshot %s: %v", name, err)
			return
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, png, 0o644); err != nil {
			t.Error(err)
		}
		t.Logf("screenshot: %s", path)
	}
	defer func() {
		if t.Failed() {
			shot("failure.png")
		}
	}()
	do := func(step string, actions ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, actions...); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.TextContent(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("reading %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	// set gives a field a value as typing or choosing would, with the
	// input and change events the page listens to.
	set := func(sel, value string) chromedp.Action[chromedp.Void] {
		s, _ := json.Marshal(sel)
		v, _ := json.Marshal(value)
		return chromedp.Evaluate[chromedp.Void](fmt.Sprintf(`(() => {
			const e = document.querySelector(%s);
			if (!e) throw new Error('no element ' + %s);
			e.value = %s;
			e.dispatchEvent(new Event('input', {bubbles: true}));
			e.dispatchEvent(new Event('change', {bubbles: true}));
		})()`, s, s, v))
	}
	wait := func(js string) chromedp.Action[chromedp.Void] {
		return chromedp.Poll[chromedp.Void](js, chromedp.WithPollingTimeout(30*time.Second))
	}
	statusDone := wait(`document.querySelector('#status').dataset.state === 'done'`)
	burstOnPolicy := func(step string) {
		t.Helper()
		do(step,
			chromedp.Navigate(base+"/"),
			wait(`document.querySelector('#status').dataset.state === 'ready'`),
			set("#a-source", "policy"), set("#a-policy", "demo"), set("#a-key", "visitor-1"),
			set("#b-source", "off"), set("#burst-n", "30"),
			chromedp.Click(chromedp.CSS("#fire-burst")),
			statusDone)
	}
	// apiGet reads path of the admin API, with the token.
	apiGet := func(path string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", base+"/api"+path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, err := io.ReadAll(res.Body)
		if err != nil {
			t.Fatal(err)
		}
		return res.StatusCode, b
	}
	// policy reads the demo policy through the admin API.
	policy := func() (version int64, limit int) {
		t.Helper()
		var p struct {
			Version     int64
			Fixedwindow struct{ Limit int }
		}
		if status, b := apiGet("/policies/demo"); status != http.StatusOK || json.Unmarshal(b, &p) != nil {
			t.Fatalf("GET /api/policies/demo: %d %s", status, b)
		}
		return p.Version, p.Fixedwindow.Limit
	}

	// The demo: a burst of 30 against the stored policy's 10.
	burstOnPolicy("a burst of 30 on the demo policy")
	if a, r := text("#a-allowed"), text("#a-refused"); a != "10" || r != "20" {
		t.Errorf("a burst of 30 against 10: the page reads %s allowed, %s refused; want 10 and 20", a, r)
	}
	if rows := text("#log tr:first-child"); !strings.Contains(rows, "refused") || !strings.Contains(rows, "limit reached") {
		t.Errorf("the latest decision reads %q", rows)
	}
	if n, _ := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('#log tr').length`)); n != 30 {
		t.Errorf("%d decisions listed, want 30", n)
	}

	// An invalid parameter is refused by the server and shown beside its
	// field.
	do("sending with an invalid limit",
		set("#a-source", "fixedwindow"), set("#a-limit", "-1"),
		chromedp.Click(chromedp.CSS("#fire-one")),
		wait(`document.querySelector('[data-err-for="a.fixedwindow.limit"]').textContent !== ''`))
	if msg := text(`[data-err-for="a.fixedwindow.limit"]`); !strings.Contains(msg, "-1") {
		t.Errorf("the error beside the limit reads %q", msg)
	}
	// The status line points up to it, by the field's name, and says it
	// as the page does: no Go notation.
	if st := text("#status"); !strings.Contains(st, "above, beside Limiter A's limit") {
		t.Errorf("after an invalid limit the status reads %q", st)
	}
	if msg := text(`[data-err-for="a.fixedwindow.limit"]`); strings.Contains(msg, "2^53") || strings.Contains(msg, "[") {
		t.Errorf("the error beside the limit reads %q", msg)
	}

	// Side by side at a window edge: the sliding log admits 10 of the 20,
	// the fixed window up to 20.
	do("the window-edge scenario", chromedp.Click(chromedp.CSS("#scenario-edge")), statusDone)
	if a, b := text("#a-allowed"), text("#b-allowed"); b != "10" || text("#b-refused") != "10" || !(len(a) == 2 && "10" <= a && a <= "20") {
		t.Errorf("at a window edge: fixed window %s allowed, sliding log %s allowed, %s refused", a, b, text("#b-refused"))
	} else {
		t.Logf("at a window edge: the fixed window admitted %s of 20, the sliding log %s", a, b)
	}
	if bars, _ := chromedp.Run(bctx, chromedp.Evaluate[[]int](`['offered', 'a', 'b'].map(k => document.querySelectorAll('#chart rect.bar.' + k).length)`)); len(bars) != 3 || bars[0] == 0 || bars[1] == 0 || bars[2] == 0 {
		t.Errorf("chart bars (offered, A, B): %v", bars)
	}
	// Each limiter in its algorithm's colour, the bench report's.
	if fills, _ := chromedp.Run(bctx, chromedp.Evaluate[[]string](`['a', 'b'].map(k => getComputedStyle(document.querySelector('#chart rect.bar.' + k)).fill)`)); len(fills) != 2 || fills[0] != "rgb(214, 39, 40)" || fills[1] != "rgb(44, 160, 44)" {
		t.Errorf("the fixed window's bars and the sliding log's are %v, want the report's red and green", fills)
	}
	shot("demo.png")

	// A bad count of requests is outlined in red as a bad limit is, beside
	// the button sent (a burst's and an edge's count are both traffic.n).
	invalid := func(sel string) bool {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[bool](fmt.Sprintf(`(() => { const e = document.querySelector(%q); return e.getAttribute('aria-invalid') === 'true' && getComputedStyle(e).outlineStyle === 'solid'; })()`, sel)))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	do("sending a burst of 0",
		set("#burst-n", "0"),
		chromedp.Click(chromedp.CSS("#fire-burst")),
		wait(`document.querySelector('#group-burst [data-err-for="traffic.n"]').textContent !== ''`))
	if !invalid("#burst-n") || invalid("#edge-n") {
		t.Errorf("a burst of 0: the burst's count outlined %v, the edge's %v; want only the burst's", invalid("#burst-n"), invalid("#edge-n"))
	}
	if st := text("#status"); !strings.Contains(st, "above, beside the requests in the burst") {
		t.Errorf("after a burst of 0 the status reads %q", st)
	}
	do("straddling an edge with 0",
		set("#burst-n", "30"), set("#edge-n", "0"),
		chromedp.Click(chromedp.CSS("#fire-edge")),
		wait(`document.querySelector('#group-edge [data-err-for="traffic.n"]').textContent !== ''`))
	if !invalid("#edge-n") || invalid("#burst-n") || text(`#group-burst [data-err-for="traffic.n"]`) != "" {
		t.Errorf("an edge of 0: the edge's count outlined %v, the burst's %v (its message %q); want only the edge's", invalid("#edge-n"), invalid("#burst-n"), text(`#group-burst [data-err-for="traffic.n"]`))
	}
	do("resetting the edge's count", set("#edge-n", "10"))

	// The demo's endpoints answer JSON, also to a method they do not take
	// (a visitor opening /demo/sessions in the browser).
	do("opening /demo/sessions", chromedp.Navigate(base+"/demo/sessions"))
	if msg, err := chromedp.Run(bctx, chromedp.Evaluate[string](`JSON.parse(document.body.innerText).error`)); err != nil || !strings.Contains(msg, "not allowed") {
		t.Errorf("GET /demo/sessions shows %q (%v), want a JSON error", msg, err)
	}

	// The management page: a wrong token is refused and changes nothing.
	do("signing in with a wrong token",
		chromedp.Navigate(base+"/admin"),
		chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), "not-the-token"),
		chromedp.Click(chromedp.CSS("#signin-btn")),
		wait(`document.querySelector('#token-error').textContent !== ''`))
	if msg := text("#token-error"); !strings.Contains(msg, "invalid bearer token") {
		t.Errorf("a wrong token shows %q", msg)
	}
	if hidden, _ := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.querySelector('#app').hidden`)); !hidden {
		t.Error("the policies are shown after a wrong token")
	}
	if stored, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`sessionStorage.getItem('limitkit-token') || ''`)); stored != "" {
		t.Errorf("a wrong token was kept: %q", stored)
	}
	if v, l := policy(); v != 1 || l != 10 {
		t.Fatalf("after a wrong token the demo policy is at version %d, limit %d", v, l)
	}

	// Sign in; an invalid limit is shown beside its field and stores nothing.
	do("signing in",
		set("#token", ""), chromedp.SendKeys(chromedp.CSS("#token"), testToken), set("#actor", "test-admin"),
		chromedp.Click(chromedp.CSS("#signin-btn")),
		chromedp.WaitVisible(chromedp.CSS(`#policies tr[data-name="demo"]`)))
	if got := text(`#policies tr[data-name="demo"] .limit`); got != "fixed window: 10 per 1m" {
		t.Errorf("the demo policy is listed as %q", got)
	}
	// The keys form suggests a key of the policy chosen: the demo page's
	// only for a policy the demo may use.
	placeholder := func() string {
		t.Helper()
		v, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('#reset-key').placeholder`))
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if pol, h := text("#reset-policy option:checked"), placeholder(); pol != "api" || h == "" || strings.Contains(h, "demo:") {
		t.Errorf("the keys form chooses %q and suggests %q", pol, h)
	}
	do("choosing the demo policy for a key", set("#reset-policy", "demo"))
	if h := placeholder(); !strings.Contains(h, "demo:visitor-1") {
		t.Errorf("for the demo policy the keys form suggests %q", h)
	}
	do("saving an invalid limit",
		chromedp.Click(chromedp.CSS(`#policies tr[data-name="demo"] button.edit`)),
		chromedp.WaitVisible(chromedp.CSS("#p-limit")),
		set("#p-limit", "zero"),
		chromedp.Click(chromedp.CSS("#save")),
		wait(`document.querySelector('[data-err-for="fixedwindow.limit"]').textContent !== ''`))
	if msg := text(`[data-err-for="fixedwindow.limit"]`); !strings.Contains(msg, "fixedwindow.limit") {
		t.Errorf("the error beside the limit reads %q", msg)
	}
	shot("admin-invalid.png")
	if v, l := policy(); v != 1 || l != 10 {
		t.Fatalf("after an invalid edit the demo policy is at version %d, limit %d", v, l)
	}

	// Lower the limit to 5.
	do("lowering the limit",
		set("#p-limit", "5"),
		chromedp.Click(chromedp.CSS("#save")),
		wait(`document.querySelector('#policies tr[data-name="demo"] .version').textContent === '2'`))
	if got := text(`#policies tr[data-name="demo"] .limit`); got != "fixed window: 5 per 1m" {
		t.Errorf("after the edit the policy is listed as %q", got)
	}
	if got := text(`#policies tr[data-name="demo"] .updated`); !strings.HasPrefix(got, "test-admin, ") {
		t.Errorf("last changed: %q, want test-admin and when", got)
	}
	if v, l := policy(); v != 2 || l != 5 {
		t.Errorf("after the edit the demo policy is at version %d, limit %d", v, l)
	}
	// The notice of the save goes at the next action.
	if got := text("#notice"); got != "Saved demo at version 2." {
		t.Errorf("after the save the notice reads %q", got)
	}
	do("reading a key's figures",
		set("#reset-policy", "demo"), set("#reset-key", "demo:visitor-1"),
		chromedp.Click(chromedp.CSS("#peek-btn")),
		wait(`document.querySelector('#reset-msg').textContent.includes('remaining')`))
	if got := text("#notice"); got != "" {
		t.Errorf("after reading a key's figures the notice still reads %q", got)
	}

	// A write with a token that has become wrong is refused: the page asks
	// to sign in again, and the policy stays as it was.
	do("saving with a wrong token",
		chromedp.Evaluate[chromedp.Void](`admin.token = 'not-the-token'`),
		chromedp.Click(chromedp.CSS(`#policies tr[data-name="demo"] button.edit`)),
		chromedp.WaitVisible(chromedp.CSS("#p-limit")),
		set("#p-limit", "1"),
		chromedp.Click(chromedp.CSS("#save")),
		wait(`document.querySelector('#token-error').textContent !== ''`))
	if msg := text("#token-error"); !strings.Contains(msg, "refused") {
		t.Errorf("a write with a wrong token shows %q", msg)
	}
	if hidden, _ := chromedp.Run(bctx, chromedp.Evaluate[bool](`document.querySelector('#app').hidden && document.querySelector('#editor').hidden`)); !hidden {
		t.Error("the policies or the editor are still shown after the token was refused")
	}
	if v, l := policy(); v != 2 || l != 5 {
		t.Fatalf("after a write with a wrong token the demo policy is at version %d, limit %d", v, l)
	}

	// Sign in again and reset the demo's key, so that its next burst starts
	// from an empty window under the new limit.
	do("resetting the demo's key",
		set("#token", ""), chromedp.SendKeys(chromedp.CSS("#token"), testToken),
		chromedp.Click(chromedp.CSS("#signin-btn")),
		chromedp.WaitVisible(chromedp.CSS(`#policies tr[data-name="demo"]`)),
		set("#reset-policy", "demo"), set("#reset-key", "demo:visitor-1"),
		chromedp.Click(chromedp.CSS("#reset-btn")),
		wait(`document.querySelector('#reset-msg').textContent.startsWith('Reset')`),
		chromedp.Click(chromedp.CSS("#peek-btn")),
		wait(`document.querySelector('#reset-msg').textContent.includes('remaining')`))
	if got := text("#reset-msg"); !strings.Contains(got, "5 of 5 remaining") {
		t.Errorf("the key's figures after the reset: %q", got)
	}

	// The page opened again in the same tab keeps the token and lists the
	// policies.
	do("opening the management page again",
		chromedp.Navigate(base+"/admin"),
		chromedp.WaitVisible(chromedp.CSS(`#policies tr[data-name="demo"]`)))
	do("reading the Envoy rules",
		chromedp.WaitVisible(chromedp.CSS(`#envoy-rules tr[data-domain="web"]`)))
	if got := text(`#envoy-rules tr[data-domain="web"] .limit`); got != "2 per minute" {
		t.Errorf("the Envoy rule is listed as %q", got)
	}

	// Create a policy (an empty list of applications is refused beside its
	// field), then delete it.
	do("creating a policy without applications",
		chromedp.Click(chromedp.CSS("#new-policy")),
		chromedp.WaitVisible(chromedp.CSS("#p-name")),
		set("#p-name", "checkout"), set("#p-algorithm", "slidinglog"),
		set("#p-limit", "100"), set("#p-window", "1m"), set("#p-key", "user"), set("#p-apps", ""),
		chromedp.Click(chromedp.CSS("#save")),
		wait(`document.querySelector('[data-err-for="apps"]').textContent !== ''`))
	do("creating a policy",
		set("#p-apps", "web, mobile"),
		chromedp.Click(chromedp.CSS("#save")),
		chromedp.WaitVisible(chromedp.CSS(`#policies tr[data-name="checkout"]`)))
	if got := text(`#policies tr[data-name="checkout"] .limit`); got != "sliding log: 100 per 1m" {
		t.Errorf("the new policy is listed as %q", got)
	}
	shot("admin.png")
	do("deleting the policy",
		chromedp.Click(chromedp.CSS(`#policies tr[data-name="checkout"] button.delete`)),
		wait(`document.querySelector('#policies tr[data-name="checkout"] button.delete').textContent.startsWith('Really')`),
		chromedp.Click(chromedp.CSS(`#policies tr[data-name="checkout"] button.delete`)),
		wait(`document.querySelector('#policies tr[data-name="checkout"]') === null`))
	if status, b := apiGet("/policies/checkout"); status != http.StatusNotFound {
		t.Errorf("the deleted policy: %d %s", status, b)
	}

	// An algorithm the page knows from its descriptor only: a calendar
	// quota, its period chosen from a list.
	do("creating a calendar quota",
		chromedp.Click(chromedp.CSS("#new-policy")),
		chromedp.WaitVisible(chromedp.CSS("#p-name")),
		set("#p-name", "plan"), set("#p-algorithm", "quota"),
		set("#p-limit", "10000"), set("#p-period", "month"), set("#p-timezone", "Europe/Paris"),
		set("#p-key", "user"), set("#p-apps", "web"),
		chromedp.Click(chromedp.CSS("#save")),
		chromedp.WaitVisible(chromedp.CSS(`#policies tr[data-name="plan"]`)))
	if got := text(`#policies tr[data-name="plan"] .limit`); got != "quota: limit 10000, period month, timezone Europe/Paris" {
		t.Errorf("the quota is listed as %q", got)
	}
	if status, b := apiGet("/policies/plan"); status != http.StatusOK || !strings.Contains(string(b), `"quota":{"limit":10000,"period":"month","timezone":"Europe/Paris"}`) {
		t.Errorf("the quota stored: %d %s", status, b)
	}

	// The next burst is admitted at the new limit.
	burstOnPolicy("a burst of 30 on the lowered policy")
	if a, r := text("#a-allowed"), text("#a-refused"); a != "5" || r != "25" {
		t.Errorf("a burst of 30 against the lowered limit of 5: the page reads %s allowed, %s refused", a, r)
	}
	if got := text("#a-label"); !strings.Contains(got, "5 per 1m)") {
		t.Errorf("the demo shows the policy as %q", got)
	}

	cons.mu.Lock()
	defer cons.mu.Unlock()
	for _, e := range cons.errors {
		t.Errorf("browser: %s", e)
	}
}
