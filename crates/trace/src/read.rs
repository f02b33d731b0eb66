//! Reading trace files: the Azure LLM inference trace 2023 CSV and the Mooncake JSON-lines
//! trace, detected by content. Bad rows are errors naming the file, the line and the fix.

use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

use super::{Trace, TraceError, TraceFormat, TraceRequest};

/// Reads a trace file, detecting its format from the content.
pub fn read_trace(path: &Path) -> Result<Trace, TraceError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| TraceError::Io {
        path: name.clone(),
        source,
    })?;
    parse_trace(&name, &text)
}

/// Parses trace text; `name` is used in errors and as [`Trace::source`].
pub fn parse_trace(name: &str, text: &str) -> Result<Trace, TraceError> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let first = text.lines().map(str::trim).find(|l| !l.is_empty());
    match first {
        None => Err(TraceError::File {
            path: name.to_string(),
            problem: "the file is empty".into(),
            fix: "pass an Azure LLM 2023 CSV or a Mooncake JSON-lines trace".into(),
        }),
        Some(line) if line.starts_with('{') => parse_mooncake_jsonl(name, text),
        Some(line) if line.contains(',') => parse_azure_csv(name, text),
        Some(line) => Err(TraceError::File {
            path: name.to_string(),
            problem: format!(
                "unknown format: first line {:?} is neither a CSV header nor a JSON object",
                truncate(line, 60)
            ),
            fix: "pass an Azure LLM 2023 CSV (header TIMESTAMP,ContextTokens,GeneratedTokens) \
                  or a Mooncake JSON-lines trace ({\"timestamp\": ms, \"input_length\": n, \"output_length\": n})"
                .into(),
        }),
    }
}

fn truncate(s: &str, max: usize) -> &str {
    match s.char_indices().nth(max) {
        Some((i, _)) => &s[..i],
        None => s,
    }
}

fn row_error(name: &str, line: usize, problem: String, fix: &str) -> TraceError {
    TraceError::Row {
        path: name.to_string(),
        line,
        problem,
        fix: fix.to_string(),
    }
}

/// Parses the Azure LLM inference trace 2023 CSV.
pub fn parse_azure_csv(name: &str, text: &str) -> Result<Trace, TraceError> {
    const FIX_ROW: &str = "each row must be `YYYY-MM-DD HH:MM:SS[.fraction],<context tokens>,<generated tokens>`; \
                           correct or delete the row";
    let mut lines = text
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty());
    let Some((header_index, header)) = lines.next() else {
        return Err(empty(name));
    };
    let columns: Vec<String> = header
        .trim()
        .trim_start_matches('\u{feff}')
        .split(',')
        .map(|c| c.trim().to_ascii_lowercase())
        .collect();
    let find = |wanted: &str| columns.iter().position(|c| c == wanted);
    let (Some(ts_col), Some(ctx_col), Some(gen_col)) = (
        find("timestamp"),
        find("contexttokens"),
        find("generatedtokens"),
    ) else {
        return Err(row_error(
            name,
            header_index + 1,
            format!(
                "header {:?} lacks TIMESTAMP, ContextTokens or GeneratedTokens",
                truncate(header, 80)
            ),
            "start the file with the header `TIMESTAMP,ContextTokens,GeneratedTokens`",
        ));
    };
    let mut stamps: Vec<Stamp> = Vec::new();
    for (index, line) in lines {
        let line_no = index + 1;
        let fields: Vec<&str> = line.trim().split(',').map(str::trim).collect();
        if fields.len() != columns.len() {
            return Err(row_error(
                name,
                line_no,
                format!("expected {} fields, found {}", columns.len(), fields.len()),
                FIX_ROW,
            ));
        }
        let seconds =
            parse_timestamp(fields[ts_col]).map_err(|p| row_error(name, line_no, p, FIX_ROW))?;
        let prompt = parse_count(fields[ctx_col], "ContextTokens")
            .map_err(|p| row_error(name, line_no, p, FIX_ROW))?;
        let output = parse_count(fields[gen_col], "GeneratedTokens")
            .map_err(|p| row_error(name, line_no, p, FIX_ROW))?;
        stamps.push((seconds, prompt, output, line_no));
    }
    finish(name, TraceFormat::AzureCsv, stamps)
}

#[derive(Deserialize)]
struct MooncakeRow {
    timestamp: f64,
    input_length: f64,
    output_length: f64,
}

/// Parses the Mooncake JSON-lines trace (`timestamp` in milliseconds from the trace start).
pub fn parse_mooncake_jsonl(name: &str, text: &str) -> Result<Trace, TraceError> {
    const FIX_ROW: &str = "each line must be a JSON object with numeric `timestamp` (ms), `input_length` and \
                           `output_length`; correct or delete the line";
    let mut stamps = Vec::new();
    for (index, line) in text.lines().enumerate() {
        let line_no = index + 1;
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let row: MooncakeRow = serde_json::from_str(line)
            .map_err(|e| row_error(name, line_no, format!("not a trace row: {e}"), FIX_ROW))?;
        if !row.timestamp.is_finite() || row.timestamp < 0.0 {
            return Err(row_error(
                name,
                line_no,
                format!(
                    "timestamp {} is not a non-negative number of milliseconds",
                    row.timestamp
                ),
                FIX_ROW,
            ));
        }
        let prompt = float_count(row.input_length, "input_length")
            .map_err(|p| row_error(name, line_no, p, FIX_ROW))?;
        let output = float_count(row.output_length, "output_length")
            .map_err(|p| row_error(name, line_no, p, FIX_ROW))?;
        stamps.push((row.timestamp / 1000.0, prompt, output, line_no));
    }
    finish(name, TraceFormat::MooncakeJsonl, stamps)
}

fn empty(name: &str) -> TraceError {
    TraceError::File {
        path: name.to_string(),
        problem: "the file holds no requests".into(),
        fix: "pass a trace with at least one row".into(),
    }
}

/// A row as read: seconds, prompt tokens, output tokens, 1-based line.
type Stamp = (f64, u32, u32, usize);

/// The longest time a trace may span from its first request to its last: the published traces
/// span an hour to a week. A longer span is a wrong timestamp (a year typed wrong, seconds for
/// milliseconds), and would make every per-minute view of the trace enormous.
pub const MAX_TRACE_SPAN: Duration = Duration::from_secs(31 * 24 * 3600);

fn finish(name: &str, format: TraceFormat, mut stamps: Vec<Stamp>) -> Result<Trace, TraceError> {
    if stamps.is_empty() {
        return Err(empty(name));
    }
    // Rows are nearly sorted in the published files; a stable sort keeps ties in file order.
    stamps.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (origin, _, _, first_line) = stamps[0];
    let (last, _, _, last_line) = stamps[stamps.len() - 1];
    let span = last - origin;
    if span.is_nan() || span > MAX_TRACE_SPAN.as_secs_f64() {
        return Err(row_error(
            name,
            last_line,
            format!(
                "this request arrives {:.0} days after the first one (line {first_line}); a \
                 trace may span at most {} days",
                span / 86_400.0,
                MAX_TRACE_SPAN.as_secs() / 86_400
            ),
            "check the timestamps (Azure rows are dates, Mooncake timestamps are milliseconds \
             from the trace start), or split the trace",
        ));
    }
    let requests = stamps
        .into_iter()
        .map(|(seconds, prompt_tokens, output_tokens, _)| TraceRequest {
            arrival: Duration::from_secs_f64((seconds - origin).max(0.0)),
            prompt_tokens,
            output_tokens,
        })
        .collect();
    Ok(Trace {
        source: name.to_string(),
        format,
        requests,
    })
}

fn parse_count(field: &str, column: &str) -> Result<u32, String> {
    field.parse::<u32>().map_err(|_| {
        format!(
            "{column} {field:?} is not a whole number of tokens (0 to {})",
            u32::MAX
        )
    })
}

fn float_count(value: f64, column: &str) -> Result<u32, String> {
    if value.is_finite() && value >= 0.0 && value.fract() == 0.0 && value <= f64::from(u32::MAX) {
        Ok(value as u32)
    } else {
        Err(format!(
            "{column} {value} is not a whole number of tokens (0 to {})",
            u32::MAX
        ))
    }
}

/// Parses `YYYY-MM-DD HH:MM:SS[.fraction]` (a `T` separator is accepted too) into seconds since
/// 1970-01-01 in the proleptic Gregorian calendar; no time zone is applied.
pub fn parse_timestamp(text: &str) -> Result<f64, String> {
    let bad = || format!("TIMESTAMP {text:?} is not `YYYY-MM-DD HH:MM:SS[.fraction]`");
    let (date, time) = text.split_once([' ', 'T']).ok_or_else(bad)?;
    let mut d = date.splitn(3, '-');
    let (Some(y), Some(mo), Some(da)) = (d.next(), d.next(), d.next()) else {
        return Err(bad());
    };
    let year: i64 = y.parse().map_err(|_| bad())?;
    let month: u32 = mo.parse().map_err(|_| bad())?;
    let day: u32 = da.parse().map_err(|_| bad())?;
    let time = time.trim_end_matches('Z');
    let mut t = time.splitn(3, ':');
    let (Some(h), Some(mi), Some(s)) = (t.next(), t.next(), t.next()) else {
        return Err(bad());
    };
    let hour: u32 = h.parse().map_err(|_| bad())?;
    let minute: u32 = mi.parse().map_err(|_| bad())?;
    let (whole, fraction) = s.split_once('.').unwrap_or((s, ""));
    let second: u32 = whole.parse().map_err(|_| bad())?;
    if !fraction.chars().all(|c| c.is_ascii_digit()) {
        return Err(bad());
    }
    let fraction: f64 = if fraction.is_empty() {
        0.0
    } else {
        format!("0.{fraction}").parse().map_err(|_| bad())?
    };
    if !(1..=12).contains(&month)
        || day == 0
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 60
    {
        return Err(format!("TIMESTAMP {text:?} is not a valid date and time"));
    }
    let days = days_from_civil(year, month, day);
    Ok(days as f64 * 86_400.0 + f64::from(hour * 3600 + minute * 60 + second) + fraction)
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        2 if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 (Howard Hinnant's civil-date algorithm).
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}
