//! The FastAPI instrumentator's `http_*` metrics that vLLM's API server exposes.
//!
//! Owns: [`HttpStats`] (requests, sizes and durations per handler) and its rendering. Does not
//! own serving HTTP (see [`super::server`]).

use super::stats::EngineHistogram;
use super::text::{Writer, le_labels};

/// Buckets of `http_request_duration_highr_seconds`.
const HTTP_HIGHR_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0,
    7.5, 10.0, 30.0, 60.0,
];
/// Buckets of `http_request_duration_seconds`.
const HTTP_BUCKETS: &[f64] = &[0.1, 0.5, 1.0];

/// The FastAPI instrumentator's counters that vLLM exposes (`http_*`), per handler.
#[derive(Debug, Clone)]
pub struct HttpStats {
    created_unix_seconds: f64,
    requests: Vec<(&'static str, &'static str, &'static str, u64, f64)>,
    sizes: Vec<(&'static str, u64, f64, f64, f64)>,
    durations: Vec<(&'static str, &'static str, EngineHistogram, f64)>,
    highr: EngineHistogram,
}

/// One finished HTTP request, as the instrumentator sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct HttpObservation {
    /// Route (`/v1/completions`, ...).
    pub handler: &'static str,
    /// `GET` or `POST`.
    pub method: &'static str,
    /// Status code; grouped as `2xx`, `4xx`, ...
    pub status: u16,
    /// Request `Content-Length`.
    pub request_bytes: u64,
    /// Response body length (0 for streams, like the instrumentator).
    pub response_bytes: u64,
    /// Time to serve it.
    pub duration_seconds: f64,
}

impl HttpStats {
    /// Empty counters; `created_unix_seconds` is the replica's start.
    pub fn new(created_unix_seconds: f64) -> Self {
        HttpStats {
            created_unix_seconds,
            requests: Vec::new(),
            sizes: Vec::new(),
            durations: Vec::new(),
            highr: EngineHistogram::new(HTTP_HIGHR_BUCKETS),
        }
    }

    /// Records one finished HTTP request at unix time `now_unix_seconds`.
    pub fn record(&mut self, obs: &HttpObservation, now_unix_seconds: f64) {
        let HttpObservation {
            handler,
            method,
            status,
            request_bytes,
            response_bytes,
            duration_seconds,
        } = *obs;
        let class = match status {
            100..=199 => "1xx",
            200..=299 => "2xx",
            300..=399 => "3xx",
            400..=499 => "4xx",
            _ => "5xx",
        };
        match self
            .requests
            .iter_mut()
            .find(|r| r.0 == handler && r.1 == method && r.2 == class)
        {
            Some(r) => r.3 += 1,
            None => self
                .requests
                .push((handler, method, class, 1, now_unix_seconds)),
        }
        match self.sizes.iter_mut().find(|s| s.0 == handler) {
            Some(s) => {
                s.1 += 1;
                s.2 += request_bytes as f64;
                s.3 += response_bytes as f64;
            }
            None => self.sizes.push((
                handler,
                1,
                request_bytes as f64,
                response_bytes as f64,
                now_unix_seconds,
            )),
        }
        let pos = match self
            .durations
            .iter()
            .position(|d| d.0 == handler && d.1 == method)
        {
            Some(p) => p,
            None => {
                self.durations.push((
                    handler,
                    method,
                    EngineHistogram::new(HTTP_BUCKETS),
                    now_unix_seconds,
                ));
                self.durations.len() - 1
            }
        };
        self.durations[pos].2.observe(duration_seconds);
        self.highr.observe(duration_seconds);
    }

    /// Requests recorded for `handler` with status class `class` (`2xx`, ...).
    pub fn requests(&self, handler: &str, class: &str) -> u64 {
        self.requests
            .iter()
            .filter(|r| r.0 == handler && r.2 == class)
            .map(|r| r.3)
            .sum()
    }

    pub(crate) fn render(&self, w: &mut Writer<'_>) {
        let help = "Total number of requests by method, status and handler.";
        w.header("http_requests_total", help, "counter");
        for (h, m, s, n, _) in &self.requests {
            w.sample(
                "http_requests_total",
                "",
                &[("handler", h), ("method", m), ("status", s)],
                *n as f64,
            );
        }
        w.header("http_requests_created", help, "gauge");
        for (h, m, s, _, c) in &self.requests {
            w.sample(
                "http_requests_created",
                "",
                &[("handler", h), ("method", m), ("status", s)],
                *c,
            );
        }
        for (name, help, is_request) in [
            (
                "http_request_size_bytes",
                "Content length of incoming requests by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. ",
                true,
            ),
            (
                "http_response_size_bytes",
                "Content length of outgoing responses by handler. Only value of header is respected. Otherwise ignored. No percentile calculated. ",
                false,
            ),
        ] {
            w.header(name, help, "summary");
            for (h, n, req, resp, _) in &self.sizes {
                w.sample(name, "_count", &[("handler", h)], *n as f64);
                w.sample(
                    name,
                    "_sum",
                    &[("handler", h)],
                    if is_request { *req } else { *resp },
                );
            }
            let created = format!("{name}_created");
            w.header(&created, help, "gauge");
            for (h, _, _, _, c) in &self.sizes {
                w.sample(&created, "", &[("handler", h)], *c);
            }
        }
        w.created = Some(self.created_unix_seconds);
        w.histogram(
            "http_request_duration_highr_seconds",
            "Latency with many buckets but no API specific labels. Made for more accurate percentile calculations. ",
            &self.highr,
            false,
        );
        let name = "http_request_duration_seconds";
        let help = "Latency with only few buckets by handler. Made to be only used if aggregation by handler is important. ";
        w.header(name, help, "histogram");
        for (h, m, hist, _) in &self.durations {
            for (le, cumulative) in le_labels(hist.bounds()).iter().zip(hist.cumulative()) {
                w.sample(
                    name,
                    "_bucket",
                    &[("handler", h), ("le", le), ("method", m)],
                    cumulative as f64,
                );
            }
            w.sample(
                name,
                "_count",
                &[("handler", h), ("method", m)],
                hist.count() as f64,
            );
            w.sample(name, "_sum", &[("handler", h), ("method", m)], hist.sum());
        }
        let created = format!("{name}_created");
        w.header(&created, help, "gauge");
        for (h, m, _, c) in &self.durations {
            w.sample(&created, "", &[("handler", h), ("method", m)], *c);
        }
    }
}
