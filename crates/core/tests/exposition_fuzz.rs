//! Property tests: no input panics the parser, errors point at a real line, and every valid
//! body we render parses back to exactly what was rendered.

use std::sync::OnceLock;

use proptest::prelude::*;
use vllm_keda_core::exposition::{self, Exposition, Limits, ParseError, ParseErrorKind};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../data/fixtures");

fn fixtures() -> &'static [Vec<u8>] {
    static BODIES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    BODIES.get_or_init(|| {
        let mut paths: Vec<_> = std::fs::read_dir(FIXTURES)
            .expect("list fixtures")
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "prom"))
            .collect();
        paths.sort();
        paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
    })
}

/// Checks what must hold for any outcome of parsing `body`.
fn check_outcome(body: &[u8], result: &Result<Exposition<'_>, ParseError>) {
    match result {
        Ok(exp) => {
            for s in &exp.samples {
                let mut chars = s.name.chars();
                let first = chars.next().expect("empty sample name");
                assert!(
                    first.is_ascii_alphabetic() || first == '_' || first == ':',
                    "{:?}",
                    s.name
                );
                assert!(
                    chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
                    "{:?}",
                    s.name
                );
                for l in &s.labels {
                    let mut chars = l.name.chars();
                    let first = chars.next().expect("empty label name");
                    assert!(first.is_ascii_alphabetic() || first == '_', "{:?}", l.name);
                    assert!(
                        chars.all(|c| c.is_ascii_alphanumeric() || c == '_'),
                        "{:?}",
                        l.name
                    );
                }
            }
        }
        Err(e) => {
            let lines = 1 + body.iter().filter(|&&b| b == b'\n').count();
            assert!(
                e.line >= 1 && e.line <= lines,
                "line {} of {lines}: {e}",
                e.line
            );
            let message = e.to_string();
            assert!(message.len() < 600, "error too long: {message}");
            assert!(e.column >= 1, "{e}");
        }
    }
}

fn parse_everything(body: &[u8]) {
    let result = exposition::parse_bytes(body);
    check_outcome(body, &result);
    let lossy = String::from_utf8_lossy(body);
    let result = exposition::parse(&lossy);
    check_outcome(lossy.as_bytes(), &result);
}

/// One edit of a body.
#[derive(Debug, Clone)]
enum Mutation {
    Insert(usize, Vec<u8>),
    Delete(usize, usize),
    Replace(usize, u8),
    DuplicateLine(usize),
    Truncate(usize),
}

fn interesting_bytes() -> impl Strategy<Value = Vec<u8>> {
    let token = prop::sample::select(vec![
        &b"{"[..],
        b"}",
        b"=",
        b"\"",
        b",",
        b"\\",
        b"\n",
        b"\r",
        b"\r\n",
        b" ",
        b"\t",
        b"#",
        b"# ",
        b"# EOF\n",
        b"# TYPE ",
        b"# HELP ",
        b"NaN",
        b"+Inf",
        b"e+",
        b"e999",
        b".",
        b"-",
        b"\xff",
        b"\xc3",
        "é".as_bytes(),
        b"\0",
        b"le=\"+Inf\"",
        b"\\\"",
        b"\\n",
        b"_total",
        b":",
    ]);
    prop_oneof![
        token.prop_map(<[u8]>::to_vec),
        prop::collection::vec(any::<u8>(), 1..8),
    ]
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), interesting_bytes()).prop_map(|(at, b)| Mutation::Insert(at, b)),
        (any::<usize>(), 1usize..40).prop_map(|(at, n)| Mutation::Delete(at, n)),
        (any::<usize>(), any::<u8>()).prop_map(|(at, b)| Mutation::Replace(at, b)),
        any::<usize>().prop_map(Mutation::DuplicateLine),
        any::<usize>().prop_map(Mutation::Truncate),
    ]
}

fn apply(body: &mut Vec<u8>, m: &Mutation) {
    let len = body.len().max(1);
    match m {
        Mutation::Insert(at, bytes) => {
            let at = at % (body.len() + 1);
            body.splice(at..at, bytes.iter().copied());
        }
        Mutation::Delete(at, n) => {
            let at = at % len;
            let end = (at + n).min(body.len());
            if at < end {
                body.drain(at..end);
            }
        }
        Mutation::Replace(at, b) => {
            if !body.is_empty() {
                let at = at % body.len();
                body[at] = *b;
            }
        }
        Mutation::DuplicateLine(at) => {
            let at = at % len;
            let start = body[..at.min(body.len())]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            let end = body[start..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(body.len(), |i| start + i + 1);
            let line = body[start..end].to_vec();
            body.splice(start..start, line);
        }
        Mutation::Truncate(at) => body.truncate(at % len),
    }
}

/// Random valid samples: (name, labels, value, timestamp).
type Gen = (String, Vec<(String, String)>, f64, Option<i64>);

fn valid_sample() -> impl Strategy<Value = Gen> {
    let name = "[a-zA-Z_:][a-zA-Z0-9_:]{0,20}";
    let label = ("[a-zA-Z_][a-zA-Z0-9_]{0,10}", any::<String>());
    let value = prop_oneof![
        any::<f64>(),
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        (-1_000_000i64..1_000_000).prop_map(|v| v as f64),
    ];
    (
        name,
        prop::collection::vec(label, 0..5),
        value,
        prop::option::of(any::<i64>()),
    )
        .prop_map(|(name, mut labels, value, ts)| {
            // Distinct label names (duplicates are an error by design).
            let mut seen = std::collections::HashSet::new();
            labels.retain(|(n, _)| seen.insert(n.clone()));
            (name, labels, value, ts)
        })
}

fn render(samples: &[Gen], crlf: bool, style: usize) -> String {
    let mut body = String::new();
    for (i, (name, labels, value, ts)) in samples.iter().enumerate() {
        if style % 3 == 0 {
            body.push_str(&format!("# HELP {name} help {i}\n# TYPE {name} untyped\n"));
        }
        body.push_str(name);
        if !labels.is_empty() || style % 2 == 0 {
            body.push('{');
            for (n, v) in labels {
                let escaped = v
                    .replace('\\', "\\\\")
                    .replace('"', "\\\"")
                    .replace('\n', "\\n");
                body.push_str(&format!("{n}=\"{escaped}\","));
            }
            body.push('}');
        }
        let value = if value.is_nan() {
            "NaN".to_owned()
        } else if value.is_infinite() {
            if *value > 0.0 {
                "+Inf".to_owned()
            } else {
                "-Inf".to_owned()
            }
        } else if style % 4 == 1 {
            format!("{value:e}")
        } else {
            format!("{value:?}")
        };
        body.push(' ');
        body.push_str(&value);
        if let Some(ts) = ts {
            body.push_str(&format!(" {ts}"));
        }
        body.push_str(if crlf { "\r\n" } else { "\n" });
    }
    body
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_strings_never_panic(body in any::<String>()) {
        parse_everything(body.as_bytes());
    }

    #[test]
    fn arbitrary_bytes_never_panic(body in prop::collection::vec(any::<u8>(), 0..400)) {
        parse_everything(&body);
    }

    #[test]
    fn grammar_soup_never_panics(body in "[a-z:_{}=\",\\\\#\n\r\t +.eE0-9NaIf-]{0,300}") {
        parse_everything(body.as_bytes());
    }

    #[test]
    fn mutated_fixtures_never_panic(
        which in any::<usize>(),
        mutations in prop::collection::vec(mutation(), 1..6),
    ) {
        let bodies = fixtures();
        let mut body = bodies[which % bodies.len()].clone();
        for m in &mutations {
            apply(&mut body, m);
        }
        parse_everything(&body);
    }

    #[test]
    fn rendered_samples_parse_back_exactly(
        samples in prop::collection::vec(valid_sample(), 0..20),
        crlf in any::<bool>(),
        style in 0usize..12,
    ) {
        let body = render(&samples, crlf, style);
        let exp = exposition::parse(&body).map_err(|e| TestCaseError::fail(format!("{e}\n{body}")))?;
        prop_assert_eq!(exp.samples.len(), samples.len());
        for (got, (name, labels, value, ts)) in exp.samples.iter().zip(&samples) {
            prop_assert_eq!(got.name, name.as_str());
            let got_labels: Vec<(String, String)> =
                got.labels.iter().map(|l| (l.name.to_owned(), l.value.to_string())).collect();
            prop_assert_eq!(&got_labels, labels);
            prop_assert!(
                got.value.to_bits() == value.to_bits() || (got.value.is_nan() && value.is_nan()),
                "{} != {}", got.value, value
            );
            prop_assert_eq!(got.timestamp_ms, *ts);
        }
    }
}

proptest! {
    // Whole fixtures (about 50 KB) per case: fewer cases keep the debug run to a few seconds.
    #![proptest_config(ProptestConfig { cases: 40, ..ProptestConfig::default() })]

    #[test]
    fn errors_never_quote_a_secret_planted_in_the_body(
        which in any::<usize>(),
        secret in "zq[A-Za-z0-9]{22}",
        at in any::<usize>(),
        mutations in prop::collection::vec(mutation(), 0..4),
    ) {
        let bodies = fixtures();
        let mut body = bodies[which % bodies.len()].clone();
        let at = at % (body.len() + 1);
        body.splice(at..at, secret.bytes());
        for m in &mutations {
            apply(&mut body, m);
        }
        if let Err(e) = exposition::parse_bytes(&body) {
            let message = e.to_string();
            prop_assert!(!message.contains(&secret[..8]), "{}", message);
        }
    }

    #[test]
    fn limits_hold_on_every_body_they_let_through(
        which in any::<usize>(),
        mutations in prop::collection::vec(mutation(), 0..4),
        max_samples in 0usize..500,
        max_labels in 0usize..16,
        max_name in 0usize..32,
        max_value in 0usize..64,
    ) {
        let limits = Limits {
            max_samples,
            max_labels_per_sample: max_labels,
            max_label_name_bytes: max_name,
            max_label_value_bytes: max_value,
        };
        let bodies = fixtures();
        let mut body = bodies[which % bodies.len()].clone();
        for m in &mutations {
            apply(&mut body, m);
        }
        let text = String::from_utf8_lossy(&body);
        match exposition::parse_with_limits(&text, &limits) {
            Ok(exp) => {
                prop_assert!(exp.samples.len() <= max_samples);
                for sample in &exp.samples {
                    prop_assert!(sample.labels.len() <= max_labels);
                    for label in &sample.labels {
                        prop_assert!(label.name.len() <= max_name);
                        prop_assert!(label.value.len() <= max_value);
                    }
                }
                // What passes the limits parses the same without them.
                prop_assert_eq!(exposition::parse(&text).ok(), Some(exp));
            }
            Err(e) if matches!(e.kind, ParseErrorKind::LimitExceeded { .. }) => {
                // The same body without limits either parses past that spot or fails later.
                if let Err(unlimited) = exposition::parse(&text) {
                    prop_assert!(unlimited.line >= e.line, "{} before {}", unlimited, e);
                }
            }
            Err(e) => {
                // A syntax error: the unlimited parse meets the same one.
                prop_assert_eq!(exposition::parse(&text).err(), Some(e));
            }
        }
    }
}
