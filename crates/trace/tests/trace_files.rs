//! Trace readers against the published traces (row counts, spans, means) and malformed rows.

use std::path::PathBuf;
use std::time::Duration;

use vllm_keda_trace::{TraceError, TraceFormat, parse_trace, read_trace};

fn bundled(name: &str) -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/traces")).join(name)
}

#[test]
fn published_traces_have_the_documented_rows_spans_and_means() {
    // (file, format, rows, span minutes low..high, mean prompt, mean output)
    let cases = [
        (
            "azure-llm-2023-code.csv",
            TraceFormat::AzureCsv,
            8819,
            56.0..58.0,
            2048.0,
            28.0,
        ),
        (
            "azure-llm-2023-conv.csv",
            TraceFormat::AzureCsv,
            19366,
            57.0..59.0,
            1155.0,
            211.0,
        ),
        (
            "mooncake-conversation.jsonl",
            TraceFormat::MooncakeJsonl,
            12031,
            58.0..60.0,
            12035.0,
            343.0,
        ),
    ];
    for (name, format, rows, span_minutes, prompt, output) in cases {
        let path = bundled(name);
        {
            let trace = read_trace(&path).unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(trace.format, format, "{name}");
            assert_eq!(trace.len(), rows, "{name}");
            assert_eq!(trace.requests[0].arrival, Duration::ZERO, "{name}");
            assert!(
                trace
                    .requests
                    .windows(2)
                    .all(|w| w[0].arrival <= w[1].arrival),
                "{name}: sorted"
            );
            let span = trace.span().as_secs_f64() / 60.0;
            assert!(span_minutes.contains(&span), "{name}: span {span} min");
            assert!(
                (trace.mean_prompt_tokens() - prompt).abs() < 1.0,
                "{name}: prompt {}",
                trace.mean_prompt_tokens()
            );
            assert!(
                (trace.mean_output_tokens() - output).abs() < 1.0,
                "{name}: output {}",
                trace.mean_output_tokens()
            );
        }
    }
}

#[test]
fn azure_code_trace_is_bursty_per_minute() {
    let trace = read_trace(&bundled("azure-llm-2023-code.csv")).unwrap();
    let per_minute = trace.arrivals_per_bucket(Duration::from_secs(60));
    assert_eq!(per_minute.iter().sum::<usize>(), trace.len());
    assert_eq!(per_minute.len(), 58);
    let max = *per_minute.iter().max().unwrap() as f64 / 60.0;
    assert!((9.0..11.0).contains(&max), "busiest minute {max} req/s");
    // Bursty: some whole minutes see no request at all.
    assert!(per_minute.iter().filter(|&&n| n == 0).count() >= 5);
}

#[test]
fn slicing_and_reshaping_a_real_trace() {
    let trace = read_trace(&bundled("azure-llm-2023-conv.csv")).unwrap();
    let ten = trace.slice(Duration::from_secs(600), Duration::from_secs(1200));
    assert!(!ten.is_empty());
    assert!(
        ten.requests
            .iter()
            .all(|r| r.arrival < Duration::from_secs(600))
    );
    let expected = trace
        .requests
        .iter()
        .filter(|r| r.arrival >= Duration::from_secs(600) && r.arrival < Duration::from_secs(1200))
        .count();
    assert_eq!(ten.len(), expected);
    let fast = ten.compress_time(10.0).unwrap();
    assert!(fast.span() <= Duration::from_secs(60));
    assert_eq!(fast.len(), ten.len());
    let double = ten.scale_rate(2.0).unwrap();
    assert_eq!(double.len(), ten.len() * 2);
    assert_eq!(double.span(), ten.span());
}

fn row_error(name: &str, text: &str) -> (usize, String) {
    match parse_trace(name, text) {
        Err(e @ TraceError::Row { line, .. }) => (line, e.to_string()),
        other => panic!("{name}: expected a row error, got {other:?}"),
    }
}

#[test]
fn malformed_rows_name_file_line_and_fix() {
    let header = "TIMESTAMP,ContextTokens,GeneratedTokens\n";
    let cases = [
        (
            "short.csv",
            format!("{header}2023-11-16 18:17:03.97,10,1\n2023-11-16 18:17:04.0,5\n"),
            3,
            "expected 3 fields",
        ),
        (
            "date.csv",
            format!("{header}2023-13-16 18:17:03.97,10,1\n"),
            2,
            "not a valid date",
        ),
        (
            "time.csv",
            format!("{header}yesterday,10,1\n"),
            2,
            "timestamp \"yesterday\"",
        ),
        (
            "neg.csv",
            format!("{header}2023-11-16 18:17:03.97,-10,1\n"),
            2,
            "contexttokens \"-10\"",
        ),
        (
            "big.csv",
            format!("{header}2023-11-16 18:17:03.97,10,99999999999\n"),
            2,
            "generatedtokens",
        ),
        (
            "header.csv",
            "time,prompt,output\n2023-11-16 18:17:03.97,10,1\n".to_string(),
            1,
            "header",
        ),
        (
            "json.jsonl",
            "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 1}\n{\"timestamp\": 5\n"
                .to_string(),
            2,
            "not a trace row",
        ),
        (
            "missing.jsonl",
            "{\"timestamp\": 0, \"input_length\": 5}\n".to_string(),
            1,
            "output_length",
        ),
        (
            "negts.jsonl",
            "{\"timestamp\": -4, \"input_length\": 5, \"output_length\": 1}\n".to_string(),
            1,
            "timestamp -4",
        ),
        (
            "frac.jsonl",
            "{\"timestamp\": 4, \"input_length\": 5.5, \"output_length\": 1}\n".to_string(),
            1,
            "input_length 5.5",
        ),
    ];
    for (name, text, line, needle) in cases {
        let (got_line, message) = row_error(name, &text);
        assert_eq!(got_line, line, "{name}: {message}");
        let lower = message.to_lowercase();
        assert!(
            lower.contains(needle),
            "{name}: {message:?} lacks {needle:?}"
        );
        assert!(message.contains(name), "{name}: {message}");
        assert!(message.contains("fix:"), "{name}: {message}");
    }
}

#[test]
fn unknown_and_empty_files_are_clear_errors() {
    for (name, text, needle) in [
        ("empty.csv", "", "empty"),
        ("blank.csv", "\n\n  \n", "empty"),
        (
            "header-only.csv",
            "TIMESTAMP,ContextTokens,GeneratedTokens\n",
            "no requests",
        ),
        ("prose.txt", "hello world\n", "unknown format"),
    ] {
        let e = parse_trace(name, text).expect_err(name);
        let message = e.to_string();
        assert!(message.contains(needle), "{name}: {message}");
        assert!(message.contains("fix:"), "{name}: {message}");
    }
    let e = read_trace(std::path::Path::new("no/such/trace.csv")).unwrap_err();
    assert!(e.to_string().contains("no/such/trace.csv"), "{e}");
}

#[test]
fn unsorted_rows_are_sorted_and_rebased() {
    let text = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                2023-11-16 18:17:05.5,3,3\n\
                2023-11-16 18:17:03.5,1,1\n\
                2023-11-17 00:00:00.0,4,4\n";
    let t = parse_trace("u.csv", text).unwrap();
    assert_eq!(t.requests[0].prompt_tokens, 1);
    assert_eq!(t.requests[1].arrival, Duration::from_secs(2));
    // 18:17:03.5 to midnight the next day.
    assert!(
        (t.span().as_secs_f64() - 20_576.5).abs() < 1e-6,
        "{:?}",
        t.span()
    );
}

#[test]
fn a_trace_spanning_more_than_a_month_is_a_row_error_naming_the_far_line() {
    // A year typed wrong in an Azure row.
    let azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n\
                 2023-11-16 18:17:03.9799600,4808,10\n\
                 9023-11-16 18:17:04.0319600,3180,8\n\
                 2023-11-16 18:17:04.0781490,110,27\n";
    let error = parse_trace("far.csv", azure).unwrap_err();
    let text = error.to_string();
    assert!(matches!(error, TraceError::Row { line: 3, .. }), "{text}");
    assert!(text.contains("after the first one (line 2)"), "{text}");
    assert!(text.contains("at most 31 days"), "{text}");
    // A Mooncake timestamp far beyond what a duration can hold must not panic either.
    let mooncake = "{\"timestamp\": 0, \"input_length\": 10, \"output_length\": 5}\n\
                    {\"timestamp\": 1e300, \"input_length\": 10, \"output_length\": 5}\n";
    let error = parse_trace("far.jsonl", mooncake).unwrap_err();
    assert!(matches!(error, TraceError::Row { line: 2, .. }), "{error}");
    // Exactly the limit is accepted.
    let limit_ms = vllm_keda_trace::MAX_TRACE_SPAN.as_millis();
    let at_limit = format!(
        "{{\"timestamp\": 0, \"input_length\": 1, \"output_length\": 1}}\n\
         {{\"timestamp\": {limit_ms}, \"input_length\": 1, \"output_length\": 1}}\n"
    );
    let trace = parse_trace("limit.jsonl", &at_limit).unwrap();
    assert_eq!(trace.span(), vllm_keda_trace::MAX_TRACE_SPAN);
}
