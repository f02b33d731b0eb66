//! The single-pass line parser behind [`super::parse`].
//!
//! Works on bytes and only ever slices the `&str` at ASCII delimiters, so every slice is on a
//! character boundary; slicing goes through `get` anyway, so a logic slip yields an error or an
//! empty token, never a panic.

use std::borrow::Cow;
use std::collections::HashMap;

use super::error::{ParseError, ParseErrorKind, clip, unexpected};
use super::number::{parse_timestamp_ms, parse_value};
use super::{Exposition, Family, Label, MetricType, Sample};

/// Character classes, one bit each, indexed by byte.
const NAME_START: u8 = 1;
const NAME_CONTINUE: u8 = 2;
const LABEL_START: u8 = 4;
const LABEL_CONTINUE: u8 = 8;
const BLANK: u8 = 16;

const CLASS: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        let alpha = b.is_ascii_alphabetic() || b == b'_';
        let digit = b.is_ascii_digit();
        if alpha || b == b':' {
            t[c] |= NAME_START | NAME_CONTINUE;
        }
        if digit {
            t[c] |= NAME_CONTINUE | LABEL_CONTINUE;
        }
        if alpha {
            t[c] |= LABEL_START | LABEL_CONTINUE;
        }
        if b == b' ' || b == b'\t' {
            t[c] |= BLANK;
        }
        c += 1;
    }
    t
};

#[inline]
fn is(class: u8, b: u8) -> bool {
    CLASS[usize::from(b)] & class != 0
}

/// Index of the first byte at or after `i` that is not a space or tab.
#[inline]
fn skip_blanks(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && is(BLANK, b[i]) {
        i += 1;
    }
    i
}

/// End of the name-like token starting at `i` (`i` itself when none starts there).
#[inline]
fn scan_name(b: &[u8], i: usize, start: u8, cont: u8) -> usize {
    if i >= b.len() || !is(start, b[i]) {
        return i;
    }
    let mut j = i + 1;
    while j < b.len() && is(cont, b[j]) {
        j += 1;
    }
    j
}

/// End of the token starting at `i`: the next space, tab or end of line.
#[inline]
fn scan_token(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && !is(BLANK, b[i]) {
        i += 1;
    }
    i
}

#[inline]
fn slice(line: &str, from: usize, to: usize) -> &str {
    line.get(from..to).unwrap_or_default()
}

enum Flow {
    Continue,
    Eof,
}

struct Parser<'a> {
    out: Exposition<'a>,
    /// Family name -> index in `out.families`, for repeated `# HELP` / `# TYPE`.
    family_index: HashMap<&'a str, usize>,
    /// Labels of the sample being parsed; moved into an exactly-sized `Vec` per sample.
    labels: Vec<Label<'a>>,
}

/// Parses a whole body; see [`super::parse`].
pub(super) fn parse(body: &str) -> Result<Exposition<'_>, ParseError> {
    let body = body.strip_prefix('\u{feff}').unwrap_or(body);
    let mut p = Parser {
        out: Exposition {
            // Typical exporters write 60-140 bytes per sample line.
            samples: Vec::with_capacity(body.len() / 96 + 4),
            families: Vec::new(),
        },
        family_index: HashMap::new(),
        labels: Vec::with_capacity(16),
    };
    let mut rest = body;
    let mut line_number = 0;
    while !rest.is_empty() {
        line_number += 1;
        let (line, next) = match rest.find('\n') {
            Some(end) => (slice(rest, 0, end), rest.get(end + 1..).unwrap_or_default()),
            None => (rest, ""),
        };
        rest = next;
        let line = line.strip_suffix('\r').unwrap_or(line);
        match p.line(line) {
            Ok(Flow::Continue) => {}
            Ok(Flow::Eof) => break,
            Err(kind) => {
                return Err(ParseError {
                    line: line_number,
                    kind,
                });
            }
        }
    }
    Ok(p.out)
}

impl<'a> Parser<'a> {
    fn line(&mut self, line: &'a str) -> Result<Flow, ParseErrorKind> {
        let b = line.as_bytes();
        let i = skip_blanks(b, 0);
        match b.get(i) {
            None => Ok(Flow::Continue),
            Some(b'#') => self.comment(line, i + 1),
            Some(_) => self.sample(line, i).map(|()| Flow::Continue),
        }
    }

    fn sample(&mut self, line: &'a str, start: usize) -> Result<(), ParseErrorKind> {
        let b = line.as_bytes();
        let name_end = scan_name(b, start, NAME_START, NAME_CONTINUE);
        if name_end == start {
            return Err(unexpected("metric name", line, start));
        }
        let name = slice(line, start, name_end);
        let mut i = name_end;
        match b.get(i) {
            Some(b'{') => i = self.labels(line, name, i + 1)?,
            Some(&c) if is(BLANK, c) => {
                i = skip_blanks(b, i);
                if b.get(i) == Some(&b'{') {
                    i = self.labels(line, name, i + 1)?;
                }
            }
            // Reported below as a missing value.
            None => {}
            Some(_) => {
                return Err(unexpected(
                    format!("'{{' or a space after metric name {:?}", clip(name)),
                    line,
                    i,
                ));
            }
        }
        let labels = if self.labels.is_empty() {
            Vec::new()
        } else {
            self.labels.drain(..).collect()
        };

        i = skip_blanks(b, i);
        let value_end = scan_token(b, i);
        if value_end == i {
            return Err(unexpected(
                format!("a value for metric {:?}", clip(name)),
                line,
                i,
            ));
        }
        let token = slice(line, i, value_end);
        let value = parse_value(token).ok_or_else(|| ParseErrorKind::InvalidValue {
            metric: clip(name),
            value: clip(token),
        })?;

        let mut timestamp_ms = None;
        i = skip_blanks(b, value_end);
        // A `#` after the value starts an OpenMetrics exemplar: skipped.
        if i < b.len() && b[i] != b'#' {
            let end = scan_token(b, i);
            let token = slice(line, i, end);
            timestamp_ms = Some(parse_timestamp_ms(token).ok_or_else(|| {
                ParseErrorKind::InvalidTimestamp {
                    metric: clip(name),
                    value: clip(token),
                }
            })?);
            i = skip_blanks(b, end);
            if i < b.len() && b[i] != b'#' {
                return Err(unexpected(
                    format!("end of line after the timestamp of metric {:?}", clip(name)),
                    line,
                    i,
                ));
            }
        }
        self.out.samples.push(Sample {
            name,
            labels,
            value,
            timestamp_ms,
        });
        Ok(())
    }

    /// Parses a label set after its `{` into `self.labels`; returns the index after the `}`.
    fn labels(
        &mut self,
        line: &'a str,
        metric: &str,
        mut i: usize,
    ) -> Result<usize, ParseErrorKind> {
        self.labels.clear();
        let b = line.as_bytes();
        loop {
            i = skip_blanks(b, i);
            if b.get(i) == Some(&b'}') {
                return Ok(i + 1);
            }
            let name_end = scan_name(b, i, LABEL_START, LABEL_CONTINUE);
            if name_end == i {
                let expected = if self.labels.is_empty() {
                    format!(
                        "label name or '}}' in the labels of metric {:?}",
                        clip(metric)
                    )
                } else {
                    format!(
                        "label name or '}}' after ',' in the labels of metric {:?}",
                        clip(metric)
                    )
                };
                return Err(unexpected(expected, line, i));
            }
            let name = slice(line, i, name_end);
            i = skip_blanks(b, name_end);
            if b.get(i) != Some(&b'=') {
                return Err(unexpected(
                    format!("'=' after label name {:?}", clip(name)),
                    line,
                    i,
                ));
            }
            i = skip_blanks(b, i + 1);
            if b.get(i) != Some(&b'"') {
                return Err(unexpected(
                    format!("'\"' to open the value of label {:?}", clip(name)),
                    line,
                    i,
                ));
            }
            let (value, after) = label_value(line, name, i + 1)?;
            if self.labels.iter().any(|l| l.name == name) {
                return Err(ParseErrorKind::DuplicateLabel {
                    metric: clip(metric),
                    label: clip(name),
                });
            }
            self.labels.push(Label { name, value });
            i = skip_blanks(b, after);
            match b.get(i) {
                Some(b',') => i += 1,
                Some(b'}') => return Ok(i + 1),
                _ => {
                    return Err(unexpected(
                        format!("',' or '}}' after the value of label {:?}", clip(name)),
                        line,
                        i,
                    ));
                }
            }
        }
    }

    fn comment(&mut self, line: &'a str, after_hash: usize) -> Result<Flow, ParseErrorKind> {
        let b = line.as_bytes();
        let keyword_start = skip_blanks(b, after_hash);
        if keyword_start == after_hash {
            // `#HELP` or `#comment`: an ordinary comment.
            return Ok(Flow::Continue);
        }
        let keyword_end = scan_token(b, keyword_start);
        let keyword = slice(line, keyword_start, keyword_end);
        let directive = match keyword {
            "HELP" => "# HELP",
            "TYPE" => "# TYPE",
            "UNIT" => "# UNIT",
            "EOF" if skip_blanks(b, keyword_end) == b.len() => return Ok(Flow::Eof),
            _ => return Ok(Flow::Continue),
        };
        let name_start = skip_blanks(b, keyword_end);
        let name_end = scan_name(b, name_start, NAME_START, NAME_CONTINUE);
        if name_end == name_start {
            return Err(unexpected(
                format!("metric name after {directive:?}"),
                line,
                name_start,
            ));
        }
        let name = slice(line, name_start, name_end);
        if name_end < b.len() && !is(BLANK, b[name_end]) {
            return Err(unexpected(
                format!(
                    "a space after metric name {:?} in {directive:?}",
                    clip(name)
                ),
                line,
                name_end,
            ));
        }
        let text_start = skip_blanks(b, name_end);
        let text = slice(line, text_start, b.len());
        match keyword {
            "HELP" => {
                self.family(name).help = Some(unescape_help(text));
            }
            "TYPE" => {
                let type_end = scan_token(b, text_start);
                if type_end == text_start {
                    return Err(unexpected(
                        format!("a metric type after \"# TYPE {}\"", clip(name)),
                        line,
                        text_start,
                    ));
                }
                let token = slice(line, text_start, type_end);
                let metric_type =
                    MetricType::from_token(token).ok_or_else(|| ParseErrorKind::UnknownType {
                        metric: clip(name),
                        found: clip(token),
                    })?;
                let trailing = skip_blanks(b, type_end);
                if trailing < b.len() {
                    return Err(unexpected(
                        format!("end of line after \"# TYPE {} {token}\"", clip(name)),
                        line,
                        trailing,
                    ));
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

/// Reads a label value after its opening quote; returns it and the index after the closing
/// quote. Borrowed unless it holds escapes.
fn label_value<'a>(
    line: &'a str,
    label: &str,
    start: usize,
) -> Result<(Cow<'a, str>, usize), ParseErrorKind> {
    let b = line.as_bytes();
    let mut i = start;
    while i < b.len() {
        match b[i] {
            b'"' => return Ok((Cow::Borrowed(slice(line, start, i)), i + 1)),
            b'\\' => break,
            _ => i += 1,
        }
    }
    if i >= b.len() {
        return Err(unterminated(line, label, i));
    }
    // Escapes present: copy into an owned value.
    let mut owned = String::with_capacity(i - start + 16);
    let mut run_start = start;
    while i < b.len() {
        match b[i] {
            b'"' => {
                owned.push_str(slice(line, run_start, i));
                return Ok((Cow::Owned(owned), i + 1));
            }
            b'\\' => {
                owned.push_str(slice(line, run_start, i));
                let unescaped = match b.get(i + 1) {
                    Some(b'\\') => '\\',
                    Some(b'"') => '"',
                    Some(b'n') => '\n',
                    None => return Err(unterminated(line, label, i + 1)),
                    Some(_) => {
                        let escape = line.get(i..).unwrap_or_default().chars().take(2).collect();
                        return Err(ParseErrorKind::InvalidEscape {
                            label: clip(label),
                            escape,
                        });
                    }
                };
                owned.push(unescaped);
                i += 2;
                run_start = i;
            }
            _ => i += 1,
        }
    }
    Err(unterminated(line, label, i))
}

fn unterminated(line: &str, label: &str, at: usize) -> ParseErrorKind {
    unexpected(
        format!("'\"' to close the value of label {:?}", clip(label)),
        line,
        at,
    )
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
