//! Reading one metadata value: plain decimals, whole numbers, fractions, seconds, words. Each
//! reader takes the value as written and returns it typed, or the message of the error
//! (`expected {what}, got "{value}"`; the caller names the key).

use std::time::Duration;

use crate::policy::Mode;

/// `expected {what}, got "{value}"`.
pub(super) fn expected(what: &str, value: &str) -> String {
    format!("expected {what}, got {value:?}")
}

/// A plain decimal: digits with at most one `.`, no sign, exponent, `inf` or `NaN`.
fn plain_decimal(value: &str) -> Option<f64> {
    let v = value.trim();
    let digits = v.chars().filter(char::is_ascii_digit).count();
    let dots = v.chars().filter(|&c| c == '.').count();
    if digits == 0 || dots > 1 || digits + dots != v.len() {
        return None;
    }
    v.parse::<f64>().ok().filter(|x| x.is_finite())
}

/// A plain decimal for which `ok` holds.
fn number(value: &str, what: &str, ok: impl Fn(f64) -> bool) -> Result<f64, String> {
    match plain_decimal(value) {
        Some(x) if ok(x) => Ok(x),
        _ => Err(expected(what, value)),
    }
}

/// A number > 0.
pub(super) fn positive(value: &str, what: &str) -> Result<f64, String> {
    number(value, what, |x| x > 0.0)
}

/// A latency SLO: seconds > 0, or `off` (any case) for no trigger (`None`).
pub(super) fn slo(value: &str) -> Result<Option<f64>, String> {
    if value.trim().eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    positive(value, "a positive number of seconds or \"off\"").map(Some)
}

/// A fraction in (0, 1].
pub(super) fn fraction(value: &str) -> Result<f64, String> {
    number(
        value,
        "a fraction above 0 and at most 1 (0.8 means 80 %)",
        |x| x > 0.0 && x <= 1.0,
    )
}

/// The HPA tolerance, in [0, 1).
pub(super) fn tolerance(value: &str) -> Result<f64, String> {
    number(value, "a fraction >= 0 and below 1 (0.1 means 10 %)", |x| {
        x < 1.0
    })
}

fn whole(value: &str, what: &str) -> Result<u32, String> {
    let x = number(value, what, |x| {
        x >= 1.0 && x.fract() == 0.0 && x <= f64::from(u32::MAX)
    })?;
    Ok(x as u32)
}

/// A replica count, whole and >= 1.
pub(super) fn replicas(value: &str) -> Result<u32, String> {
    whole(value, "a whole number >= 1")
}

/// A pod step, whole and >= 1.
pub(super) fn pods(value: &str) -> Result<u32, String> {
    whole(value, "a whole number of pods >= 1")
}

/// Seconds >= 0.
pub(super) fn seconds(value: &str) -> Result<Duration, String> {
    let x = number(value, "a number of seconds >= 0", |x| x < 1e9)?;
    Ok(Duration::from_secs_f64(x))
}

/// Seconds > 0.
pub(super) fn seconds_positive(value: &str) -> Result<Duration, String> {
    let x = number(value, "a positive number of seconds", |x| {
        x > 0.0 && x < 1e9
    })?;
    Ok(Duration::from_secs_f64(x))
}

/// Seconds >= 0.1 (a scrape interval).
pub(super) fn scrape_interval(value: &str) -> Result<Duration, String> {
    let x = number(value, "a number of seconds >= 0.1", |x| {
        (0.1..1e9).contains(&x)
    })?;
    Ok(Duration::from_secs_f64(x))
}

/// Seconds in [1, 180] (a rate window; the scrape interval is checked against it later).
pub(super) fn rate_window(value: &str) -> Result<Duration, String> {
    let x = number(value, "a number of seconds from 1 to 180", |x| {
        (1.0..=180.0).contains(&x)
    })?;
    Ok(Duration::from_secs_f64(x))
}

/// `active` or `advisory`.
pub(super) fn mode(value: &str) -> Result<Mode, String> {
    match value.trim() {
        "active" => Ok(Mode::Active),
        "advisory" => Ok(Mode::Advisory),
        _ => Err(expected("\"active\" or \"advisory\"", value)),
    }
}

/// A model name: non-empty, no whitespace inside.
pub(super) fn model(value: &str) -> Result<String, String> {
    let t = value.trim();
    if t.is_empty() || t.chars().any(char::is_whitespace) {
        return Err(expected("a model name (the `model_name` label)", value));
    }
    Ok(t.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_decimals_only() {
        assert_eq!(plain_decimal("25"), Some(25.0));
        assert_eq!(plain_decimal(" 0.8 "), Some(0.8));
        assert_eq!(plain_decimal(".5"), Some(0.5));
        for bad in [
            "", "-1", "+1", "1e3", "inf", "NaN", "1.2.3", "30s", "abc", ".",
        ] {
            assert_eq!(plain_decimal(bad), None, "{bad}");
        }
        assert_eq!(plain_decimal(&"9".repeat(400)), None);
    }

    #[test]
    fn seconds_stop_below_a_billion() {
        let just_below = Duration::from_secs(999_999_999);
        assert_eq!(seconds("999999999"), Ok(just_below));
        assert_eq!(seconds_positive("999999999"), Ok(just_below));
        assert_eq!(scrape_interval("999999999"), Ok(just_below));
        for at_the_bound in ["1000000000", "1000000000.0"] {
            assert!(seconds(at_the_bound).is_err(), "{at_the_bound}");
            assert!(seconds_positive(at_the_bound).is_err(), "{at_the_bound}");
            assert!(scrape_interval(at_the_bound).is_err(), "{at_the_bound}");
        }
        assert_eq!(seconds("0"), Ok(Duration::ZERO));
        assert!(seconds_positive("0").is_err());
        assert_eq!(scrape_interval("0.1"), Ok(Duration::from_millis(100)));
    }

    #[test]
    fn a_model_name_has_no_space_inside() {
        assert_eq!(model(" m/x-1 ").as_deref(), Ok("m/x-1"));
        for bad in ["", " ", "a b", "a\tb"] {
            assert!(model(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn slo_is_seconds_or_off() {
        assert_eq!(slo("1.5"), Ok(Some(1.5)));
        for off in ["off", " OFF ", "Off"] {
            assert_eq!(slo(off), Ok(None), "{off}");
        }
        for bad in ["0", "of"] {
            let e = slo(bad).unwrap_err();
            assert!(
                e.starts_with("expected a positive number of seconds or \"off\", got "),
                "{e}"
            );
        }
    }
}
