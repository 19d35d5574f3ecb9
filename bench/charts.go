package main

import (
	"fmt"
	"html"
	"math"
	"strings"
	"time"
)

// Every chart is an SVG that scales to its container (a viewBox, width
// 100%), inside a figure with its caption, its legend and, where it plots
// one algorithm, that algorithm's configuration. What a chart plots
// carries class "data" and a data-name (the algorithm, "offered"), so a
// test can tell a chart with data from an empty frame, and match every
// mark to its legend.

// fontSize is the charts' text size in viewBox units; the viewBoxes are
// about as wide as the charts are drawn, so it is about the size in pixels.
const fontSize = 15

// legendKey is one entry of a chart's legend: the marks of data-name name
// drawn as kind says ("fill", "pale", "line"), or a reference ("dash",
// "whisker") that marks no data.
type legendKey struct {
	name, label, colour, kind string
}

func seriesKey(name, label string) legendKey { return legendKey{name, label, colour(name), "fill"} }

var (
	offeredKey = legendKey{"offered", "offered", offeredColour, "fill"}
	limitKey   = legendKey{"limit", fmt.Sprintf("the limit, %d", limit), "#222222", "dash"}
	whiskerKey = legendKey{"whisker", "the rounds' range", "#222222", "whisker"}
)

func legend(keys []legendKey) string {
	var b strings.Builder
	b.WriteString(`<div class="legend">`)
	for _, k := range keys {
		sw := fmt.Sprintf(`<span class="swatch %s" style="background:%s"></span>`, k.kind, k.colour)
		switch k.kind {
		case "dash", "whisker", "line":
			sw = fmt.Sprintf(`<span class="swatch %s" style="border-color:%s"></span>`, k.kind, k.colour)
		case "pale":
			sw = fmt.Sprintf(`<span class="swatch pale" style="background:%s;opacity:.45"></span>`, k.colour)
		}
		fmt.Fprintf(&b, `<span class="key" data-name="%s" data-kind="%s">%s%s</span>`, html.EscapeString(k.name), k.kind, sw, html.EscapeString(k.label))
	}
	b.WriteString(`</div>`)
	return b.String()
}

// figure wraps an SVG of w by h units in a figure of class kind: caption,
// legend, the chart, then note (HTML) under it.
func figure(kind, id, caption string, keys []legendKey, note string, w, h int, body, attrs string) string {
	idAttr := ""
	if id != "" {
		idAttr = fmt.Sprintf(` id="%s"`, id)
	}
	if note != "" {
		note = `<p class="config">` + note + `</p>`
	}
	return fmt.Sprintf(`<figure class="chart %s"%s%s><figcaption>%s</figcaption>%s<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="100%%" preserveAspectRatio="xMinYMin meet" font-family="sans-serif" font-size="%d" role="img" aria-label="%s">%s</svg>%s</figure>`,
		kind, idAttr, attrs, html.EscapeString(caption), legend(keys), w, h, fontSize, html.EscapeString(caption), body, note)
}

// configNote is an algorithm's configuration and what it does, under its
// plots.
func configNote(name string) string {
	a, ok := algorithmNamed(name)
	if !ok {
		return ""
	}
	return fmt.Sprintf(`<code>%s</code>: %s`, html.EscapeString(describe(a.cfg)), html.EscapeString(a.note))
}

// --- bars -------------------------------------------------------------------

// bar is one bar of a bar chart, in the colour of name (an algorithm, the
// reference or the peer).
type bar struct {
	name, label, text string
	m                 string // the measurement's key, as its table cells carry it
	value             float64
	lo, hi            float64 // the rounds' range, drawn as a whisker when they differ
	pale              bool    // a second series beside the first (Redis beside memory)
}

// ref is a vertical reference line of a bar chart, at value.
type ref struct {
	value float64
	label string
}

// barChart draws one horizontal bar per entry, scaled to the largest.
func barChart(id, caption string, bars []bar, keys []legendKey, refs []ref) string {
	const w, height, gap = 760, 24, 8
	h := 12 + len(bars)*(height+gap) + 18
	vmax, longest, longestText := 0.0, 0, 0
	for _, b := range bars {
		vmax = math.Max(vmax, math.Max(b.value, b.hi))
		longest = max(longest, len([]rune(b.label)))
		longestText = max(longestText, len([]rune(b.text)))
	}
	right := 14 + longestText*8
	for _, r := range refs {
		vmax = math.Max(vmax, r.value)
	}
	left := 12 + longest*8 // room for the longest label, at about 8 units a character
	x := func(v float64) float64 { return float64(left) + float64(w-left-right)*v/math.Max(vmax, 1e-9) }

	var s strings.Builder
	for i, b := range bars {
		y := 18 + i*(height+gap)
		bw := math.Max(x(b.value)-float64(left), 1)
		opacity := 1.0
		if b.pale {
			opacity = 0.45
		}
		fmt.Fprintf(&s, `<text x="%d" y="%d" text-anchor="end">%s</text><rect class="data" data-name="%s" x="%d" y="%d" width="%.1f" height="%d" fill="%s" fill-opacity="%.2f"/>`,
			left-6, y+height/2+5, html.EscapeString(b.label), html.EscapeString(b.name), left, y, bw, height, colour(b.name), opacity)
		end := float64(left) + bw
		if b.hi > b.lo {
			my := float64(y) + height/2
			fmt.Fprintf(&s, `<path class="whisker" d="M%.1f,%.1fH%.1fM%.1f,%.1fV%.1fM%.1f,%.1fV%.1f" stroke="#222" stroke-width="1.5" fill="none"/>`,
				x(b.lo), my, x(b.hi), x(b.lo), my-6, my+6, x(b.hi), my-6, my+6)
			end = math.Max(end, x(b.hi))
		}
		fmt.Fprintf(&s, `<text x="%.1f" y="%d"%s>%s</text>`, end+6, y+height/2+5, dataM(b.m), html.EscapeString(b.text))
	}
	for _, r := range refs {
		fmt.Fprintf(&s, `<line class="ref" x1="%.1f" x2="%.1f" y1="10" y2="%d" stroke="#222" stroke-dasharray="5 4"/><text x="%.1f" y="%d" text-anchor="middle" font-size="%d">%s</text>`,
			x(r.value), x(r.value), h-18, x(r.value), h-3, fontSize-2, html.EscapeString(r.label))
	}
	return figure("bars", id, caption, keys, "", w, h, s.String(), "")
}

// dataM is the attribute that names a figure's measurement.
func dataM(m string) string {
	if m == "" {
		return ""
	}
	return fmt.Sprintf(` data-m="%s"`, html.EscapeString(m))
}

// barKeys is the legend of bars: each name once, the pale series and the
// whiskers when drawn.
func barKeys(bars []bar, label func(name string) string, pale string) []legendKey {
	var keys []legendKey
	seen := map[string]bool{}
	whiskers, pales := false, false
	for _, b := range bars {
		whiskers = whiskers || b.hi > b.lo
		pales = pales || b.pale
		if !seen[b.name] {
			seen[b.name] = true
			keys = append(keys, seriesKey(b.name, label(b.name)))
		}
	}
	if pales {
		keys = append(keys, legendKey{"pale", pale, "#555555", "pale"})
	}
	if whiskers {
		keys = append(keys, whiskerKey)
	}
	return keys
}

// --- time series --------------------------------------------------------------

// frame is a plot's area in a viewBox of w by h: x in seconds from x0 to
// x1, y from 0 to ymax.
type frame struct {
	w, h                     float64
	left, right, top, bottom float64
	x0, x1, ymax             float64
}

func newFrame(w, h int, x0, x1, ymax float64) frame {
	return frame{w: float64(w), h: float64(h), left: 62, right: 24, top: 12, bottom: 44, x0: x0, x1: x1, ymax: ymax}
}

func (f frame) x(v float64) float64 { return f.left + (f.w-f.left-f.right)*(v-f.x0)/(f.x1-f.x0) }
func (f frame) y(v float64) float64 { return f.top + (f.h-f.top-f.bottom)*(1-v/f.ymax) }

// niceStep is a step of 1, 2 or 5 times a power of ten that cuts span into
// at most n parts.
func niceStep(span float64, n int) float64 {
	raw := span / float64(n)
	p := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= raw {
			return m * p
		}
	}
	return 10 * p
}

// niceMax is v rounded up to a whole step, with room above it.
func niceMax(v float64) float64 {
	v = math.Max(v*1.08, 1)
	step := niceStep(v, 4)
	return math.Ceil(v/step) * step
}

// axes draws the grid, the ticks, the axes' titles and the limit, dashed.
func (f frame) axes(yTitle string, limitAt float64) string {
	var s strings.Builder
	ys := niceStep(f.ymax, 4)
	for v := 0.0; v <= f.ymax+1e-9; v += ys {
		fmt.Fprintf(&s, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#e2e2e2"/><text x="%.1f" y="%.1f" text-anchor="end">%s</text>`,
			f.left, f.w-f.right, f.y(v), f.y(v), f.left-6, f.y(v)+5, fmtCount(v))
	}
	xs := niceStep(f.x1-f.x0, 8)
	for t := math.Ceil(f.x0/xs-1e-9) * xs; t <= f.x1+1e-9; t += xs {
		fmt.Fprintf(&s, `<text x="%.1f" y="%.1f" text-anchor="middle">%ss</text>`, f.x(t), f.h-f.bottom+18, trimFloat(t))
	}
	fmt.Fprintf(&s, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555">time</text>`, (f.left+f.w-f.right)/2, f.h-4)
	fmt.Fprintf(&s, `<text transform="translate(14 %.1f) rotate(-90)" text-anchor="middle" fill="#555">%s</text>`, (f.top+f.h-f.bottom)/2, html.EscapeString(yTitle))
	if limitAt > 0 {
		fmt.Fprintf(&s, `<line class="ref" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#222" stroke-width="1.5" stroke-dasharray="6 4"/>`, f.left, f.w-f.right, f.y(limitAt), f.y(limitAt))
	}
	return s.String()
}

func trimFloat(v float64) string {
	if math.Abs(v) < 1e-9 {
		return "0"
	}
	s := fmt.Sprintf("%.2f", v)
	s = strings.TrimRight(s, "0")
	return strings.TrimSuffix(s, ".")
}

// steps is the outline of vals, one per equal column of the frame's x
// range, as steps; closed down to zero when area.
func (f frame) steps(vals []float64, area bool) string {
	var p strings.Builder
	n := float64(len(vals))
	col := func(i int) float64 { return f.x(f.x0 + (f.x1-f.x0)*float64(i)/n) }
	if area {
		fmt.Fprintf(&p, "M%.1f,%.1f", col(0), f.y(0))
	}
	for i, v := range vals {
		if i == 0 && !area {
			fmt.Fprintf(&p, "M%.1f,%.1f", col(0), f.y(v))
		} else {
			fmt.Fprintf(&p, "V%.1f", f.y(v))
		}
		fmt.Fprintf(&p, "H%.1f", col(i+1))
	}
	if area {
		fmt.Fprintf(&p, "V%.1fZ", f.y(0))
	}
	return p.String()
}

func floats(v []int, scale float64) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x) * scale
	}
	return out
}

func maxOf(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}

// The small multiples' size, and how many columns a window plot has.
const (
	smallW, smallH = 560, 250
	windowCols     = 480
)

// accuracyChart plots what tr offered (grey) and what a admitted (its
// colour) over the run: per bin, as a rate per second, for a "bins"
// traffic; in the last second at every instant for a "window" one. Every
// algorithm's plot of one traffic has the same scale.
func accuracyChart(tr traffic, a accuracy, d time.Duration) string {
	var offered, admitted []float64
	var yTitle string
	switch tr.chart {
	case "bins":
		per := float64(time.Second / bin)
		offered, admitted = floats(binned(tr.arrivals, d), per), floats(binned(a.grants, d), per)
		yTitle = fmt.Sprintf("per second (per %v)", bin)
	default:
		offered = floats(trailing(tr.arrivals, time.Second, 0, d, windowCols), 1)
		admitted = floats(trailing(a.grants, time.Second, 0, d, windowCols), 1)
		yTitle = "in the last 1s"
	}
	f := newFrame(smallW, smallH, 0, d.Seconds(), niceMax(math.Max(maxOf(offered), 2*limit)))
	var s strings.Builder
	s.WriteString(f.axes(yTitle, limit))
	c := colour(a.algorithm)
	fmt.Fprintf(&s, `<path class="data" data-name="offered" d="%s" fill="%s"/>`, f.steps(offered, true), offeredColour)
	fmt.Fprintf(&s, `<path class="data" data-name="%s" d="%s" fill="%s" fill-opacity="0.6" stroke="%s" stroke-width="1.5"/>`, html.EscapeString(a.algorithm), f.steps(admitted, true), c, c)
	// the limit over the data, so the admitted area cannot hide it
	fmt.Fprintf(&s, `<line class="ref" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#222" stroke-width="1.5" stroke-dasharray="6 4"/>`, f.left, f.w-f.right, f.y(limit), f.y(limit))
	caption := fmt.Sprintf("%s: %s of %s admitted; most in any 1s: %d (%s)", a.algorithm, fmtCount(float64(a.admitted)), fmtCount(float64(len(tr.arrivals))), a.maxWindow, fmtRatio(a.maxWindow))
	keys := []legendKey{offeredKey, seriesKey(a.algorithm, "admitted"), limitKey}
	return figure("series", "", caption, keys, configNote(a.algorithm), smallW, smallH, s.String(), fmt.Sprintf(` data-algorithm="%s"`, html.EscapeString(a.algorithm)))
}

// edgeChart puts two algorithms' counts in the last second on one plot
// around the first window edge of tr: the boundary effect, 2x against 1x.
// The figure carries where a test can probe the two lines (probe-x: a
// quarter second after the edge; each line's probe-y and the count there).
func edgeChart(id string, tr traffic, runs []accuracy) string {
	edge := time.Second
	from, to := edge-500*time.Millisecond, edge+1500*time.Millisecond
	const w, h, cols = 900, 330, 800
	offered := floats(trailing(tr.arrivals, time.Second, from, to, cols), 1)
	f := newFrame(w, h, from.Seconds(), to.Seconds(), niceMax(math.Max(maxOf(offered), 2*limit)))
	probe := edge + 250*time.Millisecond
	pc := int(int64(cols) * int64(probe-from) / int64(to-from))
	var s strings.Builder
	s.WriteString(f.axes("in the last 1s", limit))
	fmt.Fprintf(&s, `<path class="data" data-name="offered" d="%s" fill="%s"/>`, f.steps(offered, true), offeredColour)
	fmt.Fprintf(&s, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#555" stroke-dasharray="2 3"/><text x="%.1f" y="%.1f" fill="#555">window edge</text>`,
		f.x(edge.Seconds()), f.x(edge.Seconds()), f.top, f.y(0), f.x(edge.Seconds())+5, f.top+14)
	keys := []legendKey{offeredKey}
	var names []string
	for _, a := range runs {
		vals := floats(trailing(a.grants, time.Second, from, to, cols), 1)
		c := colour(a.algorithm)
		at := vals[pc]
		fmt.Fprintf(&s, `<path class="data line" data-name="%s" data-probe-y="%.1f" data-count="%.0f" d="%s" fill="none" stroke="%s" stroke-width="3"/>`,
			html.EscapeString(a.algorithm), f.y(at), at, f.steps(vals, false), c)
		fmt.Fprintf(&s, `<text x="%.1f" y="%.1f" fill="%s" font-weight="bold">%s: %d (%s)</text>`,
			f.x((edge + 400*time.Millisecond).Seconds()), f.y(at)-8, c, html.EscapeString(a.algorithm), a.maxWindow, fmtRatio(a.maxWindow))
		keys = append(keys, legendKey{a.algorithm, a.algorithm + ", admitted", c, "line"})
		names = append(names, a.algorithm)
	}
	keys = append(keys, limitKey)
	caption := fmt.Sprintf("Across the window edge at %v: %s, admitted in the last 1s", edge, and(names))
	return figure("edge", id, caption, keys, "", w, h, s.String(), fmt.Sprintf(` data-probe-x="%.1f"`, f.x(probe.Seconds())))
}
