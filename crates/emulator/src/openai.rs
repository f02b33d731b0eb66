//! The OpenAI-compatible request and response bodies the emulated replica speaks.
//!
//! Owns: turning a `/v1/completions` or `/v1/chat/completions` JSON body into a request size
//! ([`ParsedRequest`]) with clear errors, and building the JSON (whole or SSE chunks) that vLLM
//! answers with. Does not own the engine or HTTP plumbing (see [`super::server`]).
//!
//! Request sizes: prompt tokens are `ceil(chars / 4)` of the prompt text (chat: plus 4 per
//! message and 3 for the reply header), the length of a token-id array, or exactly the extension
//! field `"prompt_tokens": N`. Output tokens are `max_tokens` (finish reason `length`), or the
//! extension field `"output_tokens": N` (at most `max_tokens`; finish reason `stop`, as if the
//! model emitted its end-of-sequence token there). `ignore_eos` and `min_tokens` are accepted
//! and change nothing, since the emulator never ends early on its own.

use serde_json::{Value, json};

use super::engine::{FinishReason, RequestRecord};

/// Which endpoint a request came in on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    /// `POST /v1/completions`.
    Completions,
    /// `POST /v1/chat/completions`.
    Chat,
}

impl Endpoint {
    /// The route, as the HTTP metrics label it.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Completions => "/v1/completions",
            Endpoint::Chat => "/v1/chat/completions",
        }
    }
}

/// A validated generation request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedRequest {
    /// The `model` field, if given.
    pub model: Option<String>,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Tokens to generate.
    pub output_tokens: u32,
    /// The `max_tokens` limit.
    pub max_tokens: u32,
    /// `stream: true`.
    pub stream: bool,
    /// `stream_options.include_usage: true`.
    pub include_usage: bool,
}

/// Estimated tokens of a text: a quarter of its characters, rounded up.
pub fn estimate_tokens(text: &str) -> u32 {
    u32::try_from(text.chars().count().div_ceil(4)).unwrap_or(u32::MAX)
}

fn field_u32(body: &Value, name: &str) -> Result<Option<u32>, String> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| format!("\"{name}\" must be a non-negative integer, got {v}")),
    }
}

fn content_text(content: &Value) -> Result<String, String> {
    match content {
        Value::Null => Ok(String::new()),
        Value::String(s) => Ok(s.clone()),
        Value::Array(parts) => Ok(parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join(" ")),
        other => Err(format!(
            "message \"content\" must be a string or an array of parts, got {other}"
        )),
    }
}

/// Parses and validates a request body. Errors are the message of an HTTP 400.
pub fn parse_request(
    endpoint: Endpoint,
    body: &[u8],
    default_max_tokens: u32,
) -> Result<ParsedRequest, String> {
    let body: Value =
        serde_json::from_slice(body).map_err(|e| format!("request body is not valid JSON: {e}"))?;
    if !body.is_object() {
        return Err("request body must be a JSON object".into());
    }
    let model = match body.get("model") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(v) => return Err(format!("\"model\" must be a string, got {v}")),
    };
    if let Some(n) = field_u32(&body, "n")?
        && n != 1
    {
        return Err(format!(
            "\"n\" must be 1 (the emulator generates one choice), got {n}"
        ));
    }
    let estimated = match endpoint {
        Endpoint::Completions => match body.get("prompt") {
            Some(Value::String(s)) => estimate_tokens(s),
            Some(Value::Array(items)) if items.iter().all(Value::is_u64) => {
                u32::try_from(items.len()).unwrap_or(u32::MAX)
            }
            Some(Value::Array(items)) if items.len() == 1 => match &items[0] {
                Value::String(s) => estimate_tokens(s),
                Value::Array(ids) => u32::try_from(ids.len()).unwrap_or(u32::MAX),
                other => {
                    return Err(format!(
                        "\"prompt\" entries must be text or token ids, got {other}"
                    ));
                }
            },
            Some(Value::Array(_)) => {
                return Err("\"prompt\" must be one prompt; batched prompts are not supported by the emulator".into());
            }
            None if body.get("prompt_tokens").is_some() => 0,
            None => return Err("\"prompt\" is required".into()),
            Some(other) => {
                return Err(format!(
                    "\"prompt\" must be a string or token ids, got {other}"
                ));
            }
        },
        Endpoint::Chat => {
            let Some(messages) = body.get("messages").and_then(Value::as_array) else {
                return Err("\"messages\" is required and must be an array".into());
            };
            let mut tokens: u32 = 3;
            for m in messages {
                let text = content_text(m.get("content").unwrap_or(&Value::Null))?;
                tokens = tokens
                    .saturating_add(4)
                    .saturating_add(estimate_tokens(&text));
            }
            tokens
        }
    };
    let prompt_tokens = field_u32(&body, "prompt_tokens")?
        .unwrap_or(estimated)
        .max(1);
    let max_tokens = match endpoint {
        Endpoint::Chat => field_u32(&body, "max_completion_tokens")?,
        Endpoint::Completions => None,
    }
    .or(field_u32(&body, "max_tokens")?)
    .unwrap_or(default_max_tokens);
    if max_tokens == 0 {
        return Err("\"max_tokens\" must be at least 1".into());
    }
    let output_tokens = match field_u32(&body, "output_tokens")? {
        Some(0) => return Err("\"output_tokens\" must be at least 1".into()),
        Some(n) => n.min(max_tokens),
        None => max_tokens,
    };
    let stream = match body.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(v) => return Err(format!("\"stream\" must be true or false, got {v}")),
    };
    let include_usage = body
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        .unwrap_or(false);
    Ok(ParsedRequest {
        model,
        prompt_tokens,
        output_tokens,
        max_tokens,
        stream,
        include_usage,
    })
}

const WORDS: &[&str] = &[
    " the",
    " model",
    " emulates",
    " a",
    " replica",
    " of",
    " vLLM",
    " serving",
    " tokens",
    " at",
    " a",
    " calibrated",
    " pace",
    " under",
    " load",
    ".",
];

/// The text of generated token number `index` (0-based) of request `id`.
pub fn token_text(id: u64, index: u32) -> &'static str {
    WORDS[((id as usize).wrapping_mul(7) + index as usize) % WORDS.len()]
}

/// The text of tokens `0..n` of request `id`.
pub fn full_text(id: u64, n: u32) -> String {
    (0..n).map(|i| token_text(id, i)).collect()
}

fn usage(prompt: u32, completion: u32) -> Value {
    json!({
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": null,
    })
}

/// The whole (non-streaming) response body.
pub fn full_response(endpoint: Endpoint, model: &str, created: u64, rec: &RequestRecord) -> Value {
    let text = full_text(rec.id, rec.output_tokens);
    let reason = rec.finish_reason.as_str();
    match endpoint {
        Endpoint::Completions => json!({
            "id": format!("cmpl-{:032x}", rec.id),
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": reason,
                         "stop_reason": null, "prompt_logprobs": null}],
            "usage": usage(rec.prompt_tokens, rec.output_tokens),
        }),
        Endpoint::Chat => json!({
            "id": format!("chatcmpl-{:032x}", rec.id),
            "object": "chat.completion",
            "created": created,
            "model": model,
            "choices": [{"index": 0,
                         "message": {"role": "assistant", "content": text, "tool_calls": []},
                         "logprobs": null, "finish_reason": reason, "stop_reason": null}],
            "usage": usage(rec.prompt_tokens, rec.output_tokens),
            "prompt_logprobs": null,
        }),
    }
}

/// One streamed chunk carrying token `index` (0-based) of request `id`, as an SSE event.
/// `role_header` makes it the chat stream's opening chunk (`role: assistant`, empty content).
pub fn chunk_event(
    endpoint: Endpoint,
    model: &str,
    created: u64,
    id: u64,
    index: Option<u32>,
    finish: Option<FinishReason>,
) -> String {
    let text = index.map(|i| token_text(id, i)).unwrap_or("");
    let reason = finish.map(FinishReason::as_str);
    let body = match endpoint {
        Endpoint::Completions => json!({
            "id": format!("cmpl-{id:032x}"),
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [{"index": 0, "text": text, "logprobs": null, "finish_reason": reason,
                         "stop_reason": null}],
        }),
        Endpoint::Chat => {
            let delta = if index.is_none() && finish.is_none() {
                json!({"role": "assistant", "content": ""})
            } else {
                json!({"content": text})
            };
            json!({
                "id": format!("chatcmpl-{id:032x}"),
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "logprobs": null,
                             "finish_reason": reason}],
            })
        }
    };
    format!("data: {body}\n\n")
}

/// The final usage chunk (`stream_options.include_usage`), as an SSE event.
pub fn usage_event(endpoint: Endpoint, model: &str, created: u64, rec: &RequestRecord) -> String {
    let (prefix, object) = match endpoint {
        Endpoint::Completions => ("cmpl", "text_completion"),
        Endpoint::Chat => ("chatcmpl", "chat.completion.chunk"),
    };
    let body = json!({
        "id": format!("{prefix}-{:032x}", rec.id),
        "object": object,
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(rec.prompt_tokens, rec.output_tokens),
    });
    format!("data: {body}\n\n")
}

/// An OpenAI-style error body.
pub fn error_body(message: &str, kind: &str, code: u16) -> Value {
    json!({"object": "error", "message": message, "type": kind, "param": null, "code": code})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_come_from_the_request() {
        let p = parse_request(
            Endpoint::Completions,
            br#"{"prompt":"abcdefgh","max_tokens":7}"#,
            16,
        )
        .unwrap();
        assert_eq!((p.prompt_tokens, p.output_tokens, p.max_tokens), (2, 7, 7));
        let p = parse_request(
            Endpoint::Completions,
            br#"{"prompt":"x","prompt_tokens":900,"max_tokens":300,"output_tokens":120,"stream":true}"#,
            16,
        )
        .unwrap();
        assert_eq!(
            (p.prompt_tokens, p.output_tokens, p.max_tokens, p.stream),
            (900, 120, 300, true)
        );
        let p = parse_request(Endpoint::Completions, br#"{"prompt":[1,2,3,4,5]}"#, 16).unwrap();
        assert_eq!((p.prompt_tokens, p.output_tokens), (5, 16));
        let p = parse_request(
            Endpoint::Chat,
            br#"{"messages":[{"role":"user","content":"abcd"}],"max_completion_tokens":3}"#,
            256,
        )
        .unwrap();
        assert_eq!((p.prompt_tokens, p.output_tokens), (8, 3));
    }

    #[test]
    fn bad_bodies_get_clear_errors() {
        let cases: &[(&[u8], &str)] = &[
            (b"{", "not valid JSON"),
            (
                br#"{"prompt":"a","max_tokens":-1}"#,
                "\"max_tokens\" must be a non-negative integer",
            ),
            (br#"{"prompt":"a","n":2}"#, "\"n\" must be 1"),
            (br#"{"prompt":["a","b"]}"#, "batched prompts"),
            (br#"{"max_tokens":3}"#, "\"prompt\" is required"),
            (
                br#"{"prompt":"a","stream":"yes"}"#,
                "\"stream\" must be true or false",
            ),
        ];
        for (body, want) in cases {
            let err = parse_request(Endpoint::Completions, body, 16).unwrap_err();
            assert!(err.contains(want), "{err}");
        }
        let err = parse_request(Endpoint::Chat, br#"{"prompt":"a"}"#, 16).unwrap_err();
        assert!(err.contains("\"messages\" is required"), "{err}");
    }
}
