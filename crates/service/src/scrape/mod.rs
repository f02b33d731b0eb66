//! Fetching `/metrics` bodies: concurrent, per-target timeout, size cap, gzip.
//!
//! Owns: HTTP to the targets (one pooled client), the body size cap and the failure taxonomy
//! ([`ScrapeError`], whose [`ScrapeError::result_label`] is the `result` label of the scrape
//! counter). Does not own: which targets to scrape ([`crate::discovery`]), parsing
//! ([`vllm_keda_core::exposition`]) or what the numbers mean.
//!
//! One slow or broken target never blocks or poisons the others: [`Scraper::scrape_all`] runs
//! every target as its own task with its own timeout and reports each result separately.
//!
//! Bodies are read chunk by chunk after gzip decompression, and reading stops as soon as the
//! decompressed size would pass [`ScrapeSettings::max_body_bytes`], so an endless body or a
//! gzip bomb costs at most the cap in memory.

mod error;

pub use error::{RESULT_LABELS, ScrapeError, ScrapeResult};

use std::error::Error as _;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;

/// What the scraper asks for: the Prometheus text format 0.0.4, any other `text/plain` as a
/// fallback (OpenMetrics is not requested; the parser tolerates it if a target sends it).
pub const ACCEPT_HEADER: &str = "text/plain;version=0.0.4;q=1.0,text/plain;q=0.9,*/*;q=0.1";

/// Limits for one scrape.
#[derive(Debug, Clone, PartialEq)]
pub struct ScrapeSettings {
    /// Whole-request timeout per target (connect, headers and the whole body).
    pub timeout: Duration,
    /// Largest (decompressed) body accepted.
    pub max_body_bytes: usize,
}

impl Default for ScrapeSettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(2),
            max_body_bytes: 16 * 1024 * 1024,
        }
    }
}

/// One target's result from [`Scraper::scrape_all`].
#[derive(Debug, Clone, PartialEq)]
pub struct ScrapeOutcome {
    /// The target, as passed in.
    pub url: String,
    /// How long the scrape took (at most about the timeout).
    pub duration: Duration,
    /// The body as text, or why there is none.
    pub result: Result<String, ScrapeError>,
}

impl ScrapeOutcome {
    /// `ok`, or the error's [`ScrapeError::result_label`].
    pub fn result_label(&self) -> &'static str {
        match &self.result {
            Ok(_) => ScrapeResult::Ok.label(),
            Err(e) => e.result_label(),
        }
    }
}

/// A reusable scraper: one connection pool shared by every target. Cheap to clone (clones share
/// the pool).
#[derive(Debug, Clone)]
pub struct Scraper {
    settings: ScrapeSettings,
    /// The pooled client, or why it could not be built (reported by every scrape).
    client: Result<reqwest::Client, String>,
}

impl Scraper {
    /// A scraper with these limits.
    pub fn new(settings: ScrapeSettings) -> Self {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert(
            reqwest::header::ACCEPT,
            reqwest::header::HeaderValue::from_static(ACCEPT_HEADER),
        );
        let client = reqwest::Client::builder()
            .default_headers(headers)
            .user_agent(concat!("vllm-keda-scaler/", env!("CARGO_PKG_VERSION")))
            // Sets `Accept-Encoding: gzip` and decompresses as the body streams in.
            .gzip(true)
            .connect_timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(2)
            .tcp_nodelay(true)
            .build()
            // Only a TLS backend or system proxy config can fail to load, and this client
            // uses neither; should it happen anyway, every scrape says so instead of a panic.
            .map_err(|e| format!("the http client could not be built: {e}"));
        Self { settings, client }
    }

    /// The limits this scraper applies.
    pub fn settings(&self) -> &ScrapeSettings {
        &self.settings
    }

    /// Fetches one body as text, within the timeout and the size cap.
    pub async fn scrape(&self, url: &str) -> Result<String, ScrapeError> {
        let timeout = self.settings.timeout;
        match tokio::time::timeout(timeout, self.fetch(url)).await {
            Ok(result) => result,
            Err(_) => Err(ScrapeError::Timeout {
                url: url.to_string(),
                timeout,
            }),
        }
    }

    /// Fetches every URL concurrently, each as its own task with its own timeout; results in
    /// the order of `urls`. Finishes when the slowest target finishes or times out. Dropping
    /// the future cancels every scrape still running.
    pub async fn scrape_all(&self, urls: &[String]) -> Vec<ScrapeOutcome> {
        let mut tasks = JoinSet::new();
        for (index, url) in urls.iter().enumerate() {
            let scraper = self.clone();
            let url = url.clone();
            tasks.spawn(async move {
                let start = Instant::now();
                let result = scraper.scrape(&url).await;
                let outcome = ScrapeOutcome {
                    duration: start.elapsed(),
                    url,
                    result,
                };
                (index, outcome)
            });
        }
        let mut slots: Vec<Option<ScrapeOutcome>> = vec![None; urls.len()];
        while let Some(joined) = tasks.join_next().await {
            // A task only fails to join if it panicked; its slot is filled below.
            if let Ok((index, outcome)) = joined {
                slots[index] = Some(outcome);
            }
        }
        slots
            .into_iter()
            .zip(urls)
            .map(|(slot, url)| {
                slot.unwrap_or_else(|| ScrapeOutcome {
                    url: url.clone(),
                    duration: Duration::ZERO,
                    result: Err(ScrapeError::Transport {
                        url: url.clone(),
                        message: "the scrape task panicked (a bug; please report it)".into(),
                    }),
                })
            })
            .collect()
    }

    /// The request and the capped body read, without the overall timeout.
    async fn fetch(&self, url: &str) -> Result<String, ScrapeError> {
        let parsed = check_target(url)?;
        let client = self.client.as_ref().map_err(|e| ScrapeError::Connect {
            url: url.to_string(),
            message: e.clone(),
        })?;
        let mut response = client
            .get(parsed)
            .send()
            .await
            .map_err(|e| classify(url, e))?;
        let status = response.status();
        if !status.is_success() {
            return Err(ScrapeError::HttpStatus {
                url: url.to_string(),
                status: status.as_u16(),
            });
        }
        // A gzip body is decoded on the fly and loses this header; anything left is an
        // encoding the scraper did not ask for and cannot read.
        if let Some(encoding) = response.headers().get(reqwest::header::CONTENT_ENCODING)
            && !encoding.as_bytes().eq_ignore_ascii_case(b"identity")
        {
            return Err(ScrapeError::Decode {
                url: url.to_string(),
                message: format!(
                    "unsupported content-encoding {:?} (only gzip is accepted); serve the \
                     metrics plain or gzip-compressed",
                    String::from_utf8_lossy(encoding.as_bytes())
                ),
            });
        }
        let cap = self.settings.max_body_bytes;
        let too_large = || ScrapeError::TooLarge {
            url: url.to_string(),
            limit_bytes: cap,
        };
        // Known only for uncompressed bodies (decompression drops the header).
        let declared = response.content_length();
        if declared.is_some_and(|n| n > cap as u64) {
            return Err(too_large());
        }
        let initial = declared.map_or(64 * 1024, |n| n as usize).min(cap);
        let mut body: Vec<u8> = Vec::with_capacity(initial);
        while let Some(chunk) = response.chunk().await.map_err(|e| classify(url, e))? {
            if chunk.len() > cap - body.len() {
                return Err(too_large());
            }
            let needed = body.len() + chunk.len();
            if needed > body.capacity() {
                // Grow by doubling, but never past the cap.
                let target = needed.max(body.capacity() * 2).min(cap);
                body.reserve_exact(target - body.len());
            }
            body.extend_from_slice(&chunk);
        }
        String::from_utf8(body).map_err(|e| ScrapeError::Decode {
            url: url.to_string(),
            message: format!(
                "body is not valid utf-8 at byte {}; the prometheus text format must be utf-8",
                e.utf8_error().valid_up_to()
            ),
        })
    }
}

/// Checks that `url` is an `http://` URL with a host; anything else is a clear error.
fn check_target(url: &str) -> Result<reqwest::Url, ScrapeError> {
    let invalid = |message: String| ScrapeError::InvalidTarget {
        url: url.to_string(),
        message,
    };
    let parsed = reqwest::Url::parse(url).map_err(|e| {
        invalid(format!(
            "not a url ({e}); expected http://host:port/path (use discovery to turn host:port \
             into a url)"
        ))
    })?;
    match parsed.scheme() {
        "http" => {}
        "https" => {
            return Err(invalid(
                "https targets are not supported (this build has no tls); vLLM serves /metrics \
                 over plain http, so use http://"
                    .into(),
            ));
        }
        other => {
            return Err(invalid(format!(
                "unsupported scheme \"{other}\"; expected http://host:port/path"
            )));
        }
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return Err(invalid(
            "the url has no host; expected http://host:port/path".into(),
        ));
    }
    Ok(parsed)
}

/// Sorts a client error into the taxonomy, with a message free of reqwest's url echo.
fn classify(url: &str, error: reqwest::Error) -> ScrapeError {
    let url_owned = url.to_string();
    let chain = error_chain(&error);
    if error.is_timeout() {
        // The client has no timeout of its own; a connect timeout lands here.
        return ScrapeError::Connect {
            url: url_owned,
            message: chain,
        };
    }
    if error.is_connect() {
        return ScrapeError::Connect {
            url: url_owned,
            message: chain,
        };
    }
    if error.is_builder() {
        return ScrapeError::InvalidTarget {
            url: url_owned,
            message: chain,
        };
    }
    if is_decompression_error(&error) {
        return ScrapeError::Decode {
            url: url_owned,
            message: format!("cannot decompress the body ({chain})"),
        };
    }
    ScrapeError::Transport {
        url: url_owned,
        message: chain,
    }
}

/// Whether a body error came from the gzip decoder rather than the connection: the decoder
/// reports corrupt or truncated data as an `io::Error`, while a broken connection carries a
/// hyper error somewhere in the chain (also when it passed through the decoder).
fn is_decompression_error(error: &reqwest::Error) -> bool {
    if !(error.is_decode() || error.is_body()) {
        return false;
    }
    let mut source = error.source();
    let mut saw_io = false;
    while let Some(e) = source {
        if e.downcast_ref::<hyper::Error>().is_some() {
            return false;
        }
        saw_io |= e.downcast_ref::<std::io::Error>().is_some();
        source = e.source();
    }
    saw_io
}

/// `kind: cause: cause` with the url left out (the error message names it once already).
fn error_chain(error: &reqwest::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut top = error.to_string();
    if let Some(u) = error.url() {
        top = top.replace(&format!(" for url ({u})"), "");
    }
    parts.push(top);
    let mut source = error.source();
    while let Some(e) = source {
        let text = e.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = e.source();
    }
    parts.join(": ").to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_must_be_http_urls() {
        assert!(check_target("http://10.0.0.1:8000/metrics").is_ok());
        let cases = [
            ("10.0.0.1:8000", "not a url"),
            ("https://a:1/metrics", "https targets are not supported"),
            ("ftp://a/metrics", "unsupported scheme \"ftp\""),
        ];
        for (input, expected) in cases {
            let e = check_target(input).unwrap_err();
            assert_eq!(e.result_label(), "connect_error");
            let text = e.to_string();
            assert!(text.contains(expected), "{input}: {text}");
            assert!(text.contains(input), "{input}: {text}");
        }
    }

    #[tokio::test]
    async fn scrape_all_of_nothing_is_nothing() {
        let scraper = Scraper::new(ScrapeSettings::default());
        assert!(scraper.scrape_all(&[]).await.is_empty());
    }
}
