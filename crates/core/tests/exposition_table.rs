//! Table tests: one row per grammar point (asserting the whole parsed result) and one row per
//! malformed input (asserting the exact error line and message).

use std::borrow::Cow;

use vllm_keda_core::exposition::{
    self, Exposition, Family, Found, Label, Limit, Limits, MetricType, ParseErrorKind, Sample,
};

/// A sample as (name, labels, value, timestamp).
type Row = (
    &'static str,
    &'static [(&'static str, &'static str)],
    f64,
    Option<i64>,
);

fn same_value(a: f64, b: f64) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

fn assert_samples(case: &str, exp: &Exposition<'_>, expected: &[Row]) {
    let got: Vec<String> = exp.samples.iter().map(|s| format!("{s:?}")).collect();
    assert_eq!(
        exp.samples.len(),
        expected.len(),
        "{case}: samples {got:#?}"
    );
    for (s, (name, labels, value, ts)) in exp.samples.iter().zip(expected) {
        assert_eq!(s.name, *name, "{case}");
        let got_labels: Vec<(&str, &str)> = s
            .labels
            .iter()
            .map(|l| (l.name, l.value.as_ref()))
            .collect();
        assert_eq!(got_labels, *labels, "{case}: labels of {name}");
        assert!(
            same_value(s.value, *value),
            "{case}: {name} = {} not {value}",
            s.value
        );
        assert_eq!(s.timestamp_ms, *ts, "{case}: timestamp of {name}");
    }
}

fn parse_ok<'a>(case: &str, body: &'a str) -> Exposition<'a> {
    exposition::parse(body).unwrap_or_else(|e| panic!("{case}: {e}\nbody: {body:?}"))
}

#[test]
fn grammar_points_parse_to_exactly_these_samples() {
    let cases: &[(&str, &str, &[Row])] = &[
        ("empty body", "", &[]),
        (
            "colon in names",
            "vllm:num_requests_waiting 3\n",
            &[("vllm:num_requests_waiting", &[], 3.0, None)],
        ),
        (
            "names starting with _ and :",
            "_x 1\n:a_b:c9 2\n",
            &[("_x", &[], 1.0, None), (":a_b:c9", &[], 2.0, None)],
        ),
        ("no trailing newline", "a 1", &[("a", &[], 1.0, None)]),
        (
            "blank and whitespace-only lines",
            "\n\n  \t\na 1\n\n",
            &[("a", &[], 1.0, None)],
        ),
        (
            "leading whitespace before a sample",
            "  \ta 1\n",
            &[("a", &[], 1.0, None)],
        ),
        (
            "crlf line endings",
            "# TYPE a gauge\r\na{x=\"1\"} 2\r\nb 3 17\r\n",
            &[("a", &[("x", "1")], 2.0, None), ("b", &[], 3.0, Some(17))],
        ),
        ("byte-order mark", "\u{feff}a 1\n", &[("a", &[], 1.0, None)]),
        (
            "one label",
            "a{x=\"1\"} 1\n",
            &[("a", &[("x", "1")], 1.0, None)],
        ),
        (
            "labels in written order",
            "a{z=\"1\",a=\"2\",m=\"3\"} 1\n",
            &[("a", &[("z", "1"), ("a", "2"), ("m", "3")], 1.0, None)],
        ),
        ("empty label set", "a{} 1\n", &[("a", &[], 1.0, None)]),
        (
            "trailing comma",
            "a{x=\"1\",} 1\n",
            &[("a", &[("x", "1")], 1.0, None)],
        ),
        (
            "empty label value",
            "a{x=\"\"} 1\n",
            &[("a", &[("x", "")], 1.0, None)],
        ),
        (
            "blanks between tokens",
            "a \t{ x = \"1\" ,\ty=\"2\" , } \t 1 \t 5 \t\n",
            &[("a", &[("x", "1"), ("y", "2")], 1.0, Some(5))],
        ),
        (
            "no blank after }",
            "a{x=\"1\"}1\n",
            &[("a", &[("x", "1")], 1.0, None)],
        ),
        (
            "label escapes",
            "a{x=\"a\\\\b\\\"c\\nd\"} 1\n",
            &[("a", &[("x", "a\\b\"c\nd")], 1.0, None)],
        ),
        (
            "delimiters inside a label value",
            "a{x=\"a # b}, c=\\\"d\\\"\"} 1\n",
            &[("a", &[("x", "a # b}, c=\"d\"")], 1.0, None)],
        ),
        (
            "utf-8 label value",
            "a{x=\"ümlaut 🚀\"} 1\n",
            &[("a", &[("x", "ümlaut 🚀")], 1.0, None)],
        ),
        (
            "label names with digits and underscores",
            "a{_x1=\"1\",Y_2=\"2\"} 1\n",
            &[("a", &[("_x1", "1"), ("Y_2", "2")], 1.0, None)],
        ),
        (
            "integer and python floats",
            "a 14\nb 14.0\nc 0.9003\n",
            &[
                ("a", &[], 14.0, None),
                ("b", &[], 14.0, None),
                ("c", &[], 0.9003, None),
            ],
        ),
        (
            "exponents",
            "a 1.144722e+06\nb 1e-05\nc 1.5E3\nd 6.0521304064e+10\n",
            &[
                ("a", &[], 1.144722e6, None),
                ("b", &[], 1e-5, None),
                ("c", &[], 1500.0, None),
                ("d", &[], 6.0521304064e10, None),
            ],
        ),
        (
            "17-digit python repr",
            "a 1.7672580591200001e+09\n",
            &[("a", &[], 1.767_258_059_120_000_1e9, None)],
        ),
        (
            "signs and bare dots",
            "a -1.5\nb +2\nc .5\nd -0\n",
            &[
                ("a", &[], -1.5, None),
                ("b", &[], 2.0, None),
                ("c", &[], 0.5, None),
                ("d", &[], -0.0, None),
            ],
        ),
        (
            "special values",
            "a NaN\nb +Inf\nc -Inf\nd Inf\ne nan\nf +inf\n",
            &[
                ("a", &[], f64::NAN, None),
                ("b", &[], f64::INFINITY, None),
                ("c", &[], f64::NEG_INFINITY, None),
                ("d", &[], f64::INFINITY, None),
                ("e", &[], f64::NAN, None),
                ("f", &[], f64::INFINITY, None),
            ],
        ),
        (
            "le=\"+Inf\" stays a string label",
            "a_bucket{le=\"+Inf\"} 7\n",
            &[("a_bucket", &[("le", "+Inf")], 7.0, None)],
        ),
        (
            "integer millisecond timestamps",
            "a 1 1712345678901\nb{x=\"y\"} 2 -5\n",
            &[
                ("a", &[], 1.0, Some(1_712_345_678_901)),
                ("b", &[("x", "y")], 2.0, Some(-5)),
            ],
        ),
        (
            "openmetrics fractional-second timestamp",
            "a 1 1520879607.789\n",
            &[("a", &[], 1.0, Some(1_520_879_607_789))],
        ),
        (
            "exemplar after value",
            "a_bucket{le=\"1\"} 3 # {trace_id=\"abc\"} 0.5 1520879607.789\n",
            &[("a_bucket", &[("le", "1")], 3.0, None)],
        ),
        (
            "exemplar after timestamp",
            "a_total 3 1000 # {trace_id=\"abc\"} 1\n",
            &[("a_total", &[], 3.0, Some(1000))],
        ),
        (
            "ordinary comments ignored",
            "# just words\n#no space\n#\n# HELPER a b\n# TYPEa\na 1\n",
            &[("a", &[], 1.0, None)],
        ),
        (
            "# EOF ends the body",
            "a 1\n# EOF\nthis is not parsed {\n",
            &[("a", &[], 1.0, None)],
        ),
        (
            "# EOF with trailing blanks",
            "a 1\n# EOF  \r\n}}}",
            &[("a", &[], 1.0, None)],
        ),
        (
            "# EOF followed by more text is a comment",
            "a 1\n# EOF here\nb 2\n",
            &[("a", &[], 1.0, None), ("b", &[], 2.0, None)],
        ),
        (
            "# EOFX is a comment",
            "# EOFX\na 1\n",
            &[("a", &[], 1.0, None)],
        ),
        (
            "_created kept as an ordinary sample",
            "# TYPE a counter\na_total 1\na_created 1.7e+09\n",
            &[("a_total", &[], 1.0, None), ("a_created", &[], 1.7e9, None)],
        ),
    ];
    for (case, body, expected) in cases {
        let exp = parse_ok(case, body);
        assert_samples(case, &exp, expected);
    }
}

fn family<'a>(
    name: &'a str,
    t: MetricType,
    help: Option<&'a str>,
    unit: Option<&'a str>,
) -> Family<'a> {
    Family {
        name,
        metric_type: t,
        help: help.map(Cow::Borrowed),
        unit,
    }
}

#[test]
fn help_type_and_unit_in_any_order_missing_or_repeated() {
    use MetricType::*;
    let cases: &[(&str, &str, Vec<Family<'static>>)] = &[
        (
            "help then type",
            "# HELP a Help.\n# TYPE a gauge\na 1\n",
            vec![family("a", Gauge, Some("Help."), None)],
        ),
        (
            "type then help",
            "# TYPE a counter\n# HELP a Help.\na 1\n",
            vec![family("a", Counter, Some("Help."), None)],
        ),
        (
            "type only",
            "# TYPE a histogram\n",
            vec![family("a", Histogram, None, None)],
        ),
        (
            "help only is untyped",
            "# HELP a Help.\n",
            vec![family("a", Untyped, Some("Help."), None)],
        ),
        ("nothing declared", "a 1\n", vec![]),
        (
            "repeated type: last wins, one family",
            "# TYPE a gauge\n# TYPE b gauge\n# TYPE a counter\n",
            vec![
                family("a", Counter, None, None),
                family("b", Gauge, None, None),
            ],
        ),
        (
            "repeated help: last wins",
            "# HELP a one\n# HELP a two\n",
            vec![family("a", Untyped, Some("two"), None)],
        ),
        (
            "help without text",
            "# HELP a\n# HELP b   \n",
            vec![
                family("a", Untyped, Some(""), None),
                family("b", Untyped, Some(""), None),
            ],
        ),
        (
            "help keeps inner spacing",
            "# HELP a  two  words\n",
            vec![family("a", Untyped, Some("two  words"), None)],
        ),
        (
            "tabs between comment tokens",
            "#\tTYPE\ta\tgauge\t\n",
            vec![family("a", Gauge, None, None)],
        ),
        (
            "openmetrics unit",
            "# TYPE a_seconds histogram\n# UNIT a_seconds seconds\n",
            vec![family("a_seconds", Histogram, None, Some("seconds"))],
        ),
        (
            "unit without value",
            "# UNIT a\n",
            vec![family("a", Untyped, None, None)],
        ),
        (
            "every type token, any case",
            "# TYPE a COUNTER\n# TYPE b Gauge\n# TYPE c summary\n# TYPE d untyped\n# TYPE e unknown\n# TYPE f info\n# TYPE g stateset\n# TYPE h gaugehistogram\n",
            vec![
                family("a", Counter, None, None),
                family("b", Gauge, None, None),
                family("c", Summary, None, None),
                family("d", Untyped, None, None),
                family("e", Untyped, None, None),
                family("f", Info, None, None),
                family("g", StateSet, None, None),
                family("h", GaugeHistogram, None, None),
            ],
        ),
        (
            "names with colons",
            "# TYPE vllm:x gauge\n",
            vec![family("vllm:x", Gauge, None, None)],
        ),
    ];
    for (case, body, expected) in cases {
        let exp = parse_ok(case, body);
        assert_eq!(&exp.families, expected, "{case}");
    }
}

#[test]
fn help_escapes() {
    let exp = parse_ok("help escapes", "# HELP a x\\\\y\\nz \\q\n");
    assert_eq!(exp.families[0].help.as_deref(), Some("x\\y\nz \\q"));
}

#[test]
fn label_values_are_borrowed_unless_unescaped() {
    let body = "a{x=\"plain\",y=\"esc\\\"aped\"} 1\n";
    let exp = parse_ok("cow", body);
    let labels = &exp.samples[0].labels;
    assert_eq!(
        labels[0],
        Label {
            name: "x",
            value: Cow::Borrowed("plain")
        }
    );
    assert!(matches!(labels[0].value, Cow::Borrowed(_)));
    assert!(matches!(labels[1].value, Cow::Owned(_)));
    assert_eq!(labels[1].value, "esc\"aped");
}

#[test]
fn openmetrics_counter_families_without_total() {
    let body = "# TYPE vllm:x counter\n# HELP vllm:x Help.\nvllm:x_total{a=\"1\"} 5\nvllm:x_created{a=\"1\"} 1.7e9\n\
                # TYPE h histogram\nh_bucket{le=\"+Inf\"} 1\nh_count 1\nh_sum 2\n# TYPE g gauge\ng_total 3\n# EOF\n";
    let exp = parse_ok("openmetrics", body);
    let family_of = |n: &str| exp.family_of(n).map(|f| f.name);
    assert_eq!(family_of("vllm:x_total"), Some("vllm:x"));
    assert_eq!(family_of("vllm:x_created"), Some("vllm:x"));
    assert_eq!(family_of("h_bucket"), Some("h"));
    assert_eq!(family_of("h_count"), Some("h"));
    assert_eq!(family_of("g"), Some("g"));
    // A gauge does not own `_total` samples; unknown names have no family.
    assert_eq!(family_of("g_total"), None);
    assert_eq!(family_of("nope"), None);
    assert_eq!(exp.metric_type("vllm:x"), Some(MetricType::Counter));
    assert_eq!(exp.samples.len(), 6);
}

#[test]
fn exact_sample_struct() {
    let exp = parse_ok("struct", "a{x=\"1\"} 2 3\n");
    assert_eq!(
        exp.samples,
        vec![Sample {
            name: "a",
            labels: vec![Label {
                name: "x",
                value: Cow::Borrowed("1")
            }]
            .into(),
            value: 2.0,
            timestamp_ms: Some(3),
        }]
    );
}

const NUMBER_HINT: &str =
    "the sample value is not a number: expected one such as 1, 0.25, 1.5e+06, NaN, +Inf or -Inf";
const ESCAPE_HINT: &str =
    "invalid escape sequence in a label value: only \\\\, \\\" and \\n are allowed";
const TYPE_HINT: &str = "unknown metric type in # TYPE: expected counter, gauge, histogram, summary, untyped, unknown, info, stateset or gaugehistogram";
const CHAR: &str = "found a character not allowed there";
const EOL: &str = "found end of line";

#[test]
fn malformed_inputs_fail_with_exact_errors() {
    let long = "x".repeat(100);
    let long_body = format!("a {long}\n");
    let cases: Vec<(&str, &str, String)> = vec![
        ("missing =", "a 1\n\n# c\nb 2\n\n\nvllm:x{model_name\"m\"} 1\n", format!("line 7, column 18: expected '=' after a label name, {CHAR}")),
        ("unquoted label value", "a{x=1} 1", format!("line 1, column 5: expected '\"' to open a label value, {CHAR}")),
        ("unterminated label value", "a{x=\"1} 1", format!("line 1, column 10: expected '\"' to close a label value, {EOL}")),
        ("backslash at end of line", "a{x=\"1\\", format!("line 1, column 8: expected '\"' to close a label value, {EOL}")),
        ("missing comma", "a{x=\"1\" y=\"2\"} 1", format!("line 1, column 9: expected ',' or '}}' after a label value, {CHAR}")),
        ("unclosed label set", "a{x=\"1\"", format!("line 1, column 8: expected ',' or '}}' after a label value, {EOL}")),
        ("lone comma", "a{,} 1", format!("line 1, column 3: expected a label name or '}}', {CHAR}")),
        ("double comma", "a{x=\"1\",,} 1", format!("line 1, column 9: expected a label name or '}}' after ',', {CHAR}")),
        ("label name starting with a digit", "a{1x=\"1\"} 1", format!("line 1, column 3: expected a label name or '}}', {CHAR}")),
        ("colon in label name", "a{x:y=\"1\"} 1", format!("line 1, column 4: expected '=' after a label name, {CHAR}")),
        ("label name only", "a{x} 1", format!("line 1, column 4: expected '=' after a label name, {CHAR}")),
        ("invalid escape", "a{x=\"a\\tb\"} 1", format!("line 1, column 7: {ESCAPE_HINT}")),
        ("duplicate label", "a{x=\"1\",x=\"2\"} 1", "line 1, column 9: a label name appears twice in one label set".into()),
        ("missing value", "a\n", format!("line 1, column 2: expected a sample value, {EOL}")),
        ("missing value after labels", "a{x=\"1\"}   \r\n", format!("line 1, column 12: expected a sample value, {EOL}")),
        ("word value", "a abc", format!("line 1, column 3: {NUMBER_HINT}")),
        ("digit separators", "a 1_000", format!("line 1, column 3: {NUMBER_HINT}")),
        ("hex float", "a 0x1p-2", format!("line 1, column 3: {NUMBER_HINT}")),
        ("extra }", "a{x=\"1\"}} 1", format!("line 1, column 9: {NUMBER_HINT}")),
        ("long value", long_body.as_str(), format!("line 1, column 3: {NUMBER_HINT}")),
        ("word timestamp", "a 1 abc", "line 1, column 5: the timestamp is not a number: expected integer milliseconds since the unix epoch".into()),
        ("timestamp out of range", "a 1 99999999999999999999", "line 1, column 5: the timestamp is not a number: expected integer milliseconds since the unix epoch".into()),
        ("third token", "a 1 2 3", format!("line 1, column 7: expected end of line after the timestamp, {CHAR}")),
        ("name starting with a digit", "1a 1", format!("line 1, column 1: expected a metric name, {CHAR}")),
        ("dash in name", "a-b 1", format!("line 1, column 2: expected '{{' or a space after the metric name, {CHAR}")),
        ("dot in name", "a.b 1", format!("line 1, column 2: expected '{{' or a space after the metric name, {CHAR}")),
        ("quoted utf-8 name syntax", "{\"a.b\"} 1", format!("line 1, column 1: expected a metric name, {CHAR}")),
        ("non-ascii name", "é 1", format!("line 1, column 1: expected a metric name, {CHAR}")),
        ("indented bad name", "  -a 1", format!("line 1, column 3: expected a metric name, {CHAR}")),
        ("unknown type", "# TYPE a countr", format!("line 1, column 10: {TYPE_HINT}")),
        ("type without type", "# TYPE a\n", format!("line 1, column 9: expected a metric type after the metric name, {EOL}")),
        ("type with extra text", "# TYPE a counter extra", format!("line 1, column 18: expected end of line after the metric type, {CHAR}")),
        ("help without name", "# HELP\n", format!("line 1, column 7: expected a metric name after # HELP, # TYPE or # UNIT, {EOL}")),
        ("help with bad name", "# HELP 1a x", format!("line 1, column 8: expected a metric name after # HELP, # TYPE or # UNIT, {CHAR}")),
        ("help with labels", "# HELP a{x} y", format!("line 1, column 9: expected a space after the metric name, {CHAR}")),
        ("unit with bad name", "# UNIT -a s", format!("line 1, column 8: expected a metric name after # HELP, # TYPE or # UNIT, {CHAR}")),
        // An exemplar is skipped with the rest of its line, which still counts as one line.
        ("bad value after an exemplar line", "a_total 3 # {trace_id=\"abc\"} 1\nb abc\n", format!("line 2, column 3: {NUMBER_HINT}")),
        ("bad value after a timestamped exemplar line", "a_total 3 1000 # {trace_id=\"abc\"} 1\r\n\nb abc\n", format!("line 3, column 3: {NUMBER_HINT}")),
        // A carriage return ends a token only at the end of its line.
        ("carriage return inside the line after a value", "a 1\r 2\n", format!("line 1, column 3: {NUMBER_HINT}")),
        ("carriage return inside the line after a timestamp", "a 1 2\r x\n", "line 1, column 5: the timestamp is not a number: expected integer milliseconds since the unix epoch".into()),
        // The byte-order mark's three bytes count on line 1 only, as an editor shows them.
        ("byte-order mark before a bad value", "\u{feff}a abc\n", format!("line 1, column 6: {NUMBER_HINT}")),
        ("byte-order mark before a bad type", "\u{feff}# TYPE a countr", format!("line 1, column 13: {TYPE_HINT}")),
        ("byte-order mark, bad value on line 2", "\u{feff}a 1\nb abc\n", format!("line 2, column 3: {NUMBER_HINT}")),
        ("error line counts crlf and blank lines", "a 1\r\n\r\n# HELP a x\r\n\r\nb{x=\"1\"} zz\r\n", format!("line 5, column 10: {NUMBER_HINT}")),
    ];
    let mut wrong = Vec::new();
    for (case, body, expected) in &cases {
        match exposition::parse(body) {
            Ok(exp) => panic!("{case}: parsed, expected error {expected:?}: {exp:?}"),
            Err(e) if &e.to_string() != expected => wrong.push(format!("{case}: got {e}")),
            Err(_) => {}
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn errors_never_quote_the_body() {
    // Every malformed spot next to a secret: the message names line, column and class only.
    let secret = "tok_9f8e7d6c5b4a39281706f5e4d3c2b1a0";
    let bodies = [
        format!("{secret} abc\n"),
        format!("m{{x=\"{secret}\"}} {secret}\n"),
        format!("m{{{secret}}} 1\n"),
        format!("m{{x=\"{secret}\\q\"}} 1\n"),
        format!("# TYPE m {secret}\n"),
        format!("# HELP {secret}{{ x\n"),
        format!("m 1 {secret}\n"),
        format!("m{{x=\"{secret}"),
        format!("{secret}-x 1\n"),
    ];
    for body in &bodies {
        let e = exposition::parse(body).unwrap_err().to_string();
        assert!(!e.contains(secret) && !e.contains("tok_"), "{body:?}: {e}");
    }
}

#[test]
fn error_fields_are_structured() {
    let e = exposition::parse("a 1\nb{x=\"1\",x=\"2\"} 1\n").unwrap_err();
    assert_eq!((e.line, e.column), (2, 9));
    assert_eq!(e.kind, ParseErrorKind::DuplicateLabel);
    let e = exposition::parse("a{x 1\n").unwrap_err();
    assert_eq!(
        e.kind,
        ParseErrorKind::Unexpected {
            expected: "'=' after a label name",
            found: Found::Character,
        }
    );
    assert_eq!(e.column, 5);
}

#[test]
fn limits_stop_the_parse_and_name_the_limit() {
    let limits = Limits {
        max_samples: 3,
        max_labels_per_sample: 2,
        max_label_name_bytes: 8,
        max_label_value_bytes: 16,
    };
    let ok = "a 1\nb{x=\"1\",y=\"2\"} 2\nc{long_nam=\"0123456789abcdef\"} 3\n";
    assert_eq!(
        exposition::parse_with_limits(ok, &limits)
            .unwrap()
            .samples
            .len(),
        3
    );
    let cases = [
        ("a 1\nb 2\nc 3\nd 4\n", Limit::Samples, 4, 1),
        (
            "a{x=\"1\",y=\"2\",z=\"3\"} 1\n",
            Limit::LabelsPerSample,
            1,
            15,
        ),
        ("a{long_name=\"1\"} 1\n", Limit::LabelNameLength, 1, 3),
        (
            "a{x=\"0123456789abcdefg\"} 1\n",
            Limit::LabelValueLength,
            1,
            6,
        ),
    ];
    for (body, limit, line, column) in cases {
        let e = exposition::parse_with_limits(body, &limits).unwrap_err();
        let max = match limit {
            Limit::Samples => 3,
            Limit::LabelsPerSample => 2,
            Limit::LabelNameLength => 8,
            Limit::LabelValueLength => 16,
        };
        assert_eq!(
            e.kind,
            ParseErrorKind::LimitExceeded { limit, max },
            "{body:?}"
        );
        assert_eq!((e.line, e.column), (line, column), "{body:?}");
        assert!(e.to_string().contains(limit.describe()), "{e}");
        // Without limits the same body parses (or fails for another reason).
        assert!(!matches!(
            exposition::parse(body).map_err(|e| e.kind),
            Err(ParseErrorKind::LimitExceeded { .. })
        ));
    }
    // A huge body of tiny samples stops at the limit instead of growing the sample list.
    let huge = "a 1\n".repeat(100_000);
    let e = exposition::parse_with_limits(&huge, &limits).unwrap_err();
    assert_eq!(e.line, 4);
}

#[test]
fn parse_bytes_reports_invalid_utf8_with_its_line() {
    let body = b"a 1\nb 2\nc{x=\"\xff\"} 3\n";
    let e = exposition::parse_bytes(body).unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 3, column 6: invalid UTF-8: the body must be UTF-8 text"
    );
    let e = exposition::parse_bytes(b"\xc3").unwrap_err();
    assert_eq!(
        e.to_string(),
        "line 1, column 1: invalid UTF-8: the body must be UTF-8 text"
    );
    let exp = exposition::parse_bytes(b"a 1\n").unwrap();
    assert_eq!(exp.samples.len(), 1);
}

#[test]
fn large_label_sets() {
    let labels: Vec<String> = (0..40).map(|i| format!("l{i}=\"{i}\"")).collect();
    let body = format!("a{{{}}} 1\n", labels.join(","));
    let exp = parse_ok("40 distinct labels", &body);
    assert_eq!(exp.samples[0].labels.len(), 40);
    assert_eq!(exp.samples[0].label("l39"), Some("39"));

    let body = format!("a{{{},l7=\"again\"}} 1\n", labels.join(","));
    let e = exposition::parse(&body).unwrap_err();
    assert_eq!(e.kind, ParseErrorKind::DuplicateLabel);
    assert_eq!(e.column, body.find('}').unwrap() + 1);

    // Up to 32 labels each new one is compared with those before it, and the error points at
    // the repeated name; from the 33rd on, the set is checked once at its `}`.
    let body = format!("a{{{},l0=\"again\"}} 1\n", labels[..31].join(","));
    let e = exposition::parse(&body).unwrap_err();
    assert_eq!(e.kind, ParseErrorKind::DuplicateLabel);
    assert_eq!(e.column, body.find(",l0=").unwrap() + 2);
    let body = format!("a{{{},l0=\"again\"}} 1\n", labels[..32].join(","));
    let e = exposition::parse(&body).unwrap_err();
    assert_eq!(e.kind, ParseErrorKind::DuplicateLabel);
    assert_eq!(e.column, body.find('}').unwrap() + 1);
}
