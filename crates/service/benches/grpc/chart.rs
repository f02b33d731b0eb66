//! A small SVG chart for the service bench: the empirical CDF of a set of durations.

/// Writes an SVG chart of the empirical CDF of `samples_ms` (x in ms, log scale when `log_x`),
/// with an optional labelled vertical line (a target or bound), and returns its path.
pub(crate) fn write_cdf_svg(
    name: &str,
    title: &str,
    samples_ms: &mut [f64],
    log_x: bool,
    bound_ms: Option<(f64, &str)>,
) -> std::path::PathBuf {
    use std::fmt::Write as _;
    samples_ms.sort_by(f64::total_cmp);
    let (w, h, left, right, top, bottom) = (720.0, 400.0, 70.0, 20.0, 40.0, 50.0);
    let xs = |v: f64| if log_x { v.max(1e-3).log10() } else { v };
    let lo = if log_x {
        xs(samples_ms.first().copied().unwrap_or(0.01)).floor()
    } else {
        0.0
    };
    let mut hi_raw = samples_ms.last().copied().unwrap_or(1.0);
    if let Some((b, _)) = bound_ms {
        hi_raw = hi_raw.max(b);
    }
    let hi = if log_x {
        xs(hi_raw).ceil()
    } else {
        hi_raw * 1.05
    };
    let px = |v: f64| left + (xs(v) - lo) / (hi - lo).max(1e-9) * (w - left - right);
    let py = |q: f64| top + (1.0 - q) * (h - top - bottom);
    let mut svg = String::new();
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="14">{title}</text>
"#,
        w / 2.0
    );
    for q in [0.0, 0.25, 0.5, 0.75, 0.9, 1.0] {
        let y = py(q);
        let _ = writeln!(
            svg,
            r##"<line x1="{left}" x2="{}" y1="{y}" y2="{y}" stroke="#ddd"/><text x="{}" y="{}" text-anchor="end">p{}</text>"##,
            w - right,
            left - 6.0,
            y + 4.0,
            q * 100.0
        );
    }
    let ticks: Vec<f64> = if log_x {
        (lo as i32..=hi as i32).map(|e| 10f64.powi(e)).collect()
    } else {
        let raw = hi / 5.0;
        let magnitude = 10f64.powf(raw.log10().floor());
        let step = [1.0, 2.0, 2.5, 5.0, 10.0]
            .into_iter()
            .map(|m| m * magnitude)
            .find(|s| *s >= raw)
            .unwrap_or(raw);
        (0..)
            .map(|i| f64::from(i) * step)
            .take_while(|t| *t <= hi)
            .collect()
    };
    for t in ticks {
        let x = px(t);
        let label = if t >= 1.0 {
            format!("{t:.0} ms")
        } else {
            format!("{t} ms")
        };
        let _ = writeln!(
            svg,
            r##"<line x1="{x}" x2="{x}" y1="{top}" y2="{}" stroke="#eee"/><text x="{x}" y="{}" text-anchor="middle">{label}</text>"##,
            h - bottom,
            h - bottom + 16.0
        );
    }
    // At most about 600 points: 400 spread over all ranks plus every rank of the top 1 % (up
    // to 200), so the tail keeps its detail.
    let len = samples_ms.len();
    let n = len.max(1) as f64;
    let mut ranks: Vec<usize> = (0..400).map(|i| i * len / 400).collect();
    ranks.extend(len.saturating_sub((len / 100).min(200))..len);
    ranks.sort_unstable();
    ranks.dedup();
    // A staircase: the CDF steps up by 1/n at each sample.
    let points: Vec<String> = ranks
        .into_iter()
        .filter(|&i| i < len)
        .map(|i| {
            let x = px(samples_ms[i]);
            format!(
                "{x:.1},{:.1} {x:.1},{:.1}",
                py(i as f64 / n),
                py((i + 1) as f64 / n)
            )
        })
        .collect();
    let _ = writeln!(
        svg,
        r##"<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{}"/>"##,
        points.join(" ")
    );
    if let Some((b, label)) = bound_ms {
        let x = px(b);
        let _ = writeln!(
            svg,
            r##"<line x1="{x}" x2="{x}" y1="{top}" y2="{}" stroke="#d62728" stroke-dasharray="4 3"/><text x="{}" y="{}" fill="#d62728" text-anchor="end">{label}</text>"##,
            h - bottom,
            x - 4.0,
            top + 14.0
        );
    }
    let _ = writeln!(
        svg,
        r#"<text x="{}" y="{}" text-anchor="middle">milliseconds ({} samples)</text>
</svg>"#,
        w / 2.0,
        h - 10.0,
        samples_ms.len()
    );
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-service");
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(name);
    if let Err(e) = std::fs::write(&path, svg) {
        eprintln!("cannot write {}: {e}", path.display());
    }
    path
}
