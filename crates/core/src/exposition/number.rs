//! Sample values and timestamps.
//!
//! Values take a fast path for the short decimals exporters write (`14.0`, `0.9003`,
//! `1.144722e+06`), exact by Clinger's argument: a mantissa below 2^53 and a power of ten up to
//! 10^22 are both exact doubles, so one multiplication or division rounds correctly. Everything
//! else (`NaN`, `+Inf`, 17-digit Python reprs, huge exponents) goes to the standard library.

/// Powers of ten that are exact doubles.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// Largest mantissa that is an exact double.
const MAX_EXACT_MANTISSA: u64 = 1 << 53;

/// Parses a sample value token; `None` when it is not a number.
///
/// Accepts what Go's `strconv.ParseFloat` and Python's `float()` accept for the formats
/// exporters write: decimals with optional sign, fraction and exponent, and `NaN`, `Inf`,
/// `Infinity` with optional sign in any case. Rejects hex floats and `_` digit separators.
pub(super) fn parse_value(token: &str) -> Option<f64> {
    match fast_decimal(token.as_bytes()) {
        Fast::Value(v) => Some(v),
        Fast::NotANumber => None,
        Fast::Unsure => token.parse::<f64>().ok(),
    }
}

enum Fast {
    Value(f64),
    /// Certainly not a number (bad syntax that the standard library would also reject).
    NotANumber,
    /// Too many digits or too big an exponent for the fast path, or a word like `NaN`.
    Unsure,
}

fn fast_decimal(b: &[u8]) -> Fast {
    let mut i = 0;
    let negative = match b.first() {
        Some(b'-') => {
            i = 1;
            true
        }
        Some(b'+') => {
            i = 1;
            false
        }
        _ => false,
    };
    let mut mantissa: u64 = 0;
    let mut digits = 0u32;
    while let Some(&c) = b.get(i) {
        if !c.is_ascii_digit() {
            break;
        }
        if digits == 19 {
            return Fast::Unsure;
        }
        mantissa = mantissa * 10 + u64::from(c - b'0');
        digits += 1;
        i += 1;
    }
    let mut fraction_digits = 0i32;
    if b.get(i) == Some(&b'.') {
        i += 1;
        while let Some(&c) = b.get(i) {
            if !c.is_ascii_digit() {
                break;
            }
            if digits == 19 {
                return Fast::Unsure;
            }
            mantissa = mantissa * 10 + u64::from(c - b'0');
            digits += 1;
            fraction_digits += 1;
            i += 1;
        }
    }
    if digits == 0 {
        // `NaN`, `+Inf`, `Infinity` and friends, or garbage: let the standard library decide.
        return Fast::Unsure;
    }
    let mut exponent = 0i32;
    if matches!(b.get(i), Some(b'e' | b'E')) {
        i += 1;
        let exponent_negative = match b.get(i) {
            Some(b'-') => {
                i += 1;
                true
            }
            Some(b'+') => {
                i += 1;
                false
            }
            _ => false,
        };
        let start = i;
        while let Some(&c) = b.get(i) {
            if !c.is_ascii_digit() {
                break;
            }
            if i - start == 4 {
                return Fast::Unsure;
            }
            exponent = exponent * 10 + i32::from(c - b'0');
            i += 1;
        }
        if i == start {
            return Fast::NotANumber;
        }
        if exponent_negative {
            exponent = -exponent;
        }
    }
    if i != b.len() {
        return Fast::NotANumber;
    }
    if mantissa > MAX_EXACT_MANTISSA {
        return Fast::Unsure;
    }
    let m = mantissa as f64;
    let e = exponent - fraction_digits;
    let v = if e == 0 {
        m
    } else if (1..=22).contains(&e) {
        m * POW10[e as usize]
    } else if (-22..0).contains(&e) {
        m / POW10[(-e) as usize]
    } else {
        return Fast::Unsure;
    };
    Fast::Value(if negative { -v } else { v })
}

/// Parses a timestamp token into milliseconds: integer milliseconds (text format 0.0.4), or
/// seconds with a fraction or exponent (OpenMetrics), rounded to the millisecond.
pub(super) fn parse_timestamp_ms(token: &str) -> Option<i64> {
    let b = token.as_bytes();
    let digits = b.strip_prefix(b"-").or_else(|| b.strip_prefix(b"+"));
    let digits = digits.unwrap_or(b);
    if !digits.is_empty() && digits.iter().all(u8::is_ascii_digit) {
        return token.parse::<i64>().ok();
    }
    if !token.bytes().any(|c| matches!(c, b'.' | b'e' | b'E')) {
        return None;
    }
    let seconds = match fast_decimal(b) {
        Fast::Value(v) => v,
        Fast::NotANumber => return None,
        Fast::Unsure => token.parse::<f64>().ok()?,
    };
    let ms = (seconds * 1000.0).round();
    // i64 range with margin; also rejects NaN and infinities.
    (ms.abs() < 9.0e18).then_some(ms as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_path_agrees_with_std() {
        for s in [
            "0",
            "0.0",
            "-0.0",
            "14.0",
            "0.9003",
            "1.144722e+06",
            "6.0521304064e+10",
            "1e-05",
            "52840.0",
            "612.347000",
            "3.291705344e+09",
            "+5",
            "1.",
            ".5",
            "-.5e3",
            "123456789012345678",
            "9007199254740993",
            "1.7672580591200001e+09",
            "1e22",
            "1e23",
            "1e-22",
            "1e-23",
            "4.9e-324",
            "1.7976931348623157e308",
        ] {
            let ours = parse_value(s).unwrap_or_else(|| panic!("{s} rejected"));
            let std: f64 = s.parse().unwrap();
            assert_eq!(ours.to_bits(), std.to_bits(), "{s}");
        }
    }

    /// What the fast path made of `s`: its value, or why it gave up.
    fn fast(s: &str) -> Result<f64, &'static str> {
        match fast_decimal(s.as_bytes()) {
            Fast::Value(v) => Ok(v),
            Fast::NotANumber => Err("not a number"),
            Fast::Unsure => Err("unsure"),
        }
    }

    #[test]
    fn the_decimals_exporters_write_take_the_fast_path() {
        // Each of these is answered by the fast path itself, exactly as the standard library
        // would; falling back would give the same value, only slower.
        for s in [
            "0",
            "14",
            "14.0",
            "-14.5",
            "+5",
            "-.5e3",
            "0.9003",
            "612.347000",
            "1.144722e+06",
            "6.0521304064e+10",
            "1e-05",
            "2.5E-3",
            "1E5",
            "1e+0022",
            "1e22",
            "1e-22",
            "9007199254740992",
            "900719925474099.2",
            "123456789012345.6e-3",
            "123e21",
        ] {
            let std: f64 = s.parse().unwrap();
            assert_eq!(fast(s).map(f64::to_bits), Ok(std.to_bits()), "{s}");
        }
        // Past what one rounding covers: 20 digits, a mantissa above 2^53, a power of ten
        // beyond 10^22, a five-digit exponent (even one of small value); and the words.
        for s in [
            "12345678901234567890",
            "1234567890.1234567890",
            "9007199254740993",
            "1e23",
            "1e-23",
            "1e10000",
            "1e-10000",
            "1e00001",
            "2.5e-00001",
            "NaN",
            "+Inf",
            "-Infinity",
            "",
            "-",
            ".",
        ] {
            assert_eq!(fast(s), Err("unsure"), "{s:?}");
        }
        for s in ["1e", "1e+", "1e-x", "1x", "1.2.3", "1e5x", "1.5 ", "1,5"] {
            assert_eq!(fast(s), Err("not a number"), "{s:?}");
        }
        // Long inputs still agree with the standard library through the slow path.
        for s in [
            "123456789012345678901234567890",
            "0.123456789012345678901234567890",
            "1e0000000000000000000005",
        ] {
            let std: f64 = s.parse().unwrap();
            assert_eq!(parse_value(s).map(f64::to_bits), Some(std.to_bits()), "{s}");
        }
    }

    #[test]
    fn words_and_garbage() {
        assert!(parse_value("NaN").unwrap().is_nan());
        assert!(parse_value("nan").unwrap().is_nan());
        assert_eq!(parse_value("+Inf"), Some(f64::INFINITY));
        assert_eq!(parse_value("Inf"), Some(f64::INFINITY));
        assert_eq!(parse_value("-Inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_value("+infinity"), Some(f64::INFINITY));
        for bad in [
            "", "-", "+", ".", "1e", "1e+", "abc", "1_000", "0x10", "1.2.3", "--1", "1e5x",
        ] {
            assert_eq!(parse_value(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn timestamps() {
        assert_eq!(parse_timestamp_ms("1712345678901"), Some(1_712_345_678_901));
        assert_eq!(parse_timestamp_ms("-5"), Some(-5));
        assert_eq!(
            parse_timestamp_ms("1520879607.789"),
            Some(1_520_879_607_789)
        );
        assert_eq!(parse_timestamp_ms("1.5e9"), Some(1_500_000_000_000));
        assert_eq!(parse_timestamp_ms("99999999999999999999"), None);
        assert_eq!(parse_timestamp_ms("NaN"), None);
        assert_eq!(parse_timestamp_ms("1e300"), None);
        assert_eq!(parse_timestamp_ms("12a"), None);
        assert_eq!(parse_timestamp_ms("-"), None);
        // Seconds are kept to 9e18 ms, short of i64::MAX, and refused from there on.
        assert_eq!(
            parse_timestamp_ms("8.999e15"),
            Some(8_999_000_000_000_000_000)
        );
        assert_eq!(
            parse_timestamp_ms("-8.999e15"),
            Some(-8_999_000_000_000_000_000)
        );
        assert_eq!(parse_timestamp_ms("9e15"), None);
        assert_eq!(parse_timestamp_ms("-9e15"), None);
    }
}
