//! Fetching `/metrics` bodies: concurrent, per-target timeout, size cap, gzip.
//!
//! Owns: HTTP to the targets (the scraper's own pooled HTTP/1.1 client, `http1`, whose idle
//! connections hold no buffers; reqwest when scrapes must follow the proxy variables), the
//! body size cap and the failure taxonomy
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
mod http1;
mod policy;

pub use error::{CONNECTION_FAILED, RESULT_LABELS, ScrapeError, ScrapeResult};
pub use policy::{
    CONTROL_PLANE_PORTS, Cidr, DEFAULT_RULES, DefaultRule, OwnListener, Refusal, TargetPolicy,
};

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinSet;
use tokio::time::Instant;
pub use vllm_keda_core::exposition::{Limit, Limits};

/// What the scraper asks for: the Prometheus text format 0.0.4, any other `text/plain` as a
/// fallback (OpenMetrics is not requested; the parser tolerates it if a target sends it).
pub const ACCEPT_HEADER: &str = "text/plain;version=0.0.4;q=1.0,text/plain;q=0.9,*/*;q=0.1";

/// The default of [`ScrapeSettings::max_body_bytes`] (`--scrape-max-body-bytes`): 4 MiB. A
/// vLLM body is about 50 KB for one model (`data/fixtures`), and each further model or LoRA
/// adapter adds about as much, so this leaves room for about 80 models per pod while keeping
/// one body's parse well under a core-millisecond per 100 KB and its memory bounded.
pub const DEFAULT_MAX_BODY_BYTES: usize = 4 * 1024 * 1024;

/// The default of [`ScrapeSettings::limits`]: the parser's caps on one body, sized from real
/// vLLM bodies (`data/fixtures`: about 400 samples, at most 15 labels on a sample, label names
/// under 30 bytes and values under 70 bytes for one model) with wide headroom: 50 times the
/// samples (many models or LoRA adapters on one pod), 4 times the labels.
pub const DEFAULT_BODY_LIMITS: Limits = Limits {
    max_samples: 20_000,
    max_labels_per_sample: 64,
    max_label_name_bytes: 256,
    max_label_value_bytes: 4096,
};

/// The default of [`ScrapeSettings::max_targets`] (`--max-targets-per-scaledobject`): a
/// ScaledObject's vLLM or DCGM targets scraped per cycle.
pub const DEFAULT_MAX_TARGETS: usize = 512;

/// The default of `--max-concurrent-scrapes`: scrapes in flight across every ScaledObject.
pub const DEFAULT_MAX_CONCURRENT_SCRAPES: usize = 1024;

/// A scrape limit, as the `limit` label of `vllm_keda_scaler_limit_exceeded_total` and the flag
/// that raises it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScrapeLimit {
    /// [`ScrapeSettings::max_body_bytes`].
    BodyBytes,
    /// One of the parser's [`ScrapeSettings::limits`].
    Body(Limit),
    /// [`ScrapeSettings::max_targets`].
    TargetsPerScaledObject,
    /// [`ScrapeSettings::concurrency`].
    ConcurrentScrapes,
}

impl ScrapeLimit {
    /// The `limit` label.
    pub const fn label(self) -> &'static str {
        match self {
            Self::BodyBytes => "body_bytes",
            Self::Body(limit) => limit.label(),
            Self::TargetsPerScaledObject => "targets_per_scaledobject",
            Self::ConcurrentScrapes => "concurrent_scrapes",
        }
    }

    /// The `serve` flag that sets it.
    pub const fn flag(self) -> &'static str {
        match self {
            Self::BodyBytes => "--scrape-max-body-bytes",
            Self::Body(Limit::Samples) => "--scrape-max-samples",
            Self::Body(Limit::LabelsPerSample) => "--scrape-max-labels-per-sample",
            Self::Body(Limit::LabelNameLength) => "--scrape-max-label-name-bytes",
            Self::Body(Limit::LabelValueLength) => "--scrape-max-label-value-bytes",
            Self::TargetsPerScaledObject => "--max-targets-per-scaledobject",
            Self::ConcurrentScrapes => "--max-concurrent-scrapes",
        }
    }

    /// What to do about it.
    fn fix(self) -> String {
        match self {
            Self::ConcurrentScrapes => format!(
                "every scrape slot stayed busy for the whole scrape timeout (slow targets \
                 elsewhere); raise {} or find the hanging targets",
                self.flag()
            ),
            Self::TargetsPerScaledObject => format!(
                "raise {} or split the fleet over several ScaledObjects",
                self.flag()
            ),
            _ => format!(
                "raise {} or reduce the target's series (labels, models, LoRA adapters)",
                self.flag()
            ),
        }
    }
}

/// `n` scrape slots (at least one) for [`ScrapeSettings::concurrency`].
pub fn scrape_slots(n: usize) -> Arc<tokio::sync::Semaphore> {
    Arc::new(tokio::sync::Semaphore::new(
        n.clamp(1, tokio::sync::Semaphore::MAX_PERMITS),
    ))
}

/// Limits and rules for one scrape.
#[derive(Debug, Clone)]
pub struct ScrapeSettings {
    /// Whole-request timeout per target (connect, headers and the whole body).
    pub timeout: Duration,
    /// Largest (decompressed) body accepted.
    pub max_body_bytes: usize,
    /// Which addresses may be dialled (checked on the resolved address at connect time).
    pub policy: Arc<TargetPolicy>,
    /// Send scrapes through the proxy named by `HTTP_PROXY`/`NO_PROXY` (`--scrape-proxy-from-env`);
    /// off by default, so the environment cannot reroute scrapes.
    pub proxy_from_env: bool,
    /// The parser's caps on one body (applied by the caller that parses).
    pub limits: Limits,
    /// Targets scraped per [`Scraper::scrape_all`]; the rest fail with
    /// [`ScrapeLimit::TargetsPerScaledObject`] (one error names how many were left out).
    pub max_targets: usize,
    /// Scrape slots shared by every scraper holding this semaphore (`--max-concurrent-scrapes`);
    /// a scrape that finds none free within its timeout fails with
    /// [`ScrapeLimit::ConcurrentScrapes`]. `None`: no shared cap.
    pub concurrency: Option<Arc<tokio::sync::Semaphore>>,
    /// Open a connection per scrape and ask the target to close it after the response
    /// (`--scrape-close-connections`), instead of keeping it open for the next scrape. An
    /// idle kept connection holds only its socket (the `http1` client); closing costs a TCP
    /// handshake per scrape (more CPU) and leaves the closed socket's wait state on the
    /// target's side.
    pub close_connections: bool,
    /// Ask targets for gzip-compressed bodies (the default; `--scrape-disable-compression`
    /// turns it off, like Prometheus's `enable_compression: false`). Compressed, a vLLM body
    /// is about a tenth of the bytes on the wire, at the price of compressing in the pod and
    /// decompressing here (about 80 us of the scaler's CPU per 53 KB body).
    pub compression: bool,
}

impl Default for ScrapeSettings {
    fn default() -> Self {
        Self {
            timeout: Duration::from_secs(2),
            max_body_bytes: DEFAULT_MAX_BODY_BYTES,
            policy: Arc::new(TargetPolicy::default()),
            proxy_from_env: false,
            limits: DEFAULT_BODY_LIMITS,
            max_targets: DEFAULT_MAX_TARGETS,
            concurrency: None,
            close_connections: false,
            compression: true,
        }
    }
}

impl ScrapeSettings {
    /// The default settings with loopback targets allowed (tests and local runs; the same as
    /// `--allow-targets 127.0.0.0/8,::1`).
    pub fn loopback() -> Self {
        Self {
            policy: Arc::new(TargetPolicy::loopback()),
            ..Self::default()
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

/// How long an idle connection to a target is kept for its next scrape.
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);

/// The HTTP client behind a [`Scraper`].
#[derive(Debug, Clone)]
enum HttpClient {
    /// The scraper's own HTTP/1.1 client ([`http1`]): an idle connection costs only its
    /// socket. Dials only the addresses the policy checked (the default).
    Direct(Arc<http1::Client>),
    /// reqwest, for `--scrape-proxy-from-env`: it honours the proxy variables.
    Proxied(reqwest::Client),
}

/// A response whose head has arrived.
enum Answer {
    Direct(http1::Response),
    Proxied(reqwest::Response),
}

impl Answer {
    fn status(&self) -> u16 {
        match self {
            Self::Direct(response) => response.status,
            Self::Proxied(response) => response.status().as_u16(),
        }
    }

    fn content_encoding(&self) -> Option<&[u8]> {
        match self {
            Self::Direct(response) => response.content_encoding.as_deref(),
            Self::Proxied(response) => response
                .headers()
                .get(http::header::CONTENT_ENCODING)
                .map(http::HeaderValue::as_bytes),
        }
    }

    fn content_length(&self) -> Option<u64> {
        match self {
            Self::Direct(response) => response.content_length,
            Self::Proxied(response) => response.content_length(),
        }
    }

    /// Reads the whole body into `sink`.
    async fn read_into(&mut self, sink: &mut BodySink) -> Result<(), BodyFailure> {
        match self {
            Self::Direct(response) => {
                while let Some(chunk) = response
                    .chunk()
                    .await
                    .map_err(|e| BodyFailure::Read(e.cause))?
                {
                    sink.write(chunk).map_err(BodyFailure::Sink)?;
                }
            }
            Self::Proxied(response) => {
                while let Some(chunk) = response
                    .chunk()
                    .await
                    .map_err(|e| BodyFailure::Read(error_chain(&e)))?
                {
                    sink.write(&chunk).map_err(BodyFailure::Sink)?;
                }
            }
        }
        Ok(())
    }
}

enum BodyFailure {
    /// The connection broke or the framing was malformed (the cause, for the debug log).
    Read(String),
    Sink(SinkError),
}

impl HttpClient {
    fn new(settings: &ScrapeSettings) -> Result<Self, String> {
        let idle_per_target = if settings.close_connections { 0 } else { 2 };
        if settings.proxy_from_env {
            return reqwest::Client::builder()
                // The scraper asks for gzip and decodes it itself, under the body cap.
                .no_gzip()
                .connect_timeout(settings.timeout)
                .redirect(reqwest::redirect::Policy::none())
                .pool_idle_timeout(IDLE_TIMEOUT)
                .pool_max_idle_per_host(idle_per_target)
                .tcp_nodelay(true)
                .build()
                .map(Self::Proxied)
                // Only a TLS backend or system proxy config can fail to load; should it happen,
                // every scrape says so instead of a panic.
                .map_err(|e| format!("the http client could not be built: {e}"));
        }
        Ok(Self::Direct(Arc::new(http1::Client::new(
            settings.timeout,
            IDLE_TIMEOUT,
            idle_per_target,
        ))))
    }

    /// Sends the scrape of `parsed` to `address` (a checked address of its host).
    async fn get(
        &self,
        parsed: &reqwest::Url,
        address: SocketAddr,
        settings: &ScrapeSettings,
    ) -> Result<Answer, http1::Failure> {
        let host = host_header(parsed);
        let close = settings.close_connections;
        match self {
            Self::Direct(client) => {
                let request = request_head(parsed, &host, close, settings.compression);
                client
                    .get(address, request.as_bytes())
                    .await
                    .map(Answer::Direct)
            }
            Self::Proxied(client) => {
                let mut request = client
                    .get(pinned_url(parsed, address.ip()))
                    .header(http::header::HOST, host)
                    .header(http::header::ACCEPT, ACCEPT_HEADER)
                    .header(http::header::USER_AGENT, USER_AGENT);
                if settings.compression {
                    request = request.header(http::header::ACCEPT_ENCODING, "gzip");
                }
                if close {
                    request = request.header(http::header::CONNECTION, "close");
                }
                request
                    .send()
                    .await
                    .map(Answer::Proxied)
                    .map_err(|e| http1::Failure {
                        connect: e.is_connect() || e.is_timeout(),
                        cause: error_chain(&e),
                    })
            }
        }
    }
}

/// The scraper's `User-Agent`.
const USER_AGENT: &str = concat!("vllm-keda-scaler/", env!("CARGO_PKG_VERSION"));

/// The request head of a scrape of `parsed`.
fn request_head(parsed: &reqwest::Url, host: &str, close: bool, compression: bool) -> String {
    let mut target = parsed.path().to_owned();
    if let Some(query) = parsed.query() {
        target.push('?');
        target.push_str(query);
    }
    let connection = if close {
        // The target closes: its side keeps the closed socket's wait state, not ours.
        "Connection: close\r\n"
    } else {
        ""
    };
    let encoding = if compression {
        "Accept-Encoding: gzip\r\n"
    } else {
        ""
    };
    format!(
        "GET {target} HTTP/1.1\r\nHost: {host}\r\nAccept: {ACCEPT_HEADER}\r\n\
         {encoding}User-Agent: {USER_AGENT}\r\n{connection}\r\n"
    )
}

/// A body being read, capped at `cap` bytes after decompression.
struct CappedBody {
    bytes: Vec<u8>,
    cap: usize,
    over: bool,
}

impl CappedBody {
    fn new(initial: usize, cap: usize) -> Self {
        Self {
            bytes: Vec::with_capacity(initial.min(cap)),
            cap,
            over: false,
        }
    }

    /// Appends `chunk`, or marks the body over the cap (and keeps nothing more).
    fn push(&mut self, chunk: &[u8]) -> bool {
        if self.over || chunk.len() > self.cap - self.bytes.len() {
            self.over = true;
            return false;
        }
        let needed = self.bytes.len() + chunk.len();
        if needed > self.bytes.capacity() {
            // Grow by doubling, but never past the cap.
            let target = needed.max(self.bytes.capacity() * 2).min(self.cap);
            self.bytes.reserve_exact(target - self.bytes.len());
        }
        self.bytes.extend_from_slice(chunk);
        true
    }
}

impl std::io::Write for CappedBody {
    fn write(&mut self, chunk: &[u8]) -> std::io::Result<usize> {
        if self.push(chunk) {
            Ok(chunk.len())
        } else {
            Err(std::io::Error::other("the body passed the size cap"))
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Where the body's bytes go: straight in, or through the gzip decoder.
enum BodySink {
    Plain(CappedBody),
    Gzip(Box<flate2::write::MultiGzDecoder<CappedBody>>),
}

/// Why a body could not be taken in.
enum SinkError {
    TooLarge,
    Corrupt,
}

impl BodySink {
    fn write(&mut self, chunk: &[u8]) -> Result<(), SinkError> {
        match self {
            Self::Plain(body) => body.push(chunk).then_some(()).ok_or(SinkError::TooLarge),
            Self::Gzip(decoder) => {
                use std::io::Write as _;
                decoder.write_all(chunk).map_err(|_| {
                    if decoder.get_ref().over {
                        SinkError::TooLarge
                    } else {
                        SinkError::Corrupt
                    }
                })
            }
        }
    }

    fn finish(self) -> Result<Vec<u8>, SinkError> {
        match self {
            Self::Plain(body) => Ok(body.bytes),
            Self::Gzip(decoder) => decoder
                .finish()
                .map(|body| body.bytes)
                .map_err(|_| SinkError::Corrupt),
        }
    }
}

/// A reusable scraper: one connection pool shared by every target. Cheap to clone (clones share
/// the pool).
#[derive(Debug, Clone)]
pub struct Scraper {
    settings: ScrapeSettings,
    /// The pooled client, or why it could not be built (reported by every scrape).
    client: Result<HttpClient, String>,
}

impl Scraper {
    /// A scraper with these limits.
    pub fn new(settings: ScrapeSettings) -> Self {
        let client = HttpClient::new(&settings);
        Self { settings, client }
    }

    /// The limits this scraper applies.
    pub fn settings(&self) -> &ScrapeSettings {
        &self.settings
    }

    /// Fetches one body as text, within the timeout and the size cap.
    pub async fn scrape(&self, url: &str) -> Result<String, ScrapeError> {
        let timeout = self.settings.timeout;
        let mut slot_taken = self.settings.concurrency.is_none();
        let run = async {
            let _permit = match &self.settings.concurrency {
                Some(slots) => Some(slots.acquire().await),
                None => None,
            };
            slot_taken = true;
            self.fetch(url).await
        };
        let outcome = tokio::time::timeout(timeout, run).await;
        match outcome {
            Ok(result) => result,
            Err(_) if !slot_taken => Err(ScrapeError::LimitExceeded {
                url: url.to_string(),
                limit: ScrapeLimit::ConcurrentScrapes,
                what: format!("no scrape slot was free within {timeout:?}"),
            }),
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
        let max = self.settings.max_targets;
        let (urls, left_out) = urls.split_at(urls.len().min(max));
        let mut outcomes = self.scrape_each(urls).await;
        if let Some(first) = left_out.first() {
            outcomes.push(ScrapeOutcome {
                url: first.clone(),
                duration: Duration::ZERO,
                result: Err(ScrapeError::LimitExceeded {
                    url: first.clone(),
                    limit: ScrapeLimit::TargetsPerScaledObject,
                    what: format!(
                        "this and {} more targets past the limit of {max} targets per \
                         ScaledObject were not scraped",
                        left_out.len() - 1
                    ),
                }),
            });
        }
        outcomes
    }

    async fn scrape_each(&self, urls: &[String]) -> Vec<ScrapeOutcome> {
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
                    result: Err(ScrapeError::Transport { url: url.clone() }),
                })
            })
            .collect()
    }

    /// The target's addresses, resolved and checked against the policy (every allowed one, in
    /// the resolver's order): the request goes to one of these, never to a second resolution
    /// of the name.
    async fn pinned_addresses(
        &self,
        url: &str,
        parsed: &reqwest::Url,
    ) -> Result<Vec<SocketAddr>, ScrapeError> {
        // `check_target` made sure of an http url with a host, so both are known.
        let port = parsed.port_or_known_default().unwrap_or(80);
        let candidates: Vec<SocketAddr> = match url_host(parsed) {
            Some(Ok(ip)) => vec![SocketAddr::new(ip, port)],
            Some(Err(name)) => match tokio::net::lookup_host((name, port)).await {
                Ok(addrs) => addrs.collect(),
                Err(error) => {
                    tracing::debug!(target = %url, error = %error, "resolving the target failed");
                    return Err(ScrapeError::Connect {
                        url: url.to_string(),
                    });
                }
            },
            None => Vec::new(),
        };
        let mut refusal = None;
        let mut allowed = Vec::with_capacity(candidates.len());
        for address in candidates {
            match self.settings.policy.check(address) {
                Ok(()) => allowed.push(address),
                Err(refused) => {
                    tracing::debug!(target = %url, refused = %refused, "address refused");
                    refusal.get_or_insert(refused);
                }
            }
        }
        if !allowed.is_empty() {
            return Ok(allowed);
        }
        Err(match refusal {
            Some(refusal) => ScrapeError::Refused {
                url: url.to_string(),
                refusal,
            },
            None => ScrapeError::Connect {
                url: url.to_string(),
            },
        })
    }

    /// The request and the capped body read, without the overall timeout.
    async fn fetch(&self, url: &str) -> Result<String, ScrapeError> {
        let parsed = check_target(url)?;
        let client = self.client.as_ref().map_err(|e| {
            tracing::debug!(error = %e, "no http client");
            ScrapeError::Connect {
                url: url.to_string(),
            }
        })?;
        let addresses = self.pinned_addresses(url, &parsed).await?;
        let mut response = None;
        let mut last_failure = None;
        // A name with several addresses: the next one when a connection cannot be made (as a
        // client resolving the name itself would).
        for address in addresses {
            match client.get(&parsed, address, &self.settings).await {
                Ok(answer) => {
                    response = Some(answer);
                    break;
                }
                Err(failure) if failure.connect => last_failure = Some(failure),
                Err(failure) => return Err(classify(url, failure)),
            }
        }
        let Some(mut response) = response else {
            return Err(match last_failure {
                Some(failure) => classify(url, failure),
                None => ScrapeError::Connect {
                    url: url.to_string(),
                },
            });
        };
        let status = response.status();
        if !(200..300).contains(&status) {
            return Err(ScrapeError::HttpStatus {
                url: url.to_string(),
                status,
            });
        }
        let gzip = match response.content_encoding().map(<[u8]>::trim_ascii) {
            None => false,
            Some(encoding) if encoding.eq_ignore_ascii_case(b"identity") => false,
            Some(encoding) if encoding.eq_ignore_ascii_case(b"gzip") => true,
            Some(_) => {
                return Err(ScrapeError::Decode {
                    url: url.to_string(),
                    message: "unsupported content-encoding (only gzip is accepted); serve the \
                              metrics plain or gzip-compressed"
                        .to_owned(),
                });
            }
        };
        let cap = self.settings.max_body_bytes;
        let too_large = || ScrapeError::TooLarge {
            url: url.to_string(),
            limit_bytes: cap,
        };
        let corrupt = || ScrapeError::Decode {
            url: url.to_string(),
            message: "cannot decompress the gzip body (corrupt or truncated)".to_owned(),
        };
        let declared = response.content_length();
        // A plain body's length is its size; a gzip body is at least 10 bytes of header smaller
        // than what it decompresses to, past the smallest bodies.
        if !gzip && declared.is_some_and(|n| n > cap as u64) {
            return Err(too_large());
        }
        let mut sink = if gzip {
            BodySink::Gzip(Box::new(flate2::write::MultiGzDecoder::new(
                CappedBody::new(64 * 1024, cap),
            )))
        } else {
            let initial = declared.map_or(64 * 1024, |n| n as usize);
            BodySink::Plain(CappedBody::new(initial, cap))
        };
        response.read_into(&mut sink).await.map_err(|e| match e {
            BodyFailure::Read(cause) => {
                tracing::debug!(target = %url, error = %cause, "reading the body failed");
                ScrapeError::Transport {
                    url: url.to_string(),
                }
            }
            BodyFailure::Sink(SinkError::TooLarge) => too_large(),
            BodyFailure::Sink(SinkError::Corrupt) => corrupt(),
        })?;
        let body = sink.finish().map_err(|e| match e {
            SinkError::TooLarge => too_large(),
            SinkError::Corrupt => corrupt(),
        })?;
        String::from_utf8(body).map_err(|e| ScrapeError::Decode {
            url: url.to_string(),
            message: format!(
                "body is not valid utf-8 at byte {}; the prometheus text format must be utf-8",
                e.utf8_error().valid_up_to()
            ),
        })
    }
}

/// The url's host: an address (IPv4 as the url parser normalised it, so `2130706433` and
/// `0x7f.1` are `127.0.0.1`), or a name to resolve.
fn url_host(parsed: &reqwest::Url) -> Option<Result<IpAddr, &str>> {
    let host = parsed.host_str()?;
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    Some(bare.parse::<IpAddr>().map_err(|_| host))
}

/// The url with its host replaced by the checked address.
fn pinned_url(parsed: &reqwest::Url, ip: IpAddr) -> reqwest::Url {
    let mut pinned = parsed.clone();
    if pinned.set_ip_host(ip).is_err() {
        // Only urls that cannot have a host refuse one; `check_target` let none through.
        return parsed.clone();
    }
    pinned
}

/// The `Host` header: the url's host as written (a name, an address, `[v6]`) and its port if
/// it names one. The request itself goes to the checked address.
fn host_header(parsed: &reqwest::Url) -> String {
    let host = parsed.host_str().unwrap_or_default();
    match parsed.port() {
        Some(port) => format!("{host}:{port}"),
        None => host.to_owned(),
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

/// Sorts a failed request into the taxonomy. The cause goes to the debug log only: it can
/// tell an open port from a closed one, and the answer must not.
fn classify(url: &str, failure: http1::Failure) -> ScrapeError {
    tracing::debug!(target = %url, error = %failure.cause, "scrape failed");
    // Connect failures (a connect timeout among them) and broken connections answer alike.
    if failure.connect {
        ScrapeError::Connect {
            url: url.to_string(),
        }
    } else {
        ScrapeError::Transport {
            url: url.to_string(),
        }
    }
}

/// `error: cause: cause`, lowercased, each text once.
fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = vec![error.to_string()];
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
