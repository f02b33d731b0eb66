//! The scrape failure taxonomy: one variant per way a target can fail, each mapped to the
//! `result` label of `vllm_keda_scaler_scrapes_total` and each message naming the target URL
//! and, where there is one, the fix.

use std::time::Duration;

/// The `result` label of one scrape: `ok`, or which way it failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScrapeResult {
    /// Fetched (and, for callers that parse, parsed).
    Ok,
    /// [`ScrapeError::Timeout`].
    Timeout,
    /// [`ScrapeError::InvalidTarget`], [`ScrapeError::Connect`] or [`ScrapeError::Transport`].
    ConnectError,
    /// [`ScrapeError::HttpStatus`].
    HttpStatus,
    /// [`ScrapeError::TooLarge`].
    TooLarge,
    /// [`ScrapeError::Decode`].
    DecodeError,
    /// [`ScrapeError::Parse`].
    ParseError,
    /// [`ScrapeError::Refused`].
    Refused,
}

impl ScrapeResult {
    /// Every result, `ok` first.
    pub const ALL: [Self; 8] = [
        Self::Ok,
        Self::Timeout,
        Self::ConnectError,
        Self::HttpStatus,
        Self::TooLarge,
        Self::DecodeError,
        Self::ParseError,
        Self::Refused,
    ];

    /// The label value.
    pub const fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Timeout => "timeout",
            Self::ConnectError => "connect_error",
            Self::HttpStatus => "http_status",
            Self::TooLarge => "too_large",
            Self::DecodeError => "decode_error",
            Self::ParseError => "parse_error",
            Self::Refused => "refused",
        }
    }
}

/// Every value [`ScrapeError::result_label`] and [`super::ScrapeOutcome::result_label`] can
/// return ([`ScrapeResult::ALL`]'s labels), `ok` first, for pre-registering or removing the
/// `result` label of a scrape counter.
pub const RESULT_LABELS: [&str; ScrapeResult::ALL.len()] = {
    let mut labels = [""; ScrapeResult::ALL.len()];
    let mut i = 0;
    while i < labels.len() {
        labels[i] = ScrapeResult::ALL[i].label();
        i += 1;
    }
    labels
};

/// The one text of [`ScrapeError::Connect`] and [`ScrapeError::Transport`]: a closed port, a
/// reset and a port that does not speak HTTP read the same, so answers cannot map a network.
pub const CONNECTION_FAILED: &str = "cannot connect, or the connection failed before a complete \
     HTTP response; check that the pod is running and that the address and port are right (the \
     scaler's debug log has the cause)";

/// Why a scrape failed. A failed target is "unknown", never "zero load": callers drop it from
/// the healthy set rather than reading anything into it.
///
/// No message carries bytes the target sent (its body or headers): these texts reach KEDA (the
/// `Unavailable` answer ends up in events the ScaledObject's owner reads), `/debug` and the
/// log. Connection failures are one class (`cannot connect`, or `failed during the exchange`),
/// so the answers cannot map which ports are open; the cause is logged at debug level only.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScrapeError {
    /// The whole request (connect, headers and body) did not finish within the timeout.
    #[error(
        "scraping {url}: no complete response within {timeout:?}; the pod may be overloaded or \
         hung (check it), or raise the scrape timeout if it is only slow"
    )]
    Timeout {
        /// The target.
        url: String,
        /// The per-target timeout that ran out.
        timeout: Duration,
    },
    /// The target is not a URL this scraper can fetch (bad syntax, or not `http://`).
    #[error("scraping {url}: {message}")]
    InvalidTarget {
        /// The target as given.
        url: String,
        /// What is wrong and what is expected.
        message: String,
    },
    /// No connection could be made (refused, unreachable, DNS failure of the target's host).
    /// The cause is in the scaler's debug log only.
    #[error("scraping {url}: {CONNECTION_FAILED}")]
    Connect {
        /// The target.
        url: String,
    },
    /// The connection broke or the HTTP exchange was malformed after connecting (for example
    /// a reset in the middle of the body). The cause is in the scaler's debug log only.
    #[error("scraping {url}: {CONNECTION_FAILED}")]
    Transport {
        /// The target.
        url: String,
    },
    /// The target broke one of the scrape limits other than the body size: a per-body limit
    /// of the parser (samples, labels per sample, label name or value length), the number of
    /// targets of one ScaledObject, or no scrape slot free within the timeout. Counted as
    /// `too_large`, except the scrape slots (`timeout`).
    #[error("scraping {url}: {what}; {}", limit.fix())]
    LimitExceeded {
        /// The target.
        url: String,
        /// Which limit.
        limit: super::ScrapeLimit,
        /// What exceeded it (never the body's text).
        what: String,
    },
    /// The target policy refused every address of the target (see [`super::TargetPolicy`]).
    #[error("scraping {url}: {refusal}")]
    Refused {
        /// The target.
        url: String,
        /// The rule that refused it and the flag that would allow it.
        refusal: super::Refusal,
    },
    /// The target answered with a non-2xx status.
    #[error("scraping {url}: http status {status}; {}", status_hint(*.status))]
    HttpStatus {
        /// The target.
        url: String,
        /// The HTTP status code.
        status: u16,
    },
    /// The (decompressed) body is larger than the cap; reading stopped at the cap.
    #[error(
        "scraping {url}: body larger than the {limit_bytes} byte limit (after decompression); \
         raise --scrape-max-body-bytes, or reduce the target's series (labels, LoRA adapters)"
    )]
    TooLarge {
        /// The target.
        url: String,
        /// The cap that was exceeded.
        limit_bytes: usize,
    },
    /// The body could not be decoded: corrupt gzip, or not UTF-8.
    #[error("scraping {url}: {message}")]
    Decode {
        /// The target.
        url: String,
        /// What could not be decoded, and where.
        message: String,
    },
    /// The body was fetched but did not parse as the Prometheus text format. Produced by
    /// callers (the scraper never parses); exists so every scrape result has one label.
    #[error("scraping {url}: body is not in the prometheus text format: {message}")]
    Parse {
        /// The target.
        url: String,
        /// The parser's error (line and what was expected).
        message: String,
    },
}

impl ScrapeError {
    /// How this failure counts in `vllm_keda_scaler_scrapes_total` (bad targets and broken
    /// connections count as `connect_error`; never [`ScrapeResult::Ok`]).
    pub fn result(&self) -> ScrapeResult {
        match self {
            Self::Timeout { .. } => ScrapeResult::Timeout,
            Self::InvalidTarget { .. } | Self::Connect { .. } | Self::Transport { .. } => {
                ScrapeResult::ConnectError
            }
            Self::HttpStatus { .. } => ScrapeResult::HttpStatus,
            Self::TooLarge { .. } => ScrapeResult::TooLarge,
            Self::Decode { .. } => ScrapeResult::DecodeError,
            Self::Parse { .. } => ScrapeResult::ParseError,
            Self::Refused { .. } => ScrapeResult::Refused,
            Self::LimitExceeded {
                limit: super::ScrapeLimit::ConcurrentScrapes,
                ..
            } => ScrapeResult::Timeout,
            Self::LimitExceeded { .. } => ScrapeResult::TooLarge,
        }
    }

    /// The `result` label of `vllm_keda_scaler_scrapes_total` for this failure:
    /// [`ScrapeError::result`]'s label.
    pub fn result_label(&self) -> &'static str {
        self.result().label()
    }

    /// The target this error is about.
    pub fn url(&self) -> &str {
        match self {
            Self::Timeout { url, .. }
            | Self::InvalidTarget { url, .. }
            | Self::Connect { url, .. }
            | Self::Transport { url, .. }
            | Self::HttpStatus { url, .. }
            | Self::TooLarge { url, .. }
            | Self::Decode { url, .. }
            | Self::Parse { url, .. }
            | Self::Refused { url, .. }
            | Self::LimitExceeded { url, .. } => url,
        }
    }

    /// A parse failure of `url`'s body, for callers that parse what the scraper returned.
    pub fn parse(url: impl Into<String>, error: impl std::fmt::Display) -> Self {
        Self::Parse {
            url: url.into(),
            message: error.to_string(),
        }
    }

    /// The parser's failure on `url`'s body: a [`Self::LimitExceeded`] when the body broke one
    /// of the parser's limits, else a [`Self::Parse`].
    pub fn from_parse(
        url: impl Into<String>,
        error: &vllm_keda_core::exposition::ParseError,
    ) -> Self {
        use vllm_keda_core::exposition::ParseErrorKind;
        match error.kind {
            ParseErrorKind::LimitExceeded { limit, max } => Self::LimitExceeded {
                url: url.into(),
                limit: super::ScrapeLimit::Body(limit),
                what: format!(
                    "the body holds more than {max} {} (line {}, column {})",
                    limit.describe(),
                    error.line,
                    error.column
                ),
            },
            _ => Self::parse(url, error),
        }
    }

    /// The `limit` label of `vllm_keda_scaler_limit_exceeded_total` when this failure is a
    /// limit (the body size or another [`super::ScrapeLimit`]).
    pub fn limit(&self) -> Option<super::ScrapeLimit> {
        match self {
            Self::TooLarge { .. } => Some(super::ScrapeLimit::BodyBytes),
            Self::LimitExceeded { limit, .. } => Some(*limit),
            _ => None,
        }
    }
}

/// The likely fix for an HTTP status.
fn status_hint(status: u16) -> &'static str {
    match status {
        404 => "check the metrics path (vLLM serves /metrics) and the port",
        401 | 403 => {
            "the endpoint wants credentials, which the scaler does not send; expose \
                      /metrics without auth"
        }
        429 | 503 => "the target is overloaded or not ready yet",
        500..=599 => "the target failed to render its metrics; check its logs",
        300..=399 => "redirects are not followed; point the scaler at the final URL",
        _ => "the target must answer 200 with the metrics text",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_is_listed() {
        let url = "http://a:1/metrics".to_string();
        let all = [
            ScrapeError::Timeout {
                url: url.clone(),
                timeout: Duration::from_secs(1),
            },
            ScrapeError::InvalidTarget {
                url: url.clone(),
                message: "x".into(),
            },
            ScrapeError::Connect { url: url.clone() },
            ScrapeError::Transport { url: url.clone() },
            ScrapeError::Refused {
                url: url.clone(),
                refusal: super::super::Refusal {
                    address: "127.0.0.1:1".parse().unwrap(),
                    rule: "r".into(),
                    fix: "f".into(),
                },
            },
            ScrapeError::HttpStatus {
                url: url.clone(),
                status: 500,
            },
            ScrapeError::TooLarge {
                url: url.clone(),
                limit_bytes: 10,
            },
            ScrapeError::Decode {
                url: url.clone(),
                message: "x".into(),
            },
            ScrapeError::parse(url.clone(), "line 3: expected a value"),
        ];
        for e in &all {
            assert!(RESULT_LABELS[1..].contains(&e.result_label()), "{e:?}");
            assert_eq!(e.url(), url);
            let text = e.to_string();
            assert!(text.contains(&url), "{text}");
            assert!(text.starts_with("scraping "), "{text}");
        }
    }

    #[test]
    fn every_result_is_listed_once_in_order() {
        // Exhaustive: a new result fails to compile here until it has its place in `ALL`.
        let position = |r: ScrapeResult| match r {
            ScrapeResult::Ok => 0,
            ScrapeResult::Timeout => 1,
            ScrapeResult::ConnectError => 2,
            ScrapeResult::HttpStatus => 3,
            ScrapeResult::TooLarge => 4,
            ScrapeResult::DecodeError => 5,
            ScrapeResult::ParseError => 6,
            ScrapeResult::Refused => 7,
        };
        for (i, result) in ScrapeResult::ALL.into_iter().enumerate() {
            assert_eq!(position(result), i, "{result:?}");
            assert_eq!(RESULT_LABELS[i], result.label());
        }
        assert_eq!(
            RESULT_LABELS,
            [
                "ok",
                "timeout",
                "connect_error",
                "http_status",
                "too_large",
                "decode_error",
                "parse_error",
                "refused"
            ]
        );
    }

    #[test]
    fn status_messages_say_the_fix() {
        let e = ScrapeError::HttpStatus {
            url: "http://a:1/metric".into(),
            status: 404,
        };
        assert_eq!(
            e.to_string(),
            "scraping http://a:1/metric: http status 404; check the metrics path (vLLM serves \
             /metrics) and the port"
        );
    }
}
