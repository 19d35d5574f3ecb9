package main

import (
	"fmt"
	"html"
	"io"
	"strings"
)

func writeMarkdown(w io.Writer, r *results) {
	fmt.Fprintf(w, "# limitkit: which rate limiting algorithm?\n\n%s", r.measured())
	if len(r.notes) > 0 {
		fmt.Fprintf(w, " %s.", strings.Join(r.notes, ". "))
	}
	fmt.Fprintln(w)
	if cs := r.choices(); len(cs) > 0 {
		fmt.Fprintf(w, "\n## Which one for me\n\n| need | choose | what this run measured | configuration |\n| --- | --- | --- | --- |\n")
		for _, c := range cs {
			fmt.Fprintf(w, "| %s | %s | %s (see %s) | %s |\n", c.need, c.pick, c.why, c.fig, strings.ReplaceAll(c.config, "\n", "; "))
		}
		fmt.Fprintf(w, "\n%s\n", rankingRule)
	}
	for _, s := range r.sections() {
		fmt.Fprintf(w, "\n## %s\n", s.title)
		for _, p := range s.paras {
			if p != "" {
				fmt.Fprintf(w, "\n%s\n", p)
			}
		}
		if len(s.table.head) > 0 {
			fmt.Fprintf(w, "\n| %s |\n|%s\n", strings.Join(s.table.head, " | "), strings.Repeat(" --- |", len(s.table.head)))
			for _, row := range s.table.rows {
				var ts []string
				for _, c := range row {
					ts = append(ts, c.text)
				}
				fmt.Fprintf(w, "| %s |\n", strings.Join(ts, " | "))
			}
		}
		for _, p := range s.after {
			fmt.Fprintf(w, "\n%s\n", p)
		}
	}
}

// rankingRule is how the report ranks, said under the first screen.
const rankingRule = "How these were chosen: the decisions were made on a fake clock, so they are the same on every run, and so are the bytes per key (measured in rounds to show it). Costs are measured in rounds, the cases taking turns; one ranks above another only when every round of it did, and the report says \"no measurable difference\" otherwise."

// --- HTML -----------------------------------------------------------------------

const style = `
body{font:16px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1200px;margin:1.2em auto;color:#1d1d1d;padding:0 1em}
h1{font-size:1.7em;margin:.1em 0 .2em}h2{margin:1.6em 0 .4em;font-size:1.35em;border-bottom:1px solid #ddd;padding-bottom:.15em}
p.measured{margin:.2em 0 .8em;color:#333}
table{border-collapse:collapse;margin:.8em 0;font-size:14px}
td,th{border:1px solid #ccc;padding:4px 7px;text-align:right;vertical-align:top}
th{background:#f3f3f3;font-weight:600;text-align:left}
td:first-child{text-align:left;white-space:nowrap}
td.text{text-align:left}
.wide{overflow-x:auto;max-width:100%}
table.choose{font-size:15px;width:100%}table.choose td{text-align:left}table.choose td.need{font-weight:600;white-space:normal;width:14%}
table.choose td.pick{font-weight:600;width:17%;white-space:normal}table.choose td.cfg{width:22%}
table.choose td.cfg code{font-size:13px;display:block;overflow-wrap:anywhere}
p.rule{font-size:14px;color:#444}
figure{margin:1em 0}figcaption{font-weight:600;font-size:15px;margin-bottom:.2em}
svg{display:block;width:100%;height:auto}figure.bars{max-width:900px}figure.edge{max-width:1000px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(480px,1fr));gap:.4em 22px}
.legend{font-size:14px;margin:.1em 0 .3em}.key{white-space:nowrap;margin-right:1em;display:inline-block}
.swatch{display:inline-block;width:1em;height:1em;vertical-align:-.15em;margin-right:.3em;border-radius:2px}
.swatch.dash{height:0;border-top:2px dashed;border-radius:0;vertical-align:.25em;width:1.6em}
.swatch.line{height:0;border-top:3px solid;border-radius:0;vertical-align:.25em;width:1.6em}
.swatch.whisker{height:.7em;width:1.2em;border:1.5px solid;border-top:0;border-bottom:0;background:linear-gradient(#222,#222) center/100% 1.5px no-repeat}
p.config{font-size:14px;margin:.2em 0 0;color:#333}p.config code{font-size:13px}
.failed{color:#b00}
`

func writeHTML(w io.Writer, r *results) error {
	var b strings.Builder
	b.WriteString(`<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1"><title>limitkit: which rate limiting algorithm?</title><style>` + style + `</style></head><body>`)
	fmt.Fprintf(&b, `<h1>limitkit: which rate limiting algorithm?</h1><p class="measured">%s`, html.EscapeString(r.measured()))
	if len(r.notes) > 0 {
		fmt.Fprintf(&b, " %s.", html.EscapeString(strings.Join(r.notes, ". ")))
	}
	b.WriteString("</p>")
	if len(r.failures) > 0 {
		fmt.Fprintf(&b, `<p class="failed">%d step(s) failed; see Failed steps at the end. Everything else was measured.</p>`, len(r.failures))
	}
	titles := map[string]string{}
	for _, s := range r.sections() {
		titles[s.id] = s.title
	}
	if cs := r.choices(); len(cs) > 0 {
		b.WriteString(`<section id="choose"><div class="wide"><table class="choose"><tr><th>If you need</th><th>Choose</th><th>Because this run measured</th><th>Configuration used</th></tr>`)
		for _, c := range cs {
			var sw strings.Builder
			for _, n := range c.names {
				fmt.Fprintf(&sw, `<span class="swatch" style="background:%s"></span>`, colour(n))
			}
			var cfg strings.Builder
			for _, line := range strings.Split(c.config, "\n") {
				fmt.Fprintf(&cfg, "<code>%s</code>", html.EscapeString(line))
			}
			see := ""
			if t, ok := titles[c.fig]; ok {
				see = fmt.Sprintf(` <a href="#%s">See %s.</a>`, c.fig, html.EscapeString(t))
			}
			fmt.Fprintf(&b, `<tr data-need="%s"><td class="need">%s</td><td class="pick">%s%s</td><td class="why">%s%s</td><td class="cfg">%s</td></tr>`,
				html.EscapeString(c.need), html.EscapeString(c.need), sw.String(), html.EscapeString(c.pick), html.EscapeString(c.why), see, cfg.String())
		}
		fmt.Fprintf(&b, `</table></div><p class="rule">%s</p></section>`, html.EscapeString(rankingRule))
	}
	b.WriteString(`<p class="legend">Colours, the same in every chart:`)
	for _, n := range colourOrder(r) {
		fmt.Fprintf(&b, ` <span class="key"><span class="swatch" style="background:%s"></span>%s</span>`, colour(n), html.EscapeString(n))
	}
	fmt.Fprintf(&b, ` <span class="key"><span class="swatch" style="background:%s"></span>offered</span></p>`, offeredColour)
	for _, s := range r.sections() {
		fmt.Fprintf(&b, `<section id="%s"><h2>%s</h2>`, s.id, html.EscapeString(s.title))
		for _, p := range s.paras {
			if p != "" {
				fmt.Fprintf(&b, `<p class="about">%s</p>`, html.EscapeString(p))
			}
		}
		var small []string
		for _, c := range s.charts {
			if strings.HasPrefix(c, `<figure class="chart series"`) {
				small = append(small, c)
			} else {
				b.WriteString(c)
			}
		}
		if len(small) > 0 {
			b.WriteString(`<div class="grid">` + strings.Join(small, "") + `</div>`)
		}
		if len(s.table.head) > 0 {
			fmt.Fprintf(&b, `<div class="wide"><table><tr><th>%s</th></tr>`, strings.Join(escape(s.table.head), "</th><th>"))
			for _, row := range s.table.rows {
				b.WriteString("<tr>")
				for _, c := range row {
					class := ""
					if len(c.text) > 40 {
						class = ` class="text"`
					}
					fmt.Fprintf(&b, "<td%s%s>%s</td>", class, dataM(c.m), html.EscapeString(c.text))
				}
				b.WriteString("</tr>")
			}
			b.WriteString("</table></div>")
		}
		for _, p := range s.after {
			fmt.Fprintf(&b, `<p class="about">%s</p>`, html.EscapeString(p))
		}
		b.WriteString("</section>")
	}
	b.WriteString("</body></html>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// colourOrder is every name the report colours, in a fixed order.
func colourOrder(r *results) []string {
	var names []string
	if len(r.costNames("memory")) > 0 {
		names = append(names, xrateName)
	}
	for _, a := range algorithms() {
		names = append(names, a.name)
	}
	if _, ok := r.costAt(peerName, "redis", peerGoroutines, 1); ok {
		names = append(names, peerName)
	}
	return names
}

func escape(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = html.EscapeString(s)
	}
	return out
}
