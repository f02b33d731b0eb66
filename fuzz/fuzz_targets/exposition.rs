//! The Prometheus text parser on arbitrary bytes, without limits and with small ones: no input
//! may panic, and an error must point at a line of the body.
#![no_main]

use libfuzzer_sys::fuzz_target;
use vllm_keda_core::exposition::{self, Limits};

fuzz_target!(|data: &[u8]| {
    let lines = 1 + data.iter().filter(|&&b| b == b'\n').count();
    match exposition::parse_bytes(data) {
        Ok(_) => {}
        Err(e) => assert!(e.line >= 1 && e.line <= lines, "line {} of {lines}", e.line),
    }
    if let Ok(text) = std::str::from_utf8(data) {
        let limits = Limits {
            max_samples: 64,
            max_labels_per_sample: 4,
            max_label_name_bytes: 16,
            max_label_value_bytes: 32,
        };
        let _ = exposition::parse_with_limits(text, &limits);
    }
});
