package replay

import (
	"fmt"
	"html"
	"io"
	"strings"
)

// WriteSVG draws, for each rule that admitted traffic, the tokens it admitted per second (the
// mean of each point's seconds, at most 600 points) against its limit per second (dashed; "per
// bucket" when the rule keeps a bucket per tenant, model or class, which the sum may exceed).
func (r *Report) WriteSVG(w io.Writer) error {
	const width, panel, left, right, top, gap = 900.0, 220.0, 70.0, 20.0, 30.0, 40.0
	n := len(r.Series)
	height := top + float64(n)*(panel+gap)
	if n == 0 {
		height = top + gap
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%.0f" y="18" font-size="14">admitted tokens per second, %s to %s</text>`+"\n", left,
		r.From.UTC().Format("2006-01-02 15:04:05"), r.To.UTC().Format("15:04:05"))
	if n == 0 {
		b.WriteString(`<text x="70" y="50">no rule admitted any traffic</text>` + "\n")
	}
	for i, s := range r.Series {
		y0 := top + float64(i)*(panel+gap) + 20
		points := downsample(s.Tokens, 600)
		ymax := s.Limit * 1.2
		for _, p := range points {
			ymax = max(ymax, p*1.05)
		}
		if ymax <= 0 {
			ymax = 1
		}
		plotW := width - left - right
		x := func(j int) float64 {
			if len(points) <= 1 {
				return left
			}
			return left + plotW*float64(j)/float64(len(points)-1)
		}
		y := func(v float64) float64 { return y0 + panel - panel*v/ymax }
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" font-weight="bold">%s</text>`+"\n", left, y0-6, html.EscapeString(s.Rule))
		fmt.Fprintf(&b, `<rect x="%.0f" y="%.0f" width="%.0f" height="%.0f" fill="none" stroke="#999"/>`+"\n", left, y0, plotW, panel)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%.0f</text>`+"\n", left-4, y0+10, ymax)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">0</text>`+"\n", left-4, y0+panel)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%ds</text>`+"\n", width-right, y0+panel+14, len(s.Tokens))
		var pts strings.Builder
		for j, v := range points {
			fmt.Fprintf(&pts, "%.1f,%.1f ", x(j), y(v))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="#1f77b4" stroke-width="1.2" points="%s"/>`+"\n", strings.TrimSpace(pts.String()))
		if s.Limit > 0 {
			label := "limit"
			if s.PerBucket {
				label = "limit per bucket"
			}
			fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#d62728" stroke-dasharray="6 4"/>`+"\n",
				left, width-right, y(s.Limit), y(s.Limit))
			fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" fill="#d62728" text-anchor="end">%s %.1f/s</text>`+"\n",
				width-right-4, y(s.Limit)-4, label, s.Limit)
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// downsample averages v into at most n points.
func downsample(v []int64, n int) []float64 {
	if len(v) == 0 {
		return nil
	}
	k := (len(v) + n - 1) / n
	out := make([]float64, 0, (len(v)+k-1)/k)
	for i := 0; i < len(v); i += k {
		var sum int64
		end := min(i+k, len(v))
		for _, x := range v[i:end] {
			sum += x
		}
		out = append(out, float64(sum)/float64(end-i))
	}
	return out
}
