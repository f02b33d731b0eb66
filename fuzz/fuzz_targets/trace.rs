//! The request-trace readers (Azure LLM 2023 CSV, Mooncake JSON lines, detected by content) on
//! arbitrary text: no input may panic; a row error names a line inside the text; a trace that
//! parses has its requests in time order and survives the reshaping the simulator applies.
#![no_main]

use std::time::Duration;

use libfuzzer_sys::fuzz_target;
use vllm_keda_trace::{TraceError, parse_trace};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match parse_trace("fuzz", &text) {
        Ok(trace) => {
            let requests = &trace.requests;
            assert!(requests.windows(2).all(|w| w[0].arrival <= w[1].arrival));
            let _ = trace.mean_rate_per_second();
            let _ = trace.arrivals_per_bucket(Duration::from_secs(60));
            let _ = trace.scale_rate(2.5);
            let _ = trace.compress_time(3.0);
            let _ = trace.slice(Duration::from_secs(1), Duration::from_secs(600));
        }
        Err(TraceError::Row { line, .. }) => {
            assert!(line >= 1 && line <= text.lines().count().max(1), "line {line}");
        }
        Err(_) => {}
    }
});
