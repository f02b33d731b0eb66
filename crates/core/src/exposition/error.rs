//! Parse errors: the line, the column and the class of the problem.
//!
//! An error never quotes the body: the body belongs to whoever runs the target, and the error
//! text travels further (to KEDA's events, `/debug`, the log) than the body would. The line and
//! column point at the spot, so whoever may read the body can look there.

/// What went wrong, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {kind}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// 1-based byte offset within the line of the spot the error is about.
    pub column: usize,
    /// The class of the problem.
    pub kind: ParseErrorKind,
}

/// What was there instead of what the grammar required.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// The line ended.
    EndOfLine,
    /// A character that is not allowed there (at the error's column).
    Character,
}

impl std::fmt::Display for Found {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::EndOfLine => "end of line",
            Self::Character => "a character not allowed there",
        })
    }
}

/// A limit of [`super::Limits`] that a body exceeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Limit {
    /// [`super::Limits::max_samples`].
    Samples,
    /// [`super::Limits::max_labels_per_sample`].
    LabelsPerSample,
    /// [`super::Limits::max_label_name_bytes`].
    LabelNameLength,
    /// [`super::Limits::max_label_value_bytes`].
    LabelValueLength,
}

impl Limit {
    /// Every limit.
    pub const ALL: [Self; 4] = [
        Self::Samples,
        Self::LabelsPerSample,
        Self::LabelNameLength,
        Self::LabelValueLength,
    ];

    /// What is limited, in words (`samples per target`, ...).
    pub const fn describe(self) -> &'static str {
        match self {
            Self::Samples => "samples per target",
            Self::LabelsPerSample => "labels per sample",
            Self::LabelNameLength => "bytes per label name",
            Self::LabelValueLength => "bytes per label value",
        }
    }

    /// The `limit` label value (`samples`, `labels_per_sample`, ...).
    pub const fn label(self) -> &'static str {
        match self {
            Self::Samples => "samples",
            Self::LabelsPerSample => "labels_per_sample",
            Self::LabelNameLength => "label_name_length",
            Self::LabelValueLength => "label_value_length",
        }
    }
}

/// The classes of parse failure. None carries text from the body.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseErrorKind {
    /// The grammar required `expected` here but the line had something else.
    #[error("expected {expected}, found {found}")]
    Unexpected {
        /// What the grammar required, e.g. `'=' after a label name`.
        expected: &'static str,
        /// What was there instead.
        found: Found,
    },
    /// A sample value that is not a number.
    #[error(
        "the sample value is not a number: expected one such as 1, 0.25, 1.5e+06, NaN, +Inf or -Inf"
    )]
    InvalidValue,
    /// A timestamp that is neither integer milliseconds nor finite seconds.
    #[error("the timestamp is not a number: expected integer milliseconds since the unix epoch")]
    InvalidTimestamp,
    /// A backslash in a label value followed by something other than `\`, `"` or `n`.
    #[error("invalid escape sequence in a label value: only \\\\, \\\" and \\n are allowed")]
    InvalidEscape,
    /// The same label name twice in one label set.
    #[error("a label name appears twice in one label set")]
    DuplicateLabel,
    /// A `# TYPE` line naming an unknown type.
    #[error(
        "unknown metric type in # TYPE: expected counter, gauge, histogram, summary, untyped, \
         unknown, info, stateset or gaugehistogram"
    )]
    UnknownType,
    /// The body is not UTF-8 (from [`super::parse_bytes`]).
    #[error("invalid UTF-8: the body must be UTF-8 text")]
    InvalidUtf8,
    /// The body exceeds one of the caller's [`super::Limits`].
    #[error("more than {max} {}", limit.describe())]
    LimitExceeded {
        /// Which limit.
        limit: Limit,
        /// Its value.
        max: usize,
    },
}

/// An [`ParseErrorKind::Unexpected`] for byte `pos` of `line`.
pub(super) fn unexpected(expected: &'static str, line: &str, pos: usize) -> ParseErrorKind {
    ParseErrorKind::Unexpected {
        expected,
        found: if pos >= line.len() {
            Found::EndOfLine
        } else {
            Found::Character
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn found_is_end_of_line_or_a_character() {
        let kind = unexpected("x", "ab", 2);
        assert_eq!(kind.to_string(), "expected x, found end of line");
        let kind = unexpected("x", "ab", 1);
        assert_eq!(
            kind.to_string(),
            "expected x, found a character not allowed there"
        );
    }

    #[test]
    fn a_limit_error_names_the_limit_in_words() {
        let messages: Vec<String> = Limit::ALL
            .iter()
            .map(|&limit| ParseErrorKind::LimitExceeded { limit, max: 7 }.to_string())
            .collect();
        assert_eq!(
            messages,
            [
                "more than 7 samples per target",
                "more than 7 labels per sample",
                "more than 7 bytes per label name",
                "more than 7 bytes per label value",
            ]
        );
        let labels: Vec<&str> = Limit::ALL.iter().map(|l| l.label()).collect();
        assert_eq!(
            labels,
            [
                "samples",
                "labels_per_sample",
                "label_name_length",
                "label_value_length"
            ]
        );
    }

    #[test]
    fn limits_have_distinct_labels() {
        let labels: std::collections::HashSet<&str> =
            Limit::ALL.iter().map(|l| l.label()).collect();
        assert_eq!(labels.len(), Limit::ALL.len());
    }
}
