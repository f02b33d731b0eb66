//! Fetching `/metrics` bodies: concurrent, per-target timeout, size cap, gzip.
//!
//! Owns: HTTP to the targets and the failure taxonomy. Does not own: parsing or meaning.
//! One slow or broken target never blocks or poisons the others.
//!
//! INTERFACE STUB: the types and signatures below are the contract other modules build on.

use std::time::Duration;

/// Limits for one scrape.
#[derive(Debug, Clone, PartialEq)]
pub struct ScrapeSettings {
    /// Whole-request timeout per target.
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

/// Why a scrape failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScrapeError {
    /// Any failure (placeholder until the taxonomy lands).
    #[error("{0}")]
    Failed(String),
}

/// A reusable scraper (one connection pool).
#[derive(Debug, Clone)]
pub struct Scraper {
    settings: ScrapeSettings,
}

impl Scraper {
    /// A scraper with these limits.
    pub fn new(settings: ScrapeSettings) -> Self {
        Self { settings }
    }

    /// Fetches one body as text.
    pub async fn scrape(&self, url: &str) -> Result<String, ScrapeError> {
        let _ = &self.settings;
        Err(ScrapeError::Failed(format!("{url}: not implemented yet")))
    }

    /// Fetches every URL concurrently; results in the order of `urls`.
    pub async fn scrape_all(&self, urls: &[String]) -> Vec<Result<String, ScrapeError>> {
        let mut out = Vec::with_capacity(urls.len());
        for url in urls {
            out.push(self.scrape(url).await);
        }
        out
    }
}
