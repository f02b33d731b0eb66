//! Reading one metadata value: plain decimals, whole numbers, fractions, seconds, words.
//! Each reader returns `Ok(None)` when the key is absent (except [`Meta::slo`], which takes
//! the default, because there `None` means `off`).

use std::collections::HashMap;
use std::time::Duration;

use super::{ConfigError, Mode};

/// The metadata map, with typed readers.
pub(super) struct Meta<'a>(pub(super) &'a HashMap<String, String>);

/// `expected {what}, got "{value}"`.
pub(super) fn expected(key: &str, what: &str, value: &str) -> ConfigError {
    ConfigError::new(key, format!("expected {what}, got {value:?}"))
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

impl Meta<'_> {
    /// The value as written ("" when absent).
    pub(super) fn raw(&self, key: &str) -> &str {
        self.0.get(key).map_or("", String::as_str)
    }

    /// The value, present.
    pub(super) fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    fn number(
        &self,
        key: &str,
        what: &str,
        ok: impl Fn(f64) -> bool,
    ) -> Result<Option<f64>, ConfigError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match plain_decimal(v) {
            Some(x) if ok(x) => Ok(Some(x)),
            _ => Err(expected(key, what, v)),
        }
    }

    /// A number > 0.
    pub(super) fn positive(&self, key: &str, what: &str) -> Result<Option<f64>, ConfigError> {
        self.number(key, what, |x| x > 0.0)
    }

    /// A latency SLO: seconds > 0, or `off` (any case) for no trigger (`None`); `default`
    /// when the key is absent.
    pub(super) fn slo(&self, key: &str, default: Option<f64>) -> Result<Option<f64>, ConfigError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) if v.trim().eq_ignore_ascii_case("off") => Ok(None),
            Some(_) => self.positive(key, "a positive number of seconds or \"off\""),
        }
    }

    /// A fraction in (0, 1].
    pub(super) fn fraction(&self, key: &str) -> Result<Option<f64>, ConfigError> {
        self.number(
            key,
            "a fraction above 0 and at most 1 (0.8 means 80 %)",
            |x| x > 0.0 && x <= 1.0,
        )
    }

    /// The HPA tolerance, in [0, 1).
    pub(super) fn tolerance(&self, key: &str) -> Result<Option<f64>, ConfigError> {
        self.number(key, "a fraction >= 0 and below 1 (0.1 means 10 %)", |x| {
            x < 1.0
        })
    }

    fn whole(&self, key: &str, what: &str) -> Result<Option<u32>, ConfigError> {
        let x = self.number(key, what, |x| {
            x >= 1.0 && x.fract() == 0.0 && x <= f64::from(u32::MAX)
        })?;
        Ok(x.map(|x| x as u32))
    }

    /// A replica count, whole and >= 1.
    pub(super) fn replicas(&self, key: &str) -> Result<Option<u32>, ConfigError> {
        self.whole(key, "a whole number >= 1")
    }

    /// A pod step, whole and >= 1.
    pub(super) fn pods(&self, key: &str) -> Result<Option<u32>, ConfigError> {
        self.whole(key, "a whole number of pods >= 1")
    }

    /// Seconds >= 0.
    pub(super) fn seconds(&self, key: &str) -> Result<Option<Duration>, ConfigError> {
        let x = self.number(key, "a number of seconds >= 0", |x| x < 1e9)?;
        Ok(x.map(Duration::from_secs_f64))
    }

    /// Seconds > 0.
    pub(super) fn seconds_positive(&self, key: &str) -> Result<Option<Duration>, ConfigError> {
        let x = self.number(key, "a positive number of seconds", |x| x > 0.0 && x < 1e9)?;
        Ok(x.map(Duration::from_secs_f64))
    }

    /// Seconds >= 0.1 (a scrape interval).
    pub(super) fn scrape_interval(&self, key: &str) -> Result<Option<Duration>, ConfigError> {
        let x = self.number(key, "a number of seconds >= 0.1", |x| {
            (0.1..1e9).contains(&x)
        })?;
        Ok(x.map(Duration::from_secs_f64))
    }

    /// `active` or `advisory`.
    pub(super) fn mode(&self, key: &str) -> Result<Option<Mode>, ConfigError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        match v.trim() {
            "active" => Ok(Some(Mode::Active)),
            "advisory" => Ok(Some(Mode::Advisory)),
            _ => Err(expected(key, "\"active\" or \"advisory\"", v)),
        }
    }

    /// A model name: non-empty, no whitespace inside.
    pub(super) fn model(&self, key: &str) -> Result<Option<String>, ConfigError> {
        let Some(v) = self.get(key) else {
            return Ok(None);
        };
        let t = v.trim();
        if t.is_empty() || t.chars().any(char::is_whitespace) {
            return Err(expected(key, "a model name (the `model_name` label)", v));
        }
        Ok(Some(t.to_owned()))
    }
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
    fn slo_is_seconds_or_off() {
        let map: HashMap<String, String> = [
            ("a", "1.5"),
            ("b", "off"),
            ("c", " OFF "),
            ("d", "Off"),
            ("e", "0"),
            ("f", "of"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        let m = Meta(&map);
        assert_eq!(m.slo("a", None), Ok(Some(1.5)));
        for off in ["b", "c", "d"] {
            assert_eq!(m.slo(off, Some(2.0)), Ok(None), "{off}");
        }
        assert_eq!(m.slo("absent", Some(2.0)), Ok(Some(2.0)));
        assert_eq!(m.slo("absent", None), Ok(None));
        for bad in ["e", "f"] {
            let e = m.slo(bad, Some(2.0)).unwrap_err();
            assert_eq!(e.key, bad);
            assert!(
                e.message
                    .starts_with("expected a positive number of seconds or \"off\", got "),
                "{e}"
            );
        }
    }
}
