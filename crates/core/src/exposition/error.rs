//! Parse errors: the line and what was expected versus found.

/// What went wrong on a line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {kind}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What was expected there.
    pub kind: ParseErrorKind,
}

/// The kinds of parse failure. Every `String` in here is clipped to a readable length, so an
/// error about a huge garbage line stays small.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseErrorKind {
    /// A free-form description of what was expected and what was found.
    #[error("{0}")]
    Invalid(String),
    /// The grammar required `expected` here but the line had `found` (a quoted character such
    /// as `'"'`, or `end of line`).
    #[error("expected {expected}, found {found}")]
    Unexpected {
        /// What the grammar required, e.g. `'=' after label name "model_name"`.
        expected: String,
        /// What was there instead.
        found: String,
    },
    /// A sample value that is not a number.
    #[error(
        "invalid value {value:?} for metric {metric:?}: expected a number such as 1, 0.25, \
         1.5e+06, NaN, +Inf or -Inf"
    )]
    InvalidValue {
        /// The sample name.
        metric: String,
        /// The offending token.
        value: String,
    },
    /// A timestamp that is neither integer milliseconds nor finite seconds.
    #[error(
        "invalid timestamp {value:?} for metric {metric:?}: expected integer milliseconds \
         since the unix epoch"
    )]
    InvalidTimestamp {
        /// The sample name.
        metric: String,
        /// The offending token.
        value: String,
    },
    /// A backslash in a label value followed by something other than `\`, `"` or `n`.
    #[error(
        "invalid escape sequence {escape:?} in the value of label {label:?}: only \\\\, \\\" \
         and \\n are allowed"
    )]
    InvalidEscape {
        /// The label name.
        label: String,
        /// The backslash and the character after it (or just the backslash at end of line).
        escape: String,
    },
    /// The same label name twice in one label set.
    #[error("duplicate label {label:?} on metric {metric:?}")]
    DuplicateLabel {
        /// The sample name.
        metric: String,
        /// The repeated label name.
        label: String,
    },
    /// A `# TYPE` line naming an unknown type.
    #[error(
        "unknown metric type {found:?} for {metric:?}: expected counter, gauge, histogram, \
         summary, untyped, unknown, info, stateset or gaugehistogram"
    )]
    UnknownType {
        /// The family name.
        metric: String,
        /// The type token as written.
        found: String,
    },
    /// The body is not UTF-8 (from [`super::parse_bytes`]).
    #[error("invalid UTF-8 at byte {column} of the line: the body must be UTF-8 text")]
    InvalidUtf8 {
        /// 1-based byte offset of the first invalid byte within its line.
        column: usize,
    },
}

/// Longest excerpt of input quoted in an error.
const CLIP_CHARS: usize = 64;

/// `s` owned, cut to [`CLIP_CHARS`] characters with a trailing `...` when longer.
pub(super) fn clip(s: &str) -> String {
    match s.char_indices().nth(CLIP_CHARS) {
        None => s.to_owned(),
        Some((cut, _)) => format!("{}...", &s[..cut]),
    }
}

/// Describes what is at byte `pos` of `line`: `end of line` or a quoted character.
pub(super) fn found_at(line: &str, pos: usize) -> String {
    match line.get(pos..).and_then(|rest| rest.chars().next()) {
        None if pos >= line.len() => "end of line".to_owned(),
        None => "a byte inside a multi-byte character".to_owned(),
        Some(c) => format!("{c:?}"),
    }
}

/// An [`ParseErrorKind::Unexpected`] for byte `pos` of `line`.
pub(super) fn unexpected(expected: impl Into<String>, line: &str, pos: usize) -> ParseErrorKind {
    ParseErrorKind::Unexpected {
        expected: expected.into(),
        found: found_at(line, pos),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn found_describes_characters_and_end_of_line() {
        assert_eq!(found_at("a\"b", 1), "'\"'");
        assert_eq!(found_at("a\tb", 1), "'\\t'");
        assert_eq!(found_at("ab", 2), "end of line");
        assert_eq!(found_at("é", 1), "a byte inside a multi-byte character");
    }

    #[test]
    fn clip_keeps_short_and_cuts_long() {
        assert_eq!(clip("abc"), "abc");
        let long = "é".repeat(100);
        assert_eq!(clip(&long), format!("{}...", "é".repeat(64)));
    }
}
