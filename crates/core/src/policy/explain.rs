//! Number formatting for decision explanations: short, unit-bearing, never `NaN`.

use std::time::Duration;

/// A number with at most two decimals, trailing zeros trimmed ("25", "7.2", "0.12").
pub(super) fn num(x: f64) -> String {
    if !x.is_finite() {
        return "?".to_owned();
    }
    let s = format!("{x:.2}");
    let s = s.trim_end_matches('0').trim_end_matches('.');
    if s == "-0" {
        "0".to_owned()
    } else {
        s.to_owned()
    }
}

/// Seconds from a float ("7.2 s").
pub(super) fn secs(x: f64) -> String {
    format!("{} s", num(x))
}

/// Seconds from a duration ("30 s").
pub(super) fn dur(d: Duration) -> String {
    secs(d.as_secs_f64())
}

/// A fraction as a percentage ("97 %", "80.5 %").
pub(super) fn pct(fraction: f64) -> String {
    if !fraction.is_finite() {
        return "? %".to_owned();
    }
    let s = format!("{:.1}", fraction * 100.0);
    let s = s.trim_end_matches('0').trim_end_matches('.');
    format!("{s} %")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_short() {
        assert_eq!(num(140.0), "140");
        assert_eq!(num(7.2), "7.2");
        assert_eq!(num(0.125), "0.12");
        assert_eq!(num(f64::NAN), "?");
        assert_eq!(num(-0.0001), "0");
        assert_eq!(secs(5.0), "5 s");
        assert_eq!(dur(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(pct(0.97), "97 %");
        assert_eq!(pct(0.805), "80.5 %");
    }
}
