package main

import (
	"context"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/limitkit/ratelimit/internal/browsertest"
)

// page is what the browser measured of the rendered report.
type page struct {
	Charts []struct {
		Caption       string
		Width, Height float64
		ViewBox       bool
		Marks, Drawn  int
		Fills         [][2]string // data-name, computed fill
	}
	ScrollWidth, InnerWidth float64
}

const measurePage = `(() => {
  const charts = [...document.querySelectorAll('figure.chart')].map(f => {
    const svg = f.querySelector('svg');
    const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
    const marks = svg ? [...svg.querySelectorAll('.data')] : [];
    const drawn = marks.filter(m => { const b = m.getBBox(); return b.width > 0 && b.height > 0; });
    return {
      Caption: (f.querySelector('figcaption') || {}).textContent || '',
      Width: box.width, Height: box.height,
      ViewBox: !!(svg && svg.getAttribute('viewBox')),
      Marks: marks.length, Drawn: drawn.length,
      Fills: drawn.map(m => [m.dataset.name || '', getComputedStyle(m).fill]),
    };
  });
  return {Charts: charts, ScrollWidth: document.documentElement.scrollWidth, InnerWidth: window.innerWidth};
})()`

// TestReportInBrowser renders the generated report in headless Chromium,
// 700 pixels wide, and checks that every chart the run's figures call for
// is there with its data drawn, that an algorithm has one colour in every
// chart and no two share one, and that nothing scrolls sideways.
func TestReportInBrowser(t *testing.T) {
	bin := browsertest.Chromium(t, "the report's browser test")
	res, out, _ := generate(t)

	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(bin), chromedp.WindowSize(700, 900))
	if os.Geteuid() == 0 {
		opts = append(opts, chromedp.NoSandbox) // Chromium refuses root otherwise; the page is our own file
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc() // stops the browser this test started
	bctx, cancelBrowser := chromedp.NewContext(actx)
	defer cancelBrowser()

	u := url.URL{Scheme: "file", Path: out}
	if err := chromedp.Do(bctx,
		chromedp.EmulateViewport(700, 900),
		chromedp.Navigate(u.String()),
		chromedp.WaitReady("body"),
	); err != nil {
		t.Fatalf("rendering %s in %s: %v", out, bin, err)
	}
	p, err := chromedp.Run(bctx, chromedp.Evaluate[page](measurePage))
	if err != nil {
		t.Fatalf("measuring the rendered report: %v", err)
	}

	want := len(res.accuracy) / len(res.backends) // one plot per traffic and rate algorithm
	for _, b := range []string{"memory", "redis"} {
		if len(res.costNames(b)) > 0 {
			want++
		}
	}
	if len(res.peers) > 0 {
		want++
	}
	if len(res.memory) > 0 {
		want++
	}
	if len(p.Charts) != want || want < 10 {
		t.Errorf("%d charts rendered, want %d", len(p.Charts), want)
	}
	fillOf := map[string]string{}
	nameOf := map[string]string{}
	for _, c := range p.Charts {
		if !c.ViewBox || c.Width < 200 || c.Height < 20 || c.Width > p.InnerWidth {
			t.Errorf("chart %q: viewBox %v, %.0fx%.0f px in a %.0f px window", c.Caption, c.ViewBox, c.Width, c.Height, p.InnerWidth)
		}
		if c.Marks == 0 || c.Drawn != c.Marks {
			t.Errorf("chart %q: %d of %d data marks drawn", c.Caption, c.Drawn, c.Marks)
		}
		for _, f := range c.Fills {
			name, fill := f[0], f[1]
			if old, ok := fillOf[name]; ok && old != fill {
				t.Errorf("%s drawn in %s in chart %q, in %s elsewhere", name, fill, c.Caption, old)
			}
			if other, ok := nameOf[fill]; ok && other != name {
				t.Errorf("%s and %s share the colour %s", name, other, fill)
			}
			fillOf[name], nameOf[fill] = fill, name
		}
	}
	for _, a := range algorithms() {
		if _, ok := fillOf[a.name]; !ok {
			t.Errorf("%s is in no chart", a.name)
		}
	}
	if p.ScrollWidth > p.InnerWidth {
		t.Errorf("the page is %.0f px wide in a %.0f px window: it scrolls sideways", p.ScrollWidth, p.InnerWidth)
	}
}
