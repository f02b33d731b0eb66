//! What goes into and comes out of the engine: request specs, finish reasons, timing records
//! and events.
//!
//! Owns the plain data types shared by [`super::engine`], [`super::server`] and the fleet
//! simulator. Does not own any behaviour beyond small accessors.

use std::time::Duration;

/// Identifies a request inside one engine.
pub type RequestId = u64;

/// Why a request finished (vLLM's `finished_reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FinishReason {
    /// The model emitted its stop token (here: the request's `output_tokens` were reached
    /// before `max_tokens`).
    Stop = 0,
    /// `max_tokens` were generated.
    Length = 1,
    /// The client went away or the request was cancelled.
    Abort = 2,
}

impl FinishReason {
    /// Every reason, in vLLM's label order.
    pub const ALL: [FinishReason; 3] = [
        FinishReason::Stop,
        FinishReason::Length,
        FinishReason::Abort,
    ];

    /// The label value (`stop`, `length`, `abort`).
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
        }
    }
}

/// What a request asks of the engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestSpec {
    /// Prompt length in tokens (at least 1).
    pub prompt_tokens: u32,
    /// Tokens the engine generates before finishing (at least 1).
    pub output_tokens: u32,
    /// The request's `max_tokens` parameter (at least `output_tokens`); when output reaches it
    /// the finish reason is `length`, otherwise `stop`.
    pub max_tokens: u32,
    /// Emit an [`Event::Token`] for every generated token (streaming clients); the simulator
    /// leaves this off and only gets [`Event::Finished`].
    pub stream_tokens: bool,
}

impl RequestSpec {
    /// A request of `prompt_tokens` that generates exactly `output_tokens` (`max_tokens` equal,
    /// finish reason `length`), without token events.
    pub fn new(prompt_tokens: u32, output_tokens: u32) -> Self {
        RequestSpec {
            prompt_tokens,
            output_tokens,
            max_tokens: output_tokens,
            stream_tokens: false,
        }
    }
}

/// Why the engine refused a request (vLLM answers these with HTTP 400).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RejectError {
    /// Zero prompt or zero output tokens.
    #[error("request needs at least 1 prompt token and 1 output token, got {prompt} and {output}")]
    Empty {
        /// Prompt tokens asked for.
        prompt: u32,
        /// Output tokens asked for.
        output: u32,
    },
    /// Prompt plus `max_tokens` exceed `max_model_len`.
    #[error(
        "this model's maximum context length is {max_model_len} tokens, but the request asks for \
         {prompt} prompt + {output} max_tokens; shorten the prompt or lower max_tokens"
    )]
    TooLong {
        /// Prompt tokens asked for.
        prompt: u32,
        /// `max_tokens` asked for.
        output: u32,
        /// The engine's limit.
        max_model_len: u32,
    },
}

/// The timing of one request, exact to the step.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RequestRecord {
    /// The request.
    pub id: RequestId,
    /// When it was added.
    pub arrival: Duration,
    /// When it was first scheduled (left the waiting queue), if ever.
    pub scheduled: Option<Duration>,
    /// When its first token was produced, if ever.
    pub first_token: Option<Duration>,
    /// When it finished (last token, or abort).
    pub finished: Duration,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Tokens generated.
    pub output_tokens: u32,
    /// The `max_tokens` parameter.
    pub max_tokens: u32,
    /// How often it was preempted.
    pub preemptions: u32,
    /// Why it finished.
    pub finish_reason: FinishReason,
}

impl RequestRecord {
    /// Time to first token, if a token was produced.
    pub fn ttft(&self) -> Option<Duration> {
        self.first_token.map(|t| t.saturating_sub(self.arrival))
    }

    /// Arrival to finish.
    pub fn e2e(&self) -> Duration {
        self.finished.saturating_sub(self.arrival)
    }

    /// Arrival to first scheduled (to finish when never scheduled).
    pub fn queue_time(&self) -> Duration {
        self.scheduled
            .unwrap_or(self.finished)
            .saturating_sub(self.arrival)
    }

    /// Mean time between tokens after the first, if at least two tokens were produced.
    pub fn mean_itl(&self) -> Option<Duration> {
        let first = self.first_token?;
        (self.output_tokens > 1)
            .then(|| self.finished.saturating_sub(first) / (self.output_tokens - 1))
    }
}

/// Something that happened during [`super::Engine::advance_to`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Event {
    /// A request with `stream_tokens` produced its `generated`-th token.
    Token {
        /// The request.
        id: RequestId,
        /// Tokens generated so far, including this one.
        generated: u32,
        /// When.
        at: Duration,
    },
    /// A request finished (every request ends with exactly one of these).
    Finished(RequestRecord),
}
