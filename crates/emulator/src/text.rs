//! Writing Prometheus text format the way Python `prometheus_client` does.
//!
//! Owns: [`py_float`] (Python `repr` with `prometheus_client`'s Go-style exponents), label
//! escaping, and the family/sample `Writer` used by [`super::metrics`] and
//! [`super::http_stats`]. Does not decide which families exist.

use std::fmt::Write as _;

use super::stats::EngineHistogram;

/// Formats `v` the way `prometheus_client` does (`repr`, with Go-style exponents for large
/// positive values): `14.0`, `2.773726e+06`, `1.7672580591200001e+09`, `+Inf`, `NaN`.
pub fn py_float(v: f64, out: &mut String) {
    if v.is_nan() {
        out.push_str("NaN");
        return;
    }
    if v.is_infinite() {
        out.push_str(if v > 0.0 { "+Inf" } else { "-Inf" });
        return;
    }
    // Fast path for the common case, whole numbers below a million: `14.0`, `-3.0`.
    if v.fract() == 0.0 && v.abs() < 1e6 {
        if v == 0.0 && v.is_sign_negative() {
            out.push_str("-0.0");
        } else {
            let _ = write!(out, "{}.0", v as i64);
        }
        return;
    }
    // Shortest round-trip digits and the decimal exponent of the first digit.
    let sci = format!("{:e}", v.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let neg = v.is_sign_negative();
    if v > 0.0 && (6..16).contains(&exp) {
        let trimmed = digits.trim_end_matches('0');
        let (first, rest) = trimmed.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let _ = write!(out, "e+{exp:02}");
        return;
    }
    if neg {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.extend(std::iter::repeat_n('0', int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.extend(std::iter::repeat_n('0', (-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        let sign = if exp < 0 { '-' } else { '+' };
        let _ = write!(out, "e{sign}{:02}", exp.abs());
    }
}

fn escape_label(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Writes samples with a fixed base label set (`engine`, `model_name`) plus at most one extra
/// label, keeping labels sorted by name like the fixtures.
pub(crate) struct Writer<'o> {
    pub(crate) out: &'o mut String,
    /// Base labels, sorted by name, values already escaped (see [`Writer::base_labels`]).
    pub(crate) base: Vec<(&'static str, String)>,
    pub(crate) created: Option<f64>,
    /// `created` formatted once per body.
    created_text: String,
}

/// The `le` label values of a bucket table (finite bounds then `+Inf`), formatted once per
/// process: bucket tables are `'static` and few.
pub(crate) fn le_labels(bounds: &'static [f64]) -> &'static [String] {
    type Cache = Vec<(usize, &'static [String])>;
    static CACHE: std::sync::Mutex<Cache> = std::sync::Mutex::new(Vec::new());
    let key = bounds.as_ptr() as usize ^ bounds.len().rotate_left(48);
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, v)) = cache.iter().find(|(k, _)| *k == key) {
        return v;
    }
    let labels: Vec<String> = bounds
        .iter()
        .copied()
        .chain(std::iter::once(f64::INFINITY))
        .map(|b| {
            let mut s = String::new();
            py_float(b, &mut s);
            s
        })
        .collect();
    let leaked: &'static [String] = Box::leak(labels.into_boxed_slice());
    cache.push((key, leaked));
    leaked
}

impl<'o> Writer<'o> {
    /// A writer appending to `out` with sorted, escaped `base` labels and, when `created` is
    /// set, `_created` gauges after every counter and histogram.
    pub(crate) fn new(
        out: &'o mut String,
        base: Vec<(&'static str, String)>,
        created: Option<f64>,
    ) -> Self {
        Writer {
            out,
            base,
            created,
            created_text: String::new(),
        }
    }

    /// Sorted, escaped base labels from `(name, raw value)` pairs.
    pub(crate) fn base_labels(pairs: &[(&'static str, &str)]) -> Vec<(&'static str, String)> {
        let mut v: Vec<(&'static str, String)> = pairs
            .iter()
            .map(|(k, raw)| {
                let mut escaped = String::new();
                escape_label(raw, &mut escaped);
                (*k, escaped)
            })
            .collect();
        v.sort_by(|a, b| a.0.cmp(b.0));
        v
    }

    pub(crate) fn header(&mut self, name: &str, help: &str, kind: &str) {
        let _ = writeln!(self.out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    }

    /// Writes one sample. `extra` must be sorted by label name; it is merged with the sorted
    /// base labels without allocating.
    pub(crate) fn sample(&mut self, name: &str, suffix: &str, extra: &[(&str, &str)], value: f64) {
        self.name_and_labels(name, suffix, extra);
        py_float(value, self.out);
        self.out.push('\n');
    }

    /// Writes one sample whose value is already formatted.
    fn sample_text(&mut self, name: &str, suffix: &str, extra: &[(&str, &str)], value: &str) {
        self.name_and_labels(name, suffix, extra);
        self.out.push_str(value);
        self.out.push('\n');
    }

    fn name_and_labels(&mut self, name: &str, suffix: &str, extra: &[(&str, &str)]) {
        debug_assert!(extra.windows(2).all(|w| w[0].0 < w[1].0), "unsorted labels");
        self.out.push_str(name);
        self.out.push_str(suffix);
        if !self.base.is_empty() || !extra.is_empty() {
            self.out.push('{');
            let (mut b, mut e) = (0, 0);
            let mut first = true;
            while b < self.base.len() || e < extra.len() {
                let take_base =
                    e >= extra.len() || (b < self.base.len() && self.base[b].0 <= extra[e].0);
                let (k, v, escaped) = if take_base {
                    b += 1;
                    (self.base[b - 1].0, self.base[b - 1].1.as_str(), true)
                } else {
                    e += 1;
                    (extra[e - 1].0, extra[e - 1].1, false)
                };
                if !first {
                    self.out.push(',');
                }
                first = false;
                self.out.push_str(k);
                self.out.push_str("=\"");
                if escaped {
                    self.out.push_str(v);
                } else {
                    escape_label(v, self.out);
                }
                self.out.push('"');
            }
            self.out.push('}');
        }
        self.out.push(' ');
    }

    pub(crate) fn gauge(&mut self, name: &str, help: &str, value: f64) {
        self.header(name, help, "gauge");
        self.sample(name, "", &[], value);
    }

    pub(crate) fn created_family(&mut self, stem: &str, help: &str, children: &[&[(&str, &str)]]) {
        if let Some(created) = self.created {
            if self.created_text.is_empty() {
                py_float(created, &mut self.created_text);
            }
            let text = std::mem::take(&mut self.created_text);
            let name = format!("{stem}_created");
            self.header(&name, help, "gauge");
            for extra in children {
                self.sample_text(&name, "", extra, &text);
            }
            self.created_text = text;
        }
    }

    /// A counter family `stem_total` (one child per `children` entry) plus its `_created`.
    pub(crate) fn counter(&mut self, stem: &str, help: &str, children: &[(&[(&str, &str)], f64)]) {
        let total = format!("{stem}_total");
        self.header(&total, help, "counter");
        for (extra, value) in children {
            self.sample(&total, "", extra, *value);
        }
        let extras: Vec<&[(&str, &str)]> = children.iter().map(|c| c.0).collect();
        self.created_family(stem, help, &extras);
    }

    pub(crate) fn histogram(
        &mut self,
        name: &str,
        help: &str,
        h: &EngineHistogram,
        v0_order: bool,
    ) {
        self.header(name, help, "histogram");
        if v0_order {
            self.sample(name, "_sum", &[], h.sum());
        }
        for (le, cumulative) in le_labels(h.bounds()).iter().zip(h.cumulative()) {
            self.sample(name, "_bucket", &[("le", le)], cumulative as f64);
        }
        self.sample(name, "_count", &[], h.count() as f64);
        if !v0_order {
            self.sample(name, "_sum", &[], h.sum());
        }
        self.created_family(name, help, &[&[]]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_match_prometheus_client() {
        // Expected strings produced by prometheus_client.utils.floatToGoString.
        let cases: &[(f64, &str)] = &[
            (0.0, "0.0"),
            (1.0, "1.0"),
            (14.0, "14.0"),
            (0.9003, "0.9003"),
            (2773726.0, "2.773726e+06"),
            (957248.0, "957248.0"),
            (1767258059.1200001, "1.7672580591200001e+09"),
            (60521304064.0, "6.0521304064e+10"),
            (1048576.0, "1.048576e+06"),
            (1e16, "1e+16"),
            (1.5e16, "1.5e+16"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (123456.789, "123456.789"),
            (1234567.891, "1.234567891e+06"),
            (3785.898987859578, "3785.898987859578"),
            (0.001, "0.001"),
            (2560.0, "2560.0"),
            (1e22, "1e+22"),
            (-1.0, "-1.0"),
            (-2773726.0, "-2773726.0"),
            (0.1 + 0.2, "0.30000000000000004"),
            (5e-324, "5e-324"),
            (1e15, "1e+15"),
            (999999.9999999, "999999.9999999"),
            (9999999.0, "9.999999e+06"),
            (f64::INFINITY, "+Inf"),
            (f64::NEG_INFINITY, "-Inf"),
            (f64::NAN, "NaN"),
        ];
        for (v, want) in cases {
            let mut s = String::new();
            py_float(*v, &mut s);
            assert_eq!(&s, want, "value {v:?}");
        }
    }
}
