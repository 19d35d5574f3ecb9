package main

import (
	"context"
	"math"
	"net/url"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/limitkit/ratelimit/internal/browsertest"
)

// page is what the browser measured of the rendered report.
type page struct {
	Charts []struct {
		Caption, Kind, ID, Algorithm, Config, Section string
		Width, Height                                 float64
		ViewBox                                       bool
		Marks, Drawn                                  int
		Fills                                         [][2]string // data-name, computed colour
		Keys                                          [][4]string // data-name, kind, background, border colour
		TextHeight                                    float64     // the first label's rendered height, px
	}
	Edge struct {
		ViewHeight float64
		Lines      []struct {
			Name   string
			Count  float64
			Y      float64
			Own    bool   // the line passes through its own probe point
			Others []bool // and through the others'
		}
	}
	Sections []struct{ ID, Text string }
	Figures  [][2]string // data-m, text, of every measured figure shown
	Measured string
	Choices  int

	ScrollWidth, InnerWidth float64
}

const measurePage = `(() => {
  const colourOf = el => { const cs = getComputedStyle(el); return cs.fill && cs.fill !== 'none' ? cs.fill : cs.stroke; };
  const charts = [...document.querySelectorAll('figure.chart')].map(f => {
    const svg = f.querySelector('svg');
    const box = svg ? svg.getBoundingClientRect() : {width: 0, height: 0};
    const marks = svg ? [...svg.querySelectorAll('.data')] : [];
    const drawn = marks.filter(m => { const b = m.getBBox(); return b.width > 0 && b.height > 0; });
    const keys = [...f.querySelectorAll('.legend .key')].map(k => {
      const cs = getComputedStyle(k.querySelector('.swatch'));
      return [k.dataset.name || '', k.dataset.kind || '', cs.backgroundColor, cs.borderTopColor];
    });
    const label = svg && svg.querySelector('text');
    return {
      Caption: (f.querySelector('figcaption') || {}).textContent || '',
      Kind: f.classList[1] || '', ID: f.id, Algorithm: f.dataset.algorithm || '',
      Config: (f.querySelector('p.config') || {}).textContent || '',
      Section: (f.closest('section') || {}).id || '',
      Width: box.width, Height: box.height,
      ViewBox: !!(svg && svg.getAttribute('viewBox')),
      Marks: marks.length, Drawn: drawn.length,
      Fills: drawn.map(m => [m.dataset.name || '', colourOf(m)]),
      Keys: keys,
      TextHeight: label ? label.getBoundingClientRect().height : 0,
    };
  });
  const edge = {ViewHeight: 0, Lines: []};
  const ef = document.querySelector('figure.edge');
  if (ef) {
    // Where each line's probe point is drawn on the screen, and which
    // lines the browser finds there.
    ef.scrollIntoView({block: 'center'});
    const svg = ef.querySelector('svg');
    const x = parseFloat(ef.dataset.probeX);
    const lines = [...ef.querySelectorAll('path.line')];
    const hits = y => { const p = new DOMPoint(x, y).matrixTransform(svg.getScreenCTM()); return document.elementsFromPoint(p.x, p.y); };
    edge.ViewHeight = svg.viewBox.baseVal.height;
    edge.Lines = lines.map(l => ({
      Name: l.dataset.name, Count: parseFloat(l.dataset.count), Y: parseFloat(l.dataset.probeY),
      Own: hits(parseFloat(l.dataset.probeY)).includes(l),
      Others: lines.filter(o => o !== l).map(o => hits(parseFloat(o.dataset.probeY)).includes(l)),
    }));
  }
  return {
    Charts: charts, Edge: edge,
    Sections: [...document.querySelectorAll('section')].map(s => ({ID: s.id, Text: s.textContent})),
    Figures: [...document.querySelectorAll('[data-m]')].map(e => [e.dataset.m, e.textContent]),
    Measured: (document.querySelector('p.measured') || {}).textContent || '',
    Choices: document.querySelectorAll('table.choose tr[data-need]').length,
    ScrollWidth: document.documentElement.scrollWidth, InnerWidth: window.innerWidth,
  };
})()`

// firstScreen is how far down the page, in CSS pixels, the first screen's
// table ends.
const firstScreen = `(() => { const t = document.querySelector('#choose'); return t ? t.getBoundingClientRect().bottom + window.scrollY : -1; })()`

// TestReportInBrowser renders the generated report in headless Chromium,
// 700 pixels wide, and checks what a reader relies on: every chart the
// run's figures call for is there with its data drawn, its labels readable
// and a legend naming each of its series in the series' colour; an
// algorithm has one colour in every chart and no two share one; every
// scenario states what it offered, and every plot the configuration it
// ran; the boundary's edge plot shows the fixed window's 2x and the
// sliding log's 1x as two different lines; a measurement shown twice shows
// one figure; the machine, Go, Redis and the date are on the page; the
// first screen holds the choices, 1280 by 1000 pixels; nothing scrolls
// sideways.
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
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(1280, 1000)); err != nil {
		t.Fatal(err)
	}
	bottom, err := chromedp.Run(bctx, chromedp.Evaluate[float64](firstScreen))
	if err != nil {
		t.Fatal(err)
	}

	rate := 0
	for _, a := range algorithms() {
		if a.rate {
			rate++
		}
	}
	want := len(res.traffics)*rate + 1 // a plot per traffic and rate algorithm, the boundary's edge
	want += 2                          // scale-out, memory per key
	if len(res.costNames("memory")) > 0 {
		want++
	}
	if len(res.costNames("redis")) > 0 {
		want += 2 // the Redis costs, beside redis_rate
	}
	if len(p.Charts) != want || want < 10 {
		t.Errorf("%d charts rendered, want %d", len(p.Charts), want)
	}
	fillOf := map[string]string{}
	nameOf := map[string]string{}
	for _, c := range p.Charts {
		if !c.ViewBox || c.Width < 300 || c.Height < 100 || c.Width > p.InnerWidth {
			t.Errorf("chart %q: viewBox %v, %.0fx%.0f px in a %.0f px window", c.Caption, c.ViewBox, c.Width, c.Height, p.InnerWidth)
		}
		if c.TextHeight < 11 {
			t.Errorf("chart %q: its labels are %.1f px high, want 11 or more", c.Caption, c.TextHeight)
		}
		if c.Marks == 0 || c.Drawn != c.Marks {
			t.Errorf("chart %q: %d of %d data marks drawn", c.Caption, c.Drawn, c.Marks)
		}
		keyColour := map[string]string{}
		for _, k := range c.Keys {
			name, kind, background, border := k[0], k[1], k[2], k[3]
			switch kind {
			case "fill":
				keyColour[name] = background
			case "line":
				keyColour[name] = border
			}
		}
		if len(c.Keys) == 0 {
			t.Errorf("chart %q has no legend", c.Caption)
		}
		for _, f := range c.Fills {
			name, fill := f[0], f[1]
			if k, ok := keyColour[name]; !ok || k != fill {
				t.Errorf("chart %q: %s drawn in %s, its legend shows %q", c.Caption, name, fill, k)
			}
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

	// Every scenario says what it offered, and every plot the
	// configuration its algorithm ran.
	text := map[string]string{}
	for _, s := range p.Sections {
		text[s.ID] = s.Text
	}
	for _, tr := range res.traffics {
		id := "accuracy-" + tr.name
		if !strings.Contains(text[id], "Offered: "+tr.offered) {
			t.Errorf("%s does not say what it offered (%q)", id, tr.offered)
		}
		plots := 0
		for _, c := range p.Charts {
			if c.Section != id || c.Kind != "series" {
				continue
			}
			plots++
			if cfg := configOf(c.Algorithm); cfg == "" || !strings.Contains(c.Config, cfg) {
				t.Errorf("%s: the plot of %q says %q, not its configuration %q", id, c.Algorithm, c.Config, cfg)
			}
		}
		if plots != rate {
			t.Errorf("%s: %d plots, want one per rate algorithm (%d)", id, plots, rate)
		}
	}

	// The boundary's edge plot: two lines, each through its own count a
	// moment after the edge and not through the other's, which differ by a
	// fifth of the plot's height at least; the counts are the runs'.
	if len(p.Edge.Lines) != 2 {
		t.Fatalf("the boundary's edge plot has %d lines, want 2", len(p.Edge.Lines))
	}
	for _, l := range p.Edge.Lines {
		run, ok := res.run("boundary", l.Name)
		if !ok || l.Count != float64(run.maxWindow) {
			t.Errorf("edge plot: %s at %.0f after the edge, its run admitted at most %d within 1s", l.Name, l.Count, run.maxWindow)
		}
		if !l.Own || len(l.Others) != 1 || l.Others[0] {
			t.Errorf("edge plot: %s's line through its own point %v, through the other's %v", l.Name, l.Own, l.Others)
		}
	}
	a, b := p.Edge.Lines[0], p.Edge.Lines[1]
	if math.Abs(a.Y-b.Y) < p.Edge.ViewHeight/5 {
		t.Errorf("edge plot: %s at y %.0f and %s at y %.0f of %.0f: not visibly apart", a.Name, a.Y, b.Name, b.Y, p.Edge.ViewHeight)
	}
	if a.Name != "fixedwindow" || b.Name != "slidinglog" || a.Count != 2*limit || b.Count != limit {
		t.Errorf("edge plot: %s at %.0f and %s at %.0f, want the fixed window at twice the limit and the sliding log at the limit", a.Name, a.Count, b.Name, b.Count)
	}

	// One measurement, one figure: wherever a measurement is shown, it
	// reads the same; the one-key token bucket on Redis is shown twice.
	shown := map[string]string{}
	times := map[string]int{}
	for _, f := range p.Figures {
		if old, ok := shown[f[0]]; ok && old != f[1] {
			t.Errorf("%s shown as %q and as %q", f[0], old, f[1])
		}
		shown[f[0]] = f[1]
		times[f[0]]++
	}
	if ours, _, ok := res.peerPair(1); ok {
		if k := costKey(ours, "rate"); times[k] < 3 { // the Redis costs' table and chart, beside redis_rate
			t.Errorf("%s shown %d times, want in the Redis costs and beside redis_rate", k, times[k])
		}
	}

	for _, w := range []string{strings.TrimPrefix(runtime.Version(), "go"), res.env.redis, res.started.UTC().Format("2 January 2006"), res.env.goarch} {
		if !strings.Contains(p.Measured, w) {
			t.Errorf("the page's first line %q lacks %q", p.Measured, w)
		}
	}
	if p.Choices != len(res.choices()) || p.Choices < 5 {
		t.Errorf("the first screen has %d choices, want %d", p.Choices, len(res.choices()))
	}
	if bottom <= 0 || bottom > 1000 {
		t.Errorf("the first screen's choices end %.0f px down a 1280x1000 window", bottom)
	}
	if p.ScrollWidth > p.InnerWidth {
		t.Errorf("the page is %.0f px wide in a %.0f px window: it scrolls sideways", p.ScrollWidth, p.InnerWidth)
	}
}
