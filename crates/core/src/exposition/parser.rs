//! The single-pass parser behind [`super::parse`].
//!
//! Sample lines are parsed straight off the body (the line end is found as the tokens are), so
//! each byte is looked at about once; comment lines are cut out first and parsed as a line.
//! Works on bytes and only slices the `&str` at ASCII delimiters, so every slice is on a
//! character boundary; slicing goes through `get` anyway, so a logic slip yields an error or an
//! empty token, never a panic. Errors are the slow path: only they rebuild the line's text.

use std::borrow::Cow;
use std::collections::HashMap;

use super::error::{Limit, ParseError, ParseErrorKind, unexpected};
use super::number::{parse_timestamp_ms, parse_value};
use super::scan::{
    LABEL_CONTINUE, LABEL_START, NAME_CONTINUE, NAME_START, find_newline, find_value_stop,
    is_blank, is_eol, scan_name, scan_token, skip_blanks,
};
use super::{Exposition, Family, Label, Labels, Limits, MetricType, Sample};

/// A failure and the body offset it is about.
type Fail = (ParseErrorKind, usize);

#[inline]
fn slice(text: &str, from: usize, to: usize) -> &str {
    text.get(from..to).unwrap_or_default()
}

enum Flow {
    Continue,
    Eof,
}

struct Parser<'a> {
    body: &'a str,
    limits: Limits,
    out: Exposition<'a>,
    /// Family name -> index in `out.families`, for repeated `# HELP` / `# TYPE`.
    family_index: HashMap<&'a str, usize>,
    /// Byte offset of the current line in `body`.
    line_start: usize,
}

/// Parses a whole body; see [`super::parse`].
pub(super) fn parse(body: &str, limits: Limits) -> Result<Exposition<'_>, ParseError> {
    let bom = if body.starts_with('\u{feff}') { 3 } else { 0 };
    let body = body.get(bom..).unwrap_or_default();
    let b = body.as_bytes();
    // Typical exporters write 60-140 bytes per sample line and 300-700 bytes per family.
    let families_guess = (body.len() / 512).min(1024) + 8;
    let mut p = Parser {
        body,
        out: Exposition {
            samples: Vec::with_capacity((body.len() / 96 + 4).min(limits.max_samples)),
            families: Vec::with_capacity(families_guess),
        },
        family_index: HashMap::with_capacity(families_guess),
        line_start: 0,
        limits,
    };
    let fail = |line_number: usize, line_start: usize, (kind, pos): Fail| {
        // The byte-order mark counts on line 1, as an editor would show it.
        let shift = if line_number == 1 { bom } else { 0 };
        ParseError {
            line: line_number,
            column: 1 + pos.saturating_sub(line_start) + shift,
            kind,
        }
    };
    let mut line_number = 0;
    let mut i = 0;
    while i < b.len() {
        line_number += 1;
        p.line_start = i;
        let first = skip_blanks(b, i);
        let next = if is_eol(b, first) {
            after_eol(b, first)
        } else if b[first] == b'#' {
            let end = find_newline(b, first);
            let line = slice(body, i, end);
            let line = line.strip_suffix('\r').unwrap_or(line);
            match p.comment(line, first - i + 1) {
                Ok(Flow::Continue) => end + 1,
                Ok(Flow::Eof) => break,
                Err((kind, pos)) => return Err(fail(line_number, 0, (kind, pos))),
            }
        } else {
            match p.sample(first) {
                Ok(next) => next,
                Err(failure) => return Err(fail(line_number, i, failure)),
            }
        };
        i = next;
    }
    Ok(p.out)
}

/// Index after the line end at `i` (`\n`, `\r\n`, a final `\r`, or end of input).
#[inline]
fn after_eol(b: &[u8], i: usize) -> usize {
    match b.get(i) {
        Some(b'\r') => (i + 2).min(b.len()),
        Some(_) => i + 1,
        None => i,
    }
}

/// The token `from..to` without a `\r` that ends its line.
#[inline]
fn token_before_eol(body: &str, from: usize, to: usize) -> &str {
    let token = slice(body, from, to);
    match token.strip_suffix('\r') {
        Some(stripped) if is_eol(body.as_bytes(), to) => stripped,
        _ => token,
    }
}

impl<'a> Parser<'a> {
    /// An [`ParseErrorKind::Unexpected`] for body offset `pos` on the current line.
    #[cold]
    fn unexpected_at(&self, expected: &'static str, pos: usize) -> Fail {
        let end = find_newline(self.body.as_bytes(), self.line_start);
        let line = slice(self.body, self.line_start, end);
        let line = line.strip_suffix('\r').unwrap_or(line);
        (
            unexpected(expected, line, pos.saturating_sub(self.line_start)),
            pos,
        )
    }

    /// A [`ParseErrorKind::LimitExceeded`] at body offset `pos`.
    #[cold]
    fn limit_at(&self, limit: Limit, pos: usize) -> Fail {
        let max = match limit {
            Limit::Samples => self.limits.max_samples,
            Limit::LabelsPerSample => self.limits.max_labels_per_sample,
            Limit::LabelNameLength => self.limits.max_label_name_bytes,
            Limit::LabelValueLength => self.limits.max_label_value_bytes,
        };
        (ParseErrorKind::LimitExceeded { limit, max }, pos)
    }

    /// Parses the sample line whose name starts at `start`; returns the start of the next line.
    fn sample(&mut self, start: usize) -> Result<usize, Fail> {
        if self.out.samples.len() >= self.limits.max_samples {
            return Err(self.limit_at(Limit::Samples, start));
        }
        let body = self.body;
        let b = body.as_bytes();
        let name_end = scan_name(b, start, NAME_START, NAME_CONTINUE);
        if name_end == start {
            return Err(self.unexpected_at("a metric name", start));
        }
        let name = slice(body, start, name_end);
        let mut i = name_end;
        let mut labels = Labels::new();
        match b.get(i) {
            Some(b'{') => i = self.labels(name, i + 1, &mut labels)?,
            Some(&c) if is_blank(c) => {
                i = skip_blanks(b, i);
                if b.get(i) == Some(&b'{') {
                    i = self.labels(name, i + 1, &mut labels)?;
                }
            }
            // Reported below as a missing value.
            _ if is_eol(b, i) => {}
            _ => {
                return Err(self.unexpected_at("'{' or a space after the metric name", i));
            }
        }

        i = skip_blanks(b, i);
        let value_end = scan_token(b, i);
        let token = token_before_eol(body, i, value_end);
        if token.is_empty() {
            return Err(self.unexpected_at("a sample value", i));
        }
        let value = parse_value(token).ok_or((ParseErrorKind::InvalidValue, i))?;

        let mut timestamp_ms = None;
        i = skip_blanks(b, value_end);
        // A `#` after the value starts an OpenMetrics exemplar: skipped with the rest of the line.
        if !is_eol(b, i) && b[i] != b'#' {
            let end = scan_token(b, i);
            let token = token_before_eol(body, i, end);
            timestamp_ms =
                Some(parse_timestamp_ms(token).ok_or((ParseErrorKind::InvalidTimestamp, i))?);
            i = skip_blanks(b, end);
            if !is_eol(b, i) && b[i] != b'#' {
                return Err(self.unexpected_at("end of line after the timestamp", i));
            }
        }
        self.out.samples.push(Sample {
            name,
            labels,
            value,
            timestamp_ms,
        });
        if is_eol(b, i) {
            Ok(after_eol(b, i))
        } else {
            Ok(find_newline(b, i) + 1)
        }
    }

    /// Parses a label set after its `{` into `labels`; returns the index after the `}`.
    fn labels(&self, _metric: &str, mut i: usize, labels: &mut Labels<'a>) -> Result<usize, Fail> {
        let body = self.body;
        let b = body.as_bytes();
        loop {
            i = skip_blanks(b, i);
            if b.get(i) == Some(&b'}') {
                return close_labels(labels, i + 1);
            }
            let name_start = i;
            let name_end = scan_name(b, i, LABEL_START, LABEL_CONTINUE);
            if name_end == i {
                let expected = if labels.is_empty() {
                    "a label name or '}'"
                } else {
                    "a label name or '}' after ','"
                };
                return Err(self.unexpected_at(expected, i));
            }
            if labels.len() >= self.limits.max_labels_per_sample {
                return Err(self.limit_at(Limit::LabelsPerSample, i));
            }
            if name_end - i > self.limits.max_label_name_bytes {
                return Err(self.limit_at(Limit::LabelNameLength, i));
            }
            let name = slice(body, i, name_end);
            i = skip_blanks(b, name_end);
            if b.get(i) != Some(&b'=') {
                return Err(self.unexpected_at("'=' after a label name", i));
            }
            i = skip_blanks(b, i + 1);
            if b.get(i) != Some(&b'"') {
                return Err(self.unexpected_at("'\"' to open a label value", i));
            }
            let value_start = i + 1;
            let (value, after) = self.label_value(name, value_start)?;
            if value.len() > self.limits.max_label_value_bytes {
                return Err(self.limit_at(Limit::LabelValueLength, value_start));
            }
            if labels.len() < SCAN_FOR_DUPLICATES_BELOW && labels.iter().any(|l| l.name == name) {
                return Err((ParseErrorKind::DuplicateLabel, name_start));
            }
            labels.push(Label { name, value });
            i = skip_blanks(b, after);
            match b.get(i) {
                Some(b',') => i += 1,
                Some(b'}') => return close_labels(labels, i + 1),
                _ => {
                    return Err(self.unexpected_at("',' or '}' after a label value", i));
                }
            }
        }
    }

    /// Reads a label value after its opening quote; returns it and the index after the closing
    /// quote. Borrowed unless it holds escapes.
    fn label_value(&self, _label: &str, start: usize) -> Result<(Cow<'a, str>, usize), Fail> {
        let body = self.body;
        let b = body.as_bytes();
        let mut i = find_value_stop(b, start);
        if b.get(i) == Some(&b'"') {
            return Ok((Cow::Borrowed(slice(body, start, i)), i + 1));
        }
        // Escapes present: copy into an owned value.
        let mut owned = String::with_capacity(i - start + 16);
        let mut run_start = start;
        loop {
            match b.get(i) {
                Some(b'"') => {
                    owned.push_str(slice(body, run_start, i));
                    return Ok((Cow::Owned(owned), i + 1));
                }
                Some(b'\\') if !is_eol(b, i + 1) => {
                    owned.push_str(slice(body, run_start, i));
                    owned.push(match b[i + 1] {
                        b'\\' => '\\',
                        b'"' => '"',
                        b'n' => '\n',
                        _ => return Err((ParseErrorKind::InvalidEscape, i)),
                    });
                    i += 2;
                    run_start = i;
                    i = find_value_stop(b, i);
                }
                // End of line (or a backslash right before it): unterminated.
                _ => {
                    return Err(
                        self.unexpected_at("'\"' to close a label value", find_newline(b, i))
                    );
                }
            }
        }
    }

    fn comment(&mut self, line: &'a str, after_hash: usize) -> Result<Flow, Fail> {
        let b = line.as_bytes();
        let keyword_start = skip_blanks(b, after_hash);
        if keyword_start == after_hash {
            // `#HELP` or `#comment`: an ordinary comment.
            return Ok(Flow::Continue);
        }
        let keyword_end = scan_token(b, keyword_start);
        let keyword = slice(line, keyword_start, keyword_end);
        match keyword {
            "HELP" | "TYPE" | "UNIT" => {}
            "EOF" if skip_blanks(b, keyword_end) == b.len() => return Ok(Flow::Eof),
            _ => return Ok(Flow::Continue),
        }
        let fail = |expected: &'static str, pos: usize| (unexpected(expected, line, pos), pos);
        let name_start = skip_blanks(b, keyword_end);
        let name_end = scan_name(b, name_start, NAME_START, NAME_CONTINUE);
        if name_end == name_start {
            return Err(fail(
                "a metric name after # HELP, # TYPE or # UNIT",
                name_start,
            ));
        }
        let name = slice(line, name_start, name_end);
        if name_end < b.len() && !is_blank(b[name_end]) {
            return Err(fail("a space after the metric name", name_end));
        }
        let text_start = skip_blanks(b, name_end);
        match keyword {
            "HELP" => {
                let text = slice(line, text_start, b.len());
                self.family(name).help = Some(unescape_help(text));
            }
            "TYPE" => {
                let type_end = scan_token(b, text_start);
                if type_end == text_start {
                    return Err(fail("a metric type after the metric name", text_start));
                }
                let token = slice(line, text_start, type_end);
                let metric_type = MetricType::from_token(token)
                    .ok_or((ParseErrorKind::UnknownType, text_start))?;
                let trailing = skip_blanks(b, type_end);
                if trailing < b.len() {
                    return Err(fail("end of line after the metric type", trailing));
                }
                self.family(name).metric_type = metric_type;
            }
            _ => {
                let unit = slice(line, text_start, scan_token(b, text_start));
                self.family(name).unit = (!unit.is_empty()).then_some(unit);
            }
        }
        Ok(Flow::Continue)
    }

    /// The family named `name`, declared now if new.
    fn family(&mut self, name: &'a str) -> &mut Family<'a> {
        // `# HELP x` is almost always followed by `# TYPE x`: check the last family first.
        let last = self.out.families.len().wrapping_sub(1);
        let index = if self.out.families.get(last).is_some_and(|f| f.name == name) {
            last
        } else {
            let families = &mut self.out.families;
            *self.family_index.entry(name).or_insert_with(|| {
                families.push(Family {
                    name,
                    metric_type: MetricType::Untyped,
                    help: None,
                    unit: None,
                });
                families.len() - 1
            })
        };
        &mut self.out.families[index]
    }
}

/// Unescapes `# HELP` text: `\\` and `\n`; any other backslash stays as written, as in the
/// reference parsers.
fn unescape_help(text: &str) -> Cow<'_, str> {
    if !text.contains('\\') {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.clone().next() {
            Some('\\') => {
                out.push('\\');
                chars.next();
            }
            Some('n') => {
                out.push('\n');
                chars.next();
            }
            _ => out.push('\\'),
        }
    }
    Cow::Owned(out)
}

/// Label sets up to this size are checked for duplicates label by label; larger ones (a
/// hostile body) by sorting once at the end, so the check stays `O(n log n)`.
const SCAN_FOR_DUPLICATES_BELOW: usize = 32;

/// Finishes a label set: the duplicate check for large sets; returns `after`.
fn close_labels(labels: &[Label<'_>], after: usize) -> Result<usize, Fail> {
    if labels.len() > SCAN_FOR_DUPLICATES_BELOW {
        let mut names: Vec<&str> = labels.iter().map(|l| l.name).collect();
        names.sort_unstable();
        if names.windows(2).any(|pair| pair[0] == pair[1]) {
            // The set is known to hold a repeat; its closing brace is the spot to look from.
            return Err((ParseErrorKind::DuplicateLabel, after.saturating_sub(1)));
        }
    }
    Ok(after)
}
