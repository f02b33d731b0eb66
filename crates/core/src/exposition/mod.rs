//! Prometheus text exposition format parser (text format 0.0.4, tolerant of OpenMetrics text).
//!
//! Owns: turning a scraped body into borrowed samples plus family metadata, zero-copy where the
//! text allows. Does not own: what the samples mean (see [`crate::signals`]) or fetching
//! (the service crate's `scrape` module). Pure: no I/O.
//!
//! # What is accepted
//!
//! - Metric names `[a-zA-Z_:][a-zA-Z0-9_:]*` (so `vllm:num_requests_waiting` is fine), label
//!   names `[a-zA-Z_][a-zA-Z0-9_]*`, label values with the escapes `\\`, `\"` and `\n`.
//! - `# HELP`, `# TYPE` and `# UNIT` in any order, missing, or repeated (the last one wins);
//!   any other comment is ignored.
//! - Empty label sets `{}`, a trailing comma in a label set, spaces and tabs between tokens.
//! - Values as Go and Python clients write them: `0.0`, `14`, `1.144722e+06`, `NaN`, `+Inf`,
//!   `-Inf`, `Inf` (case-insensitive, like Go's `strconv.ParseFloat`).
//! - An optional timestamp: integer milliseconds (text format 0.0.4), or OpenMetrics-style
//!   fractional seconds, which are converted to milliseconds.
//! - Blank lines, CRLF line endings, a leading byte-order mark.
//! - OpenMetrics text: `# EOF` ends the body (anything after it is ignored), exemplars after
//!   ` # ` are skipped, `_created` samples are kept as ordinary samples, and counter families
//!   may be declared without the `_total` their samples carry (see [`Exposition::family_of`]).
//!
//! # Errors
//!
//! The first malformed line fails the whole body with a [`ParseError`] carrying the 1-based
//! line and column and the class of the problem, for example
//! `line 7, column 19: expected '=' after a label name, found a character not allowed there`.
//! Errors never quote the body (it belongs to whoever runs the target, and errors travel
//! further than bodies). No input panics.
//!
//! # Limits
//!
//! [`parse_with_limits`] stops at the first sample, label set or label past the caller's
//! [`Limits`] with [`ParseErrorKind::LimitExceeded`], so a hostile body costs at most the limits
//! in memory, whatever its size.

use std::borrow::Cow;

mod error;
mod number;
mod parser;
mod scan;

pub use error::{Found, Limit, ParseError, ParseErrorKind};

/// Caps on what one body may hold, in the style of Prometheus's scrape config
/// (`sample_limit`, `label_limit`, `label_name_length_limit`, `label_value_length_limit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Samples in the body.
    pub max_samples: usize,
    /// Labels on one sample.
    pub max_labels_per_sample: usize,
    /// Bytes of one label name.
    pub max_label_name_bytes: usize,
    /// Bytes of one label value (after unescaping).
    pub max_label_value_bytes: usize,
}

impl Limits {
    /// No limits.
    pub const NONE: Self = Self {
        max_samples: usize::MAX,
        max_labels_per_sample: usize::MAX,
        max_label_name_bytes: usize::MAX,
        max_label_value_bytes: usize::MAX,
    };
}

impl Default for Limits {
    /// [`Limits::NONE`].
    fn default() -> Self {
        Self::NONE
    }
}

/// The declared type of a metric family (`# TYPE`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricType {
    /// A monotonically increasing counter.
    Counter,
    /// A gauge.
    Gauge,
    /// A histogram (`_bucket`, `_sum`, `_count` samples).
    Histogram,
    /// A summary (`{quantile=...}`, `_sum`, `_count`).
    Summary,
    /// No type declared, or `untyped`/`unknown`.
    Untyped,
    /// OpenMetrics `info`.
    Info,
    /// OpenMetrics `stateset`.
    StateSet,
    /// OpenMetrics `gaugehistogram`.
    GaugeHistogram,
}

impl MetricType {
    /// Reads a `# TYPE` token (case-insensitive); `None` for an unknown type.
    pub fn from_token(token: &str) -> Option<Self> {
        const TYPES: [(&str, MetricType); 9] = [
            ("counter", MetricType::Counter),
            ("gauge", MetricType::Gauge),
            ("histogram", MetricType::Histogram),
            ("summary", MetricType::Summary),
            ("untyped", MetricType::Untyped),
            ("unknown", MetricType::Untyped),
            ("info", MetricType::Info),
            ("stateset", MetricType::StateSet),
            ("gaugehistogram", MetricType::GaugeHistogram),
        ];
        TYPES
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(token))
            .map(|&(_, t)| t)
    }

    /// Sample-name suffixes a family of this type may add to the family name.
    fn suffixes(self) -> &'static [&'static str] {
        match self {
            MetricType::Counter => &["_total", "_created"],
            MetricType::Histogram => &["_bucket", "_sum", "_count", "_created"],
            MetricType::Summary => &["_sum", "_count", "_created"],
            MetricType::GaugeHistogram => &["_bucket", "_gsum", "_gcount"],
            MetricType::Info => &["_info"],
            MetricType::Gauge | MetricType::Untyped | MetricType::StateSet => &[],
        }
    }
}

/// One label pair; the value is borrowed unless it contained escapes.
#[derive(Debug, Clone, PartialEq)]
pub struct Label<'a> {
    /// Label name.
    pub name: &'a str,
    /// Label value, unescaped.
    pub value: Cow<'a, str>,
}

/// A sample's labels: up to four inline, more on the heap.
pub type Labels<'a> = smallvec::SmallVec<[Label<'a>; 4]>;

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    /// Full sample name as written (for histograms this includes `_bucket`, `_sum`, `_count`).
    pub name: &'a str,
    /// Labels in the order written. vLLM's series carry 2-4 labels: up to four live inline,
    /// so parsing a sample allocates nothing for them (a 5,000-pod scaler parses a million
    /// samples a second).
    pub labels: Labels<'a>,
    /// The value (`NaN`, `+Inf`, `-Inf` allowed).
    pub value: f64,
    /// Optional timestamp in milliseconds.
    pub timestamp_ms: Option<i64>,
}

impl<'a> Sample<'a> {
    /// The value of label `name`, if present.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|l| l.name == name)
            .map(|l| l.value.as_ref())
    }
}

/// Metadata of one family from `# TYPE` / `# HELP` / `# UNIT`.
#[derive(Debug, Clone, PartialEq)]
pub struct Family<'a> {
    /// Family name as declared.
    pub name: &'a str,
    /// Declared type ([`MetricType::Untyped`] when only `# HELP` or `# UNIT` was given).
    pub metric_type: MetricType,
    /// Help text, if any (unescaped).
    pub help: Option<Cow<'a, str>>,
    /// OpenMetrics `# UNIT`, if any.
    pub unit: Option<&'a str>,
}

/// A parsed body.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition<'a> {
    /// Every sample, in body order.
    pub samples: Vec<Sample<'a>>,
    /// Every declared family, once each, in the order first declared.
    pub families: Vec<Family<'a>>,
}

impl<'a> Exposition<'a> {
    /// The declared type of the family `family`, if declared.
    pub fn metric_type(&self, family: &str) -> Option<MetricType> {
        self.family(family).map(|f| f.metric_type)
    }

    /// The family declared with exactly this name.
    pub fn family(&self, name: &str) -> Option<&Family<'a>> {
        self.families.iter().find(|f| f.name == name)
    }

    /// The family a sample name belongs to: the family declared with exactly that name, else
    /// the family whose type allows the name's suffix (`x_total` and `x_created` of counter `x`,
    /// `x_bucket`/`x_sum`/`x_count` of histogram `x`, ...).
    ///
    /// Text format 0.0.4 from Python declares each `_created` series as its own gauge family, so
    /// exact matches win over suffix matches.
    pub fn family_of(&self, sample_name: &str) -> Option<&Family<'a>> {
        if let Some(f) = self.family(sample_name) {
            return Some(f);
        }
        self.families.iter().find(|f| {
            sample_name
                .strip_prefix(f.name)
                .is_some_and(|suffix| f.metric_type.suffixes().contains(&suffix))
        })
    }

    /// Every sample named exactly `name`, in body order.
    pub fn samples_named<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s Sample<'a>> + 's {
        self.samples.iter().filter(move |s| s.name == name)
    }
}

/// Parses a text-format body.
pub fn parse(body: &str) -> Result<Exposition<'_>, ParseError> {
    parser::parse(body, Limits::NONE)
}

/// Parses a text-format body, failing at the first sample, label set or label past `limits`.
pub fn parse_with_limits<'a>(body: &'a str, limits: &Limits) -> Result<Exposition<'a>, ParseError> {
    parser::parse(body, *limits)
}

/// Parses a body given as bytes; a body that is not UTF-8 fails with
/// [`ParseErrorKind::InvalidUtf8`] on the line holding the first bad byte.
pub fn parse_bytes(body: &[u8]) -> Result<Exposition<'_>, ParseError> {
    match std::str::from_utf8(body) {
        Ok(text) => parse(text),
        Err(e) => {
            let valid = body.get(..e.valid_up_to()).unwrap_or_default();
            let line_start = valid.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            Err(ParseError {
                line: 1 + valid.iter().filter(|&&b| b == b'\n').count(),
                column: 1 + e.valid_up_to() - line_start,
                kind: ParseErrorKind::InvalidUtf8,
            })
        }
    }
}
