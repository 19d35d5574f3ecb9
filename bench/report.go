package main

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"time"
)

func fmtDur(d time.Duration) string {
	if d == 0 {
		return "-"
	}
	if d < time.Microsecond {
		return fmt.Sprintf("%dns", d.Nanoseconds())
	}
	if d < time.Millisecond {
		return fmt.Sprintf("%.0fµs", float64(d)/1e3)
	}
	return fmt.Sprintf("%.2fms", float64(d)/1e6)
}

// table is a header and rows, rendered as markdown or HTML.
type table struct {
	title, about string
	head         []string
	rows         [][]string
}

func (r *results) tables() []table {
	var ts []table
	if len(r.costs) > 0 {
		t := table{title: "Cost per decision", about: "Acquire (plus Release) on the grant path. In memory ns/decision is wall time per call across all goroutines; on Redis decisions/s and latency percentiles tell more.",
			head: []string{"algorithm", "backend", "goroutines", "ns/decision", "allocs", "decisions/s", "p50", "p99"}}
		for _, c := range r.costs {
			t.rows = append(t.rows, []string{c.algorithm, c.backend, fmt.Sprint(c.goroutines), fmt.Sprintf("%.0f", c.nsPerOp),
				fmt.Sprintf("%.1f", math.Max(c.allocsPerOp, 0)), fmt.Sprintf("%.0f", c.perSecond), fmtDur(c.p50), fmtDur(c.p99)})
		}
		ts = append(ts, t)
	}
	for _, tr := range r.traffics {
		t := table{title: "Accuracy: " + tr.name, about: fmt.Sprintf("%s, %d requests over %v of simulated time, limit %d per second. Max window: the most admitted in any 1s sliding window, as a ratio of the limit. CV: coefficient of variation of admitted per 100ms (lower is smoother).", tr.about, len(tr.arrivals), r.duration, limit),
			head: []string{"algorithm", "backend", "admitted", "max window / limit", "CV per 100ms"}}
		for _, a := range r.accuracy {
			if a.traffic == tr.name {
				t.rows = append(t.rows, []string{a.algorithm, a.backend, fmt.Sprint(a.admitted), fmt.Sprintf("%.2f", a.maxWindow), fmt.Sprintf("%.2f", a.cv)})
			}
		}
		ts = append(ts, t)
	}
	if len(r.scaleOuts) > 0 {
		t := table{title: "Scale-out: three replicas", about: fmt.Sprintf("Each of three replicas is offered 2x the limit of %d/s. In memory each has its own limiter; on Redis they share one key.", limit),
			head: append([]string{"algorithm"}, r.backends...)}
		byAlg := map[string][]string{}
		var order []string
		for _, s := range r.scaleOuts {
			if _, ok := byAlg[s.algorithm]; !ok {
				order = append(order, s.algorithm)
			}
			byAlg[s.algorithm] = append(byAlg[s.algorithm], fmt.Sprintf("%.0f/s", s.perSecond))
		}
		for _, a := range order {
			t.rows = append(t.rows, append([]string{a}, byAlg[a]...))
		}
		ts = append(ts, t)
	}
	if len(r.memory) > 0 {
		t := table{title: "Memory per key", about: "memory: heap per limiter after one grant (100,000 limiters of one memory.NewFactory). redis: growth of used_memory per key (100,000 keys of 17 bytes plus the algorithm's suffix), one grant each.",
			head: []string{"algorithm", "backend", "bytes per key"}}
		for _, m := range r.memory {
			t.rows = append(t.rows, []string{m.algorithm, m.backend, fmt.Sprintf("%.0f", m.bytesPerKey)})
		}
		ts = append(ts, t)
	}
	return ts
}

func writeMarkdown(w io.Writer, r *results) {
	fmt.Fprintf(w, "# limitkit algorithm comparison\n\nBackends: %s. %s\n", strings.Join(r.backends, ", "), strings.Join(r.notes, "; "))
	for _, t := range r.tables() {
		fmt.Fprintf(w, "\n## %s\n\n%s\n\n| %s |\n|%s\n", t.title, t.about, strings.Join(t.head, " | "), strings.Repeat(" --- |", len(t.head)))
		for _, row := range t.rows {
			fmt.Fprintf(w, "| %s |\n", strings.Join(row, " | "))
		}
	}
}

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b"}

type series struct {
	name   string
	values []float64
}

// lineChart plots series over time (x in seconds, one value per step) with
// a dashed reference line at ref.
func lineChart(title string, ss []series, step, ref float64, refLabel, yLabel string, w, h int) string {
	const left, top, bottom = 60, 30, 40
	right := 190
	if len(ss) == 1 {
		right = 20
	}
	n, ymax := 0, ref*1.2
	for _, s := range ss {
		n = max(n, len(s.values))
		for _, v := range s.values {
			ymax = math.Max(ymax, v)
		}
	}
	ymax = math.Ceil(ymax/5) * 5
	pw, ph := float64(w-left-right), float64(h-top-bottom)
	x := func(i int) float64 { return left + pw*float64(i)/float64(max(n-1, 1)) }
	y := func(v float64) float64 { return top + ph*(1-v/ymax) }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="sans-serif" font-size="12">`, w, h, w, h)
	fmt.Fprintf(&b, `<text x="%d" y="18" font-size="14" font-weight="bold">%s</text>`, left, html.EscapeString(title))
	for i := 0; i <= 5; i++ { // y grid
		v := ymax * float64(i) / 5
		fmt.Fprintf(&b, `<line x1="%d" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%.0f</text>`,
			left, left+pw, y(v), y(v), left-6, y(v)+4, v)
	}
	secs := float64(n) * step
	for s := 0.0; s <= secs+1e-9; s++ { // x ticks each second
		xs := left + pw*s/math.Max(secs-step, step)
		if xs > left+pw+1 {
			break
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%.0fs</text>`, xs, h-bottom+16, s)
	}
	fmt.Fprintf(&b, `<text x="%.0f" y="%d" text-anchor="middle">time</text>`, left+pw/2, h-6)
	fmt.Fprintf(&b, `<text transform="translate(14 %.0f) rotate(-90)" text-anchor="middle">%s</text>`, top+ph/2, html.EscapeString(yLabel))
	fmt.Fprintf(&b, `<line x1="%d" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#444" stroke-dasharray="6 4"/>`, left, left+pw, y(ref), y(ref))
	for i, s := range ss {
		var pts []string
		for j, v := range s.values {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(j), y(v)))
		}
		c := palette[i%len(palette)]
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="1.6" points="%s"/>`, c, strings.Join(pts, " "))
		if len(ss) > 1 {
			ly := top + 14 + 18*i
			fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%d" y2="%d" stroke="%s" stroke-width="3"/><text x="%.0f" y="%d">%s</text>`,
				left+pw+12, left+pw+32, ly, ly, c, left+pw+38, ly+4, html.EscapeString(s.name))
		}
	}
	if len(ss) > 1 {
		ly := top + 14 + 18*len(ss)
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%d" y2="%d" stroke="#444" stroke-dasharray="6 4"/><text x="%.0f" y="%d">%s</text>`,
			left+pw+12, left+pw+32, ly, ly, left+pw+38, ly+4, html.EscapeString(refLabel))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

// barChart draws one horizontal bar per label.
func barChart(title, unit string, labels []string, values []float64) string {
	const w, left, right, bar = 960, 250, 110, 22
	h := 40 + len(labels)*(bar+6)
	vmax := 0.0
	for _, v := range values {
		vmax = math.Max(vmax, v)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="sans-serif" font-size="12">`, w, h, w, h)
	fmt.Fprintf(&b, `<text x="10" y="18" font-size="14" font-weight="bold">%s</text>`, html.EscapeString(title))
	for i, l := range labels {
		y := 32 + i*(bar+6)
		bw := float64(w-left-right) * values[i] / math.Max(vmax, 1e-9)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text><rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/><text x="%.1f" y="%d">%s</text>`,
			left-8, y+bar/2+4, html.EscapeString(l), left, y, bw, bar, palette[i%len(palette)], float64(left)+bw+6, y+bar/2+4, fmt.Sprintf("%.0f %s", values[i], unit))
	}
	b.WriteString(`</svg>`)
	return b.String()
}

func writeHTML(w io.Writer, r *results) error {
	var b strings.Builder
	b.WriteString(`<!doctype html><html><head><meta charset="utf-8"><title>limitkit algorithm comparison</title><style>
body{font-family:sans-serif;max-width:1000px;margin:2em auto;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:1em 0;font-size:14px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
td:first-child,th:first-child,td:nth-child(2){text-align:left}th{background:#f3f3f3}p.about{color:#555}svg{margin:1em 0;display:block}
.grid{display:grid;grid-template-columns:1fr 1fr;gap:0 10px}.grid svg{margin:0.3em 0}
</style></head><body>`)
	fmt.Fprintf(&b, "<h1>limitkit algorithm comparison</h1><p>Run %s. Backends: %s. %s</p>",
		r.started.Format(time.RFC3339), strings.Join(r.backends, ", "), html.EscapeString(strings.Join(r.notes, "; ")))
	tables := r.tables()
	for _, t := range tables {
		fmt.Fprintf(&b, "<h2>%s</h2><p class=about>%s</p>", html.EscapeString(t.title), html.EscapeString(t.about))
		if t.title == "Cost per decision" {
			var labels []string
			var vals []float64
			var rl []string
			var rv []float64
			for _, c := range r.costs {
				switch {
				case c.backend == "memory" && c.goroutines == 1:
					labels, vals = append(labels, c.algorithm), append(vals, c.nsPerOp)
				case c.backend == "redis" && c.goroutines == 64:
					rl, rv = append(rl, c.algorithm), append(rv, c.perSecond)
				}
			}
			b.WriteString(barChart("In memory, 1 goroutine: ns per decision (shorter is better)", "ns", labels, vals))
			if len(rl) > 0 {
				b.WriteString(barChart("Real Redis, 64 goroutines: decisions per second (longer is better)", "/s", rl, rv))
			}
		}
		if strings.HasPrefix(t.title, "Accuracy: ") {
			name := strings.TrimPrefix(t.title, "Accuracy: ")
			fmt.Fprintf(&b, "<p>Admitted per 100ms, one plot per algorithm (memory backend; Redis decides the same). Dashed: the limit's share of 100ms (%d).</p><div class=grid>", limit/10)
			for i, a := range r.accuracy {
				if a.traffic == name && a.backend == "memory" {
					vals := make([]float64, len(a.bins))
					for j, v := range a.bins {
						vals[j] = float64(v)
					}
					s := lineChart(fmt.Sprintf("%s (max window %.2fx)", a.algorithm, a.maxWindow), []series{{a.algorithm, vals}}, 0.1, limit/10, "", "per 100ms", 470, 190)
					b.WriteString(strings.Replace(s, palette[0], palette[i%len(palette)], 1))
				}
			}
			b.WriteString("</div>")
		}
		fmt.Fprintf(&b, "<table><tr><th>%s</th></tr>", strings.Join(escape(t.head), "</th><th>"))
		for _, row := range t.rows {
			fmt.Fprintf(&b, "<tr><td>%s</td></tr>", strings.Join(escape(row), "</td><td>"))
		}
		b.WriteString("</table>")
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func escape(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = html.EscapeString(s)
	}
	return out
}
