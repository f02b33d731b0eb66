//! Small hand-written SVG line charts for reports (load test, demo, simulator).
//!
//! Owns: turning series of `(x, y)` points into a self-contained SVG: axes with "nice" ticks,
//! axis labels, a legend, vertical markers (events such as a saturation point or a scale-out),
//! horizontal reference lines (thresholds, SLOs), and an optional second y-axis on the right.
//! Several charts can be stacked into one SVG. Does not own: what is plotted or where the file
//! goes. Pure: no I/O apart from [`Chart::write`].
//!
//! ```
//! use vllm_keda_tools::plot::{Axis, Chart, Series};
//! let svg = Chart::new("queue vs load")
//!     .x_label("offered req/s")
//!     .y_label("queue depth")
//!     .y2_label("P95 e2e (s)")
//!     .series(Series::new("queue", vec![(10.0, 0.0), (20.0, 0.5), (30.0, 9.0)]))
//!     .series(Series::new("P95", vec![(10.0, 1.0), (20.0, 1.1), (30.0, 4.0)]).axis(Axis::Right))
//!     .marker(30.0, "saturation")
//!     .to_svg();
//! assert!(svg.starts_with("<svg"));
//! ```

mod scale;

use std::fmt::Write as _;
use std::path::Path;

use scale::{Range, fmt, runs, span, tick_label};
pub use scale::{escape, nice_ticks};

/// Which y-axis a series or reference line is drawn against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Axis {
    /// The left axis.
    #[default]
    Left,
    /// The right (second) axis.
    Right,
}

/// One line.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Legend text.
    pub name: String,
    /// Points in drawing order; non-finite points break the line.
    pub points: Vec<(f64, f64)>,
    /// The y-axis it uses.
    pub axis: Axis,
    /// CSS colour; a palette colour when `None`.
    pub color: Option<String>,
    /// Dashed line.
    pub dashed: bool,
    /// Step line (holds each value until the next x), for gauges such as replica counts.
    pub step: bool,
    /// Draw a dot at each point.
    pub dots: bool,
}

impl Series {
    /// A solid line on the left axis.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points,
            axis: Axis::Left,
            color: None,
            dashed: false,
            step: false,
            dots: false,
        }
    }
    /// Uses `axis`.
    pub fn axis(mut self, axis: Axis) -> Self {
        self.axis = axis;
        self
    }
    /// Uses this CSS colour.
    pub fn color(mut self, color: impl Into<String>) -> Self {
        self.color = Some(color.into());
        self
    }
    /// Draws dashed.
    pub fn dashed(mut self) -> Self {
        self.dashed = true;
        self
    }
    /// Draws as a step line.
    pub fn step(mut self) -> Self {
        self.step = true;
        self
    }
    /// Draws a dot at each point.
    pub fn dots(mut self) -> Self {
        self.dots = true;
        self
    }
}

/// A vertical line at `x` with a label.
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    /// Position on the x-axis.
    pub x: f64,
    /// Label drawn at the top.
    pub label: String,
    /// CSS colour.
    pub color: String,
}

/// A horizontal reference line at `y` on one axis.
#[derive(Debug, Clone, PartialEq)]
pub struct RefLine {
    /// Position on the axis.
    pub y: f64,
    /// Which axis.
    pub axis: Axis,
    /// Label drawn at the right end.
    pub label: String,
    /// CSS colour.
    pub color: String,
}

/// A line chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Title above the plot.
    pub title: String,
    /// X-axis label.
    pub x_label: String,
    /// Left y-axis label.
    pub y_label: String,
    /// Right y-axis label (the right axis is drawn when a series or line uses it).
    pub y2_label: String,
    /// Lines.
    pub series: Vec<Series>,
    /// Vertical markers.
    pub markers: Vec<Marker>,
    /// Horizontal reference lines.
    pub ref_lines: Vec<RefLine>,
    /// Width in pixels.
    pub width: f64,
    /// Height in pixels.
    pub height: f64,
    /// Start the y-axes at zero (default) rather than at the smallest value.
    pub y_from_zero: bool,
}

const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf",
];
const LEFT: f64 = 70.0;
const RIGHT: f64 = 70.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 50.0;
const LEGEND_ROW: f64 = 18.0;
const LEGEND_ITEM: f64 = 200.0;

impl Chart {
    /// An empty 800x400 chart.
    pub fn new(title: impl Into<String>) -> Self {
        Self {
            title: title.into(),
            x_label: String::new(),
            y_label: String::new(),
            y2_label: String::new(),
            series: Vec::new(),
            markers: Vec::new(),
            ref_lines: Vec::new(),
            width: 800.0,
            height: 400.0,
            y_from_zero: true,
        }
    }
    /// Sets the x-axis label.
    pub fn x_label(mut self, label: impl Into<String>) -> Self {
        self.x_label = label.into();
        self
    }
    /// Sets the left y-axis label.
    pub fn y_label(mut self, label: impl Into<String>) -> Self {
        self.y_label = label.into();
        self
    }
    /// Sets the right y-axis label.
    pub fn y2_label(mut self, label: impl Into<String>) -> Self {
        self.y2_label = label.into();
        self
    }
    /// Sets the size in pixels.
    pub fn size(mut self, width: f64, height: f64) -> Self {
        self.width = width.max(200.0);
        self.height = height.max(150.0);
        self
    }
    /// Adds a line.
    pub fn series(mut self, series: Series) -> Self {
        self.series.push(series);
        self
    }
    /// Adds a vertical marker.
    pub fn marker(mut self, x: f64, label: impl Into<String>) -> Self {
        self.markers.push(Marker {
            x,
            label: label.into(),
            color: "#555".into(),
        });
        self
    }
    /// Adds a vertical marker in a colour.
    pub fn marker_colored(
        mut self,
        x: f64,
        label: impl Into<String>,
        color: impl Into<String>,
    ) -> Self {
        self.markers.push(Marker {
            x,
            label: label.into(),
            color: color.into(),
        });
        self
    }
    /// Adds a horizontal reference line.
    pub fn ref_line(mut self, y: f64, axis: Axis, label: impl Into<String>) -> Self {
        self.ref_lines.push(RefLine {
            y,
            axis,
            label: label.into(),
            color: "#999".into(),
        });
        self
    }

    /// Renders a standalone SVG document.
    pub fn to_svg(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#,
            w = fmt(self.width),
            h = fmt(self.height + self.legend_height())
        );
        self.render_into(&mut out, 0.0);
        out.push_str("</svg>\n");
        out
    }

    /// Writes [`Chart::to_svg`] to `path`.
    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        std::fs::write(path, self.to_svg())
    }

    fn legend_height(&self) -> f64 {
        let per_row = ((self.width - LEFT - RIGHT) / LEGEND_ITEM).floor().max(1.0) as usize;
        let rows = self.series.len().div_ceil(per_row);
        rows as f64 * LEGEND_ROW + 10.0
    }

    fn uses_right(&self) -> bool {
        self.series.iter().any(|s| s.axis == Axis::Right)
            || self.ref_lines.iter().any(|r| r.axis == Axis::Right)
    }

    fn render_into(&self, out: &mut String, y_offset: f64) {
        let plot_w = self.width - LEFT - RIGHT;
        let plot_h = self.height - TOP - BOTTOM;
        let xs = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0))
            .chain(self.markers.iter().map(|m| m.x));
        let x_range = Range::of(xs, false);
        let ys = |axis: Axis| {
            let points = self
                .series
                .iter()
                .filter(move |s| s.axis == axis)
                .flat_map(|s| s.points.iter().map(|p| p.1));
            let lines = self
                .ref_lines
                .iter()
                .filter(move |r| r.axis == axis)
                .map(|r| r.y);
            points.chain(lines)
        };
        let y_left = Range::of(ys(Axis::Left), self.y_from_zero);
        let y_right = Range::of(ys(Axis::Right), self.y_from_zero);
        let x_ticks = nice_ticks(x_range.lo, x_range.hi, 8);
        let yl_ticks = nice_ticks(y_left.lo, y_left.hi, 6);
        let yr_ticks = nice_ticks(y_right.lo, y_right.hi, 6);
        let x_span = span(&x_ticks, &x_range);
        let yl_span = span(&yl_ticks, &y_left);
        let yr_span = span(&yr_ticks, &y_right);
        let top = y_offset + TOP;
        let px = |x: f64| LEFT + (x - x_span.0) / (x_span.1 - x_span.0) * plot_w;
        let py = |y: f64, axis: Axis| {
            let (lo, hi) = if axis == Axis::Left { yl_span } else { yr_span };
            top + plot_h - (y - lo) / (hi - lo) * plot_h
        };

        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle" font-size="14" font-weight="bold">{}</text>"#,
            fmt(self.width / 2.0),
            fmt(y_offset + 22.0),
            escape(&self.title)
        );
        let _ = writeln!(
            out,
            r##"<rect x="{}" y="{}" width="{}" height="{}" fill="none" stroke="#333"/>"##,
            fmt(LEFT),
            fmt(top),
            fmt(plot_w),
            fmt(plot_h)
        );
        // Grid and ticks.
        for &t in x_ticks
            .iter()
            .filter(|t| **t >= x_span.0 && **t <= x_span.1)
        {
            let x = px(t);
            let _ = writeln!(
                out,
                r##"<line x1="{x}" y1="{t0}" x2="{x}" y2="{t1}" stroke="#eee"/><text x="{x}" y="{ty}" text-anchor="middle">{label}</text>"##,
                x = fmt(x),
                t0 = fmt(top),
                t1 = fmt(top + plot_h),
                ty = fmt(top + plot_h + 16.0),
                label = tick_label(t)
            );
        }
        for &t in &yl_ticks {
            let y = py(t, Axis::Left);
            let _ = writeln!(
                out,
                r##"<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="#eee"/><text x="{tx}" y="{ty}" text-anchor="end">{label}</text>"##,
                x0 = fmt(LEFT),
                x1 = fmt(LEFT + plot_w),
                y = fmt(y),
                tx = fmt(LEFT - 6.0),
                ty = fmt(y + 4.0),
                label = tick_label(t)
            );
        }
        if self.uses_right() {
            for &t in &yr_ticks {
                let y = py(t, Axis::Right);
                let _ = writeln!(
                    out,
                    r##"<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="#333"/><text x="{tx}" y="{ty}" text-anchor="start">{label}</text>"##,
                    x0 = fmt(LEFT + plot_w),
                    x1 = fmt(LEFT + plot_w + 4.0),
                    y = fmt(y),
                    tx = fmt(LEFT + plot_w + 7.0),
                    ty = fmt(y + 4.0),
                    label = tick_label(t)
                );
            }
            let _ = writeln!(
                out,
                r#"<text transform="translate({},{}) rotate(90)" text-anchor="middle">{}</text>"#,
                fmt(self.width - 12.0),
                fmt(top + plot_h / 2.0),
                escape(&self.y2_label)
            );
        }
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            fmt(LEFT + plot_w / 2.0),
            fmt(top + plot_h + 36.0),
            escape(&self.x_label)
        );
        let _ = writeln!(
            out,
            r#"<text transform="translate({},{}) rotate(-90)" text-anchor="middle">{}</text>"#,
            fmt(16.0),
            fmt(top + plot_h / 2.0),
            escape(&self.y_label)
        );
        // Reference lines, then series, then markers on top.
        for r in &self.ref_lines {
            if !r.y.is_finite() {
                continue;
            }
            let y = py(r.y, r.axis);
            let _ = writeln!(
                out,
                r#"<line x1="{x0}" y1="{y}" x2="{x1}" y2="{y}" stroke="{c}" stroke-dasharray="2,3"/><text x="{tx}" y="{ty}" text-anchor="end" fill="{c}">{label}</text>"#,
                x0 = fmt(LEFT),
                x1 = fmt(LEFT + plot_w),
                y = fmt(y),
                c = escape(&r.color),
                tx = fmt(LEFT + plot_w - 4.0),
                ty = fmt(y - 4.0),
                label = escape(&r.label)
            );
        }
        for (i, s) in self.series.iter().enumerate() {
            let color = s
                .color
                .clone()
                .unwrap_or_else(|| PALETTE[i % PALETTE.len()].to_string());
            let dash = if s.dashed {
                r#" stroke-dasharray="6,4""#
            } else {
                ""
            };
            let _ = writeln!(out, r#"<g class="series" data-name="{}">"#, escape(&s.name));
            for run in runs(&s.points) {
                let mut d = String::new();
                let mut prev: Option<(f64, f64)> = None;
                for &(x, y) in run {
                    let (x, y) = (px(x), py(y, s.axis));
                    match prev {
                        None => {
                            let _ = write!(d, "M{} {}", fmt(x), fmt(y));
                        }
                        Some((_, py0)) if s.step => {
                            let _ = write!(d, " L{} {} L{} {}", fmt(x), fmt(py0), fmt(x), fmt(y));
                        }
                        Some(_) => {
                            let _ = write!(d, " L{} {}", fmt(x), fmt(y));
                        }
                    }
                    prev = Some((x, y));
                }
                let _ = writeln!(
                    out,
                    r#"<path d="{d}" fill="none" stroke="{color}" stroke-width="2"{dash}/>"#
                );
                if s.dots || run.len() == 1 {
                    for &(x, y) in run {
                        let _ = writeln!(
                            out,
                            r#"<circle cx="{}" cy="{}" r="3" fill="{color}"/>"#,
                            fmt(px(x)),
                            fmt(py(y, s.axis))
                        );
                    }
                }
            }
            out.push_str("</g>\n");
        }
        for m in self.markers.iter().filter(|m| m.x.is_finite()) {
            let x = px(m.x);
            let _ = writeln!(
                out,
                r#"<line x1="{x}" y1="{y0}" x2="{x}" y2="{y1}" stroke="{c}" stroke-width="1.5" stroke-dasharray="4,3"/><text x="{tx}" y="{ty}" fill="{c}">{label}</text>"#,
                x = fmt(x),
                y0 = fmt(top),
                y1 = fmt(top + plot_h),
                c = escape(&m.color),
                tx = fmt(x + 4.0),
                ty = fmt(top + 14.0),
                label = escape(&m.label)
            );
        }
        // Legend under the x-axis label.
        let per_row = (plot_w / LEGEND_ITEM).floor().max(1.0) as usize;
        for (i, s) in self.series.iter().enumerate() {
            let color = s
                .color
                .clone()
                .unwrap_or_else(|| PALETTE[i % PALETTE.len()].to_string());
            let lx = LEFT + (i % per_row) as f64 * LEGEND_ITEM;
            let ly = y_offset + self.height + 6.0 + (i / per_row) as f64 * LEGEND_ROW;
            let side = if s.axis == Axis::Right && self.uses_right() {
                " (right)"
            } else {
                ""
            };
            let dash = if s.dashed {
                r#" stroke-dasharray="6,4""#
            } else {
                ""
            };
            let _ = writeln!(
                out,
                r#"<line x1="{}" y1="{}" x2="{}" y2="{}" stroke="{color}" stroke-width="2"{dash}/><text x="{}" y="{}">{}{side}</text>"#,
                fmt(lx),
                fmt(ly - 4.0),
                fmt(lx + 20.0),
                fmt(ly - 4.0),
                fmt(lx + 25.0),
                fmt(ly),
                escape(&s.name)
            );
        }
    }
}

/// Stacks charts vertically in one SVG document (same width: the widest).
pub fn stack(charts: &[Chart]) -> String {
    let width = charts.iter().map(|c| c.width).fold(200.0, f64::max);
    let heights: Vec<f64> = charts
        .iter()
        .map(|c| c.height + c.legend_height() + 10.0)
        .collect();
    let total: f64 = heights.iter().sum();
    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="12">"#,
        w = fmt(width),
        h = fmt(total.max(1.0))
    );
    let mut y = 0.0;
    for (chart, h) in charts.iter().zip(&heights) {
        chart.render_into(&mut out, y);
        y += h;
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_nice_and_cover_the_range() {
        assert_eq!(
            nice_ticks(0.0, 70.0, 8),
            vec![0.0, 10.0, 20.0, 30.0, 40.0, 50.0, 60.0, 70.0]
        );
        let t = nice_ticks(0.0, 0.93, 6);
        assert_eq!(t.first(), Some(&0.0));
        assert!(*t.last().unwrap() >= 0.93);
        assert!(t.len() <= 8);
        let t = nice_ticks(3.2, 3.3, 5);
        assert!(t[0] <= 3.2 && *t.last().unwrap() >= 3.3);
        assert_eq!(nice_ticks(1.0, 1.0, 5), vec![1.0]);
        assert_eq!(tick_label(0.30000000000000004), "0.3");
        assert_eq!(tick_label(20.0), "20");
    }

    #[test]
    fn degenerate_input_does_not_panic() {
        let svg = Chart::new("empty").to_svg();
        assert!(svg.contains("</svg>"));
        let svg = Chart::new("nan")
            .series(Series::new(
                "a",
                vec![(f64::NAN, 1.0), (1.0, f64::INFINITY), (2.0, 2.0)],
            ))
            .series(Series::new("flat", vec![(0.0, 5.0), (1.0, 5.0)]).axis(Axis::Right))
            .to_svg();
        assert!(!svg.contains("NaN") && !svg.contains("inf"));
    }
}
