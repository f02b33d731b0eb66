//! Axis scales and text for the charts: data ranges, "nice" tick positions, tick labels,
//! number formatting and XML escaping.

#[derive(Debug, Clone, Copy)]
pub(super) struct Range {
    pub(super) lo: f64,
    pub(super) hi: f64,
}

impl Range {
    pub(super) fn of(values: impl Iterator<Item = f64>, from_zero: bool) -> Range {
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        for v in values.filter(|v| v.is_finite()) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
        if !lo.is_finite() {
            return Range { lo: 0.0, hi: 1.0 };
        }
        if from_zero {
            lo = lo.min(0.0);
            hi = hi.max(0.0);
        }
        if hi - lo < 1e-12 {
            let pad = if hi.abs() > 1e-12 {
                hi.abs() * 0.1
            } else {
                1.0
            };
            return Range {
                lo: if from_zero && lo >= 0.0 { lo } else { lo - pad },
                hi: hi + pad,
            };
        }
        Range { lo, hi }
    }
}

pub(super) fn span(ticks: &[f64], range: &Range) -> (f64, f64) {
    let lo = ticks.first().copied().unwrap_or(range.lo).min(range.lo);
    let hi = ticks.last().copied().unwrap_or(range.hi).max(range.hi);
    if hi - lo < 1e-12 {
        (lo, lo + 1.0)
    } else {
        (lo, hi)
    }
}

/// "Nice" tick positions (1, 2, 2.5 or 5 times a power of ten) covering `[lo, hi]` with about
/// `target` ticks.
pub fn nice_ticks(lo: f64, hi: f64, target: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) || hi <= lo || target == 0 {
        return vec![if lo.is_finite() { lo } else { 0.0 }];
    }
    let raw = (hi - lo) / target as f64;
    let magnitude = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * magnitude)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * magnitude);
    let first = (lo / step).floor() * step;
    let mut ticks = Vec::new();
    let mut k = 0.0;
    loop {
        let t = first + k * step;
        // Clean up floating-point dust such as 0.30000000000000004.
        let t = (t / step).round() * step;
        ticks.push(t);
        if t >= hi - step * 1e-9 || ticks.len() > 100 {
            break;
        }
        k += 1.0;
    }
    ticks
}

pub(super) fn tick_label(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    if !(1e-3..1e6).contains(&a) {
        format!("{v:.1e}")
    } else if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

pub(super) fn fmt(v: f64) -> String {
    let s = format!("{v:.1}");
    s.strip_suffix(".0").map(str::to_string).unwrap_or(s)
}

pub(super) fn runs(points: &[(f64, f64)]) -> impl Iterator<Item = &[(f64, f64)]> {
    points
        .split(|p| !(p.0.is_finite() && p.1.is_finite()))
        .filter(|r| !r.is_empty())
}

/// Escapes text for SVG element content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {}
            c => out.push(c),
        }
    }
    out
}
