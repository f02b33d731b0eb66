//! Seconds given on the command line or in a policy knob, turned into a [`Duration`] only once
//! they are known to fit: a number too large for a duration would otherwise panic.

use std::time::Duration;

/// The most seconds a flag or a knob takes: a year, far beyond any run, and well within what a
/// [`Duration`] holds.
pub const MOST_SECONDS: f64 = 365.0 * 86_400.0;

/// Whether `v` is a number of seconds above 0 (or 0 itself, when `zero` is allowed) and at most
/// [`MOST_SECONDS`].
pub fn fits(v: f64, zero: bool) -> bool {
    v.is_finite() && (v > 0.0 || (zero && v == 0.0)) && v <= MOST_SECONDS
}

/// The range [`fits`] accepts, for an error message.
pub fn range(zero: bool) -> String {
    let low = if zero { "from 0" } else { "above 0" };
    format!("{low} to {MOST_SECONDS} (a year)")
}

/// A command-line flag in seconds (`--FLAG`), or an error naming the flag and the range.
pub fn flag(flag: &str, v: f64, zero: bool) -> anyhow::Result<Duration> {
    anyhow::ensure!(
        fits(v, zero),
        "--{flag} {v:?}: expected a number of seconds {}",
        range(zero)
    );
    Ok(Duration::from_secs_f64(v))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seconds_flag_names_its_range_when_refused() {
        for (v, zero, expected) in [
            (
                1e300,
                false,
                "--f 1e300: expected a number of seconds above 0 to 31536000 (a year)",
            ),
            (
                -1.0,
                true,
                "--f -1.0: expected a number of seconds from 0 to 31536000 (a year)",
            ),
            (0.0, false, "--f 0.0: expected a number of seconds above 0"),
            (f64::NAN, true, "--f NaN"),
        ] {
            let e = flag("f", v, zero).unwrap_err().to_string();
            assert!(e.contains(expected), "{v} {zero}: {e}");
        }
        assert_eq!(flag("f", 0.0, true).unwrap(), Duration::ZERO);
        assert_eq!(
            flag("f", MOST_SECONDS, false).unwrap().as_secs(),
            31_536_000
        );
    }
}
