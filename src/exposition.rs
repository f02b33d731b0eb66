//! Prometheus text exposition format parser (text format 0.0.4, tolerant of OpenMetrics text).
//!
//! Owns: turning a scraped body into borrowed samples plus family metadata, zero-copy where the
//! text allows. Does not own: what the samples mean (see [`crate::signals`]) or fetching
//! (see [`crate::scrape`]). Pure: no I/O.
//!
//! INTERFACE STUB: the types and signatures below are the contract other modules build on.

use std::borrow::Cow;

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

/// One label pair; the value is borrowed unless it contained escapes.
#[derive(Debug, Clone, PartialEq)]
pub struct Label<'a> {
    /// Label name.
    pub name: &'a str,
    /// Label value, unescaped.
    pub value: Cow<'a, str>,
}

/// One sample line.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample<'a> {
    /// Full sample name as written (for histograms this includes `_bucket`, `_sum`, `_count`).
    pub name: &'a str,
    /// Labels in the order written.
    pub labels: Vec<Label<'a>>,
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
    /// Declared type.
    pub metric_type: MetricType,
    /// Help text, if any (unescaped).
    pub help: Option<Cow<'a, str>>,
}

/// A parsed body.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Exposition<'a> {
    /// Every sample, in body order.
    pub samples: Vec<Sample<'a>>,
    /// Every declared family, in body order.
    pub families: Vec<Family<'a>>,
}

impl<'a> Exposition<'a> {
    /// The declared type of the family `family`, if declared.
    pub fn metric_type(&self, family: &str) -> Option<MetricType> {
        self.families
            .iter()
            .find(|f| f.name == family)
            .map(|f| f.metric_type)
    }
}

/// What went wrong on a line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {kind}")]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// What was expected there.
    pub kind: ParseErrorKind,
}

/// The kinds of parse failure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseErrorKind {
    /// A free-form description of what was expected and what was found.
    #[error("{0}")]
    Invalid(String),
}

/// Parses a text-format body.
pub fn parse(body: &str) -> Result<Exposition<'_>, ParseError> {
    let _ = body;
    Err(ParseError {
        line: 0,
        kind: ParseErrorKind::Invalid("parser not implemented yet".into()),
    })
}
