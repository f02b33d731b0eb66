//! One streaming completion request against an OpenAI-compatible server (vLLM's
//! `/v1/completions` with `stream: true`), timed on the client side.
//!
//! Owns: the request body, reading the server-sent events, and the timings (time to first token,
//! gaps between tokens, end to end). Does not own: when requests are sent (see the generator) or
//! what the timings mean (see the verdict).

use std::time::Duration;

use futures_util::StreamExt;
use serde_json::json;
use tokio::time::Instant;

/// What one request produced.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// `Ok` or the failure kind.
    pub result: Result<(), FailureKind>,
    /// Time from sending to the first token (streamed text).
    pub ttft: Option<Duration>,
    /// Gaps between consecutive streamed tokens.
    pub itls: Vec<Duration>,
    /// Time from sending to the end of the stream (or the failure).
    pub e2e: Duration,
    /// Output tokens (the server's `usage` when sent, else the streamed chunks).
    pub output_tokens: u32,
    /// Prompt tokens (the server's `usage` when sent, else the requested size).
    pub prompt_tokens: u32,
}

/// Why a request failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FailureKind {
    /// Could not connect.
    #[error("connect")]
    Connect,
    /// No complete answer within the request timeout.
    #[error("timeout")]
    Timeout,
    /// A non-2xx status.
    #[error("status_{0}")]
    Status(u16),
    /// The stream broke or held an error event.
    #[error("stream")]
    Stream,
}

/// A reusable client for one server and model.
#[derive(Debug, Clone)]
pub struct CompletionClient {
    http: reqwest::Client,
    completions_url: String,
    model: String,
    timeout: Duration,
}

/// Builds a prompt of about `tokens` tokens (one common word per token).
pub fn prompt_text(tokens: u32) -> String {
    let mut s = String::with_capacity(tokens as usize * 4);
    for i in 0..tokens {
        if i > 0 {
            s.push(' ');
        }
        s.push_str("the");
    }
    s
}

impl CompletionClient {
    /// A client for `base_url` (e.g. `http://10.0.0.5:8000`) serving `model`.
    pub fn new(
        base_url: &str,
        model: &str,
        timeout: Duration,
        max_connections: usize,
    ) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .tcp_nodelay(true)
            .pool_max_idle_per_host(max_connections)
            // A busy server accepts late; the request timeout bounds the whole exchange.
            .connect_timeout(timeout)
            .build()?;
        Ok(Self {
            http,
            completions_url: format!("{}/v1/completions", base_url.trim_end_matches('/')),
            model: model.to_string(),
            timeout,
        })
    }

    /// The request body for a prompt of `prompt_tokens` asking for exactly `output_tokens`.
    pub fn body(&self, prompt_tokens: u32, output_tokens: u32) -> Vec<u8> {
        json!({
            "model": self.model,
            "prompt": prompt_text(prompt_tokens),
            "max_tokens": output_tokens.max(1),
            "min_tokens": output_tokens.max(1),
            "ignore_eos": true,
            "temperature": 0.0,
            "stream": true,
            "stream_options": {"include_usage": true},
        })
        .to_string()
        .into_bytes()
    }

    /// Sends one streaming request and times it.
    pub async fn complete(&self, prompt_tokens: u32, output_tokens: u32) -> Outcome {
        let body = self.body(prompt_tokens, output_tokens);
        let start = Instant::now();
        let mut outcome = Outcome {
            result: Ok(()),
            ttft: None,
            itls: Vec::new(),
            e2e: Duration::ZERO,
            output_tokens: 0,
            prompt_tokens,
        };
        let run = self.stream(body, start, &mut outcome);
        let result = match tokio::time::timeout(self.timeout, run).await {
            Ok(r) => r,
            Err(_) => Err(FailureKind::Timeout),
        };
        outcome.e2e = start.elapsed();
        outcome.result = result;
        outcome
    }

    async fn stream(
        &self,
        body: Vec<u8>,
        start: Instant,
        outcome: &mut Outcome,
    ) -> Result<(), FailureKind> {
        let response = self
            .http
            .post(&self.completions_url)
            .header("content-type", "application/json")
            .header("accept", "text/event-stream")
            .body(body)
            .send()
            .await
            .map_err(|e| {
                if e.is_connect() {
                    FailureKind::Connect
                } else if e.is_timeout() {
                    FailureKind::Timeout
                } else {
                    FailureKind::Stream
                }
            })?;
        let status = response.status();
        if !status.is_success() {
            return Err(FailureKind::Status(status.as_u16()));
        }
        let mut stream = response.bytes_stream();
        let mut buffer: Vec<u8> = Vec::new();
        let mut last_token: Option<Instant> = None;
        let mut chunks = 0u32;
        let mut usage_tokens: Option<u32> = None;
        let mut done = false;
        while let Some(piece) = stream.next().await {
            let piece = piece.map_err(|_| FailureKind::Stream)?;
            let now = Instant::now();
            buffer.extend_from_slice(&piece);
            // Events end with a blank line; handle every complete one in the buffer.
            while let Some(end) = find_event_end(&buffer) {
                let event: Vec<u8> = buffer.drain(..end.0 + end.1).collect();
                let event = &event[..end.0];
                for line in event.split(|b| *b == b'\n') {
                    let line = line.strip_suffix(b"\r").unwrap_or(line);
                    let Some(data) = line.strip_prefix(b"data:") else {
                        continue;
                    };
                    let data = data.trim_ascii();
                    if data == b"[DONE]" {
                        done = true;
                        continue;
                    }
                    match classify(data) {
                        Chunk::Token { usage } => {
                            chunks += 1;
                            match last_token {
                                None => outcome.ttft = Some(now - start),
                                Some(prev) => outcome.itls.push(now - prev),
                            }
                            last_token = Some(now);
                            if usage.is_some() {
                                usage_tokens = usage.map(|u| u.0);
                                outcome.prompt_tokens =
                                    usage.map_or(outcome.prompt_tokens, |u| u.1);
                            }
                        }
                        Chunk::Usage(completion, prompt) => {
                            usage_tokens = Some(completion);
                            outcome.prompt_tokens = prompt;
                        }
                        Chunk::Empty => {}
                        Chunk::Error => return Err(FailureKind::Stream),
                    }
                }
            }
        }
        outcome.output_tokens = usage_tokens.unwrap_or(chunks);
        if !done && chunks == 0 {
            return Err(FailureKind::Stream);
        }
        Ok(())
    }
}

/// Position of the end of the first complete event and the separator length.
fn find_event_end(buffer: &[u8]) -> Option<(usize, usize)> {
    let lf = buffer.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2));
    let crlf = buffer
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|i| (i, 4));
    match (lf, crlf) {
        (Some(a), Some(b)) => Some(if a.0 <= b.0 { a } else { b }),
        (a, b) => a.or(b),
    }
}

#[derive(Debug, PartialEq)]
enum Chunk {
    /// Text was streamed; `usage` is (completion, prompt) tokens when the chunk carried it.
    Token { usage: Option<(u32, u32)> },
    /// Only usage (the final chunk with `include_usage`).
    Usage(u32, u32),
    /// No text (e.g. a role or finish chunk).
    Empty,
    /// An error event.
    Error,
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

fn classify(data: &[u8]) -> Chunk {
    // Fast path for the common token chunk: no usage, no error, one non-empty text field.
    let has_usage = contains(data, b"\"usage\":{") || contains(data, b"\"usage\": {");
    if !has_usage && !contains(data, b"\"error\"") && data.starts_with(b"{") {
        if let Some(i) = data.windows(8).position(|w| w == b"\"text\":\"") {
            return if data.get(i + 8) == Some(&b'"') {
                Chunk::Empty
            } else {
                Chunk::Token { usage: None }
            };
        }
    }
    let Ok(value) = serde_json::from_slice::<serde_json::Value>(data) else {
        return Chunk::Error;
    };
    if value.get("error").is_some() || value.get("object").and_then(|o| o.as_str()) == Some("error")
    {
        return Chunk::Error;
    }
    let usage = value.get("usage").filter(|u| !u.is_null()).map(|u| {
        let get = |k: &str| {
            u.get(k)
                .and_then(|v| v.as_u64())
                .unwrap_or(0)
                .min(u64::from(u32::MAX)) as u32
        };
        (get("completion_tokens"), get("prompt_tokens"))
    });
    let has_text = value
        .get("choices")
        .and_then(|c| c.as_array())
        .is_some_and(|choices| {
            choices.iter().any(|c| {
                c.get("text")
                    .and_then(|t| t.as_str())
                    .is_some_and(|t| !t.is_empty())
                    || c.pointer("/delta/content")
                        .and_then(|t| t.as_str())
                        .is_some_and(|t| !t.is_empty())
            })
        });
    match (has_text, usage) {
        (true, usage) => Chunk::Token { usage },
        (false, Some((c, p))) => Chunk::Usage(c, p),
        (false, None) => Chunk::Empty,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_are_classified() {
        assert_eq!(
            classify(br#"{"id":"x","choices":[{"index":0,"text":" the","finish_reason":null}]}"#),
            Chunk::Token { usage: None }
        );
        assert_eq!(
            classify(br#"{"choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3,"total_tokens":10}}"#),
            Chunk::Usage(3, 7)
        );
        assert_eq!(
            classify(br#"{"choices":[{"text":"","finish_reason":"length"}]}"#),
            Chunk::Empty
        );
        assert_eq!(classify(br#"{"error":{"message":"boom"}}"#), Chunk::Error);
        assert_eq!(
            classify(br#"{"choices":[{"text":"x"}],"usage":null}"#),
            Chunk::Token { usage: None }
        );
        assert_eq!(
            classify(br#"{"choices":[{"text": "x"}],"usage": {"completion_tokens":1,"prompt_tokens":2}}"#),
            Chunk::Token { usage: Some((1, 2)) }
        );
        assert_eq!(classify(b"not json"), Chunk::Error);
        assert_eq!(find_event_end(b"data: x\n\ndata: y"), Some((7, 2)));
        assert_eq!(find_event_end(b"data: x\r\n\r\n"), Some((7, 4)));
        assert_eq!(find_event_end(b"data: x\n"), None);
        assert_eq!(prompt_text(3), "the the the");
    }
}
