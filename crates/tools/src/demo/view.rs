//! The live terminal view: a status block redrawn every second under a scrolling log of
//! events (scale decisions with their reasons, replicas starting and draining).
//!
//! Owns: the text layout and the redraw. Does not own: the numbers (see [`super::summary`]'s
//! [`Sample`]). Without a terminal (or with `--no-live`) it prints plain lines instead: every
//! event, and a one-line status every few seconds, fit for CI logs.

use std::io::Write as _;

use super::summary::Sample;

/// Width the status lines are cut to, so a redraw never wraps.
const WIDTH: usize = 110;

/// The view.
#[derive(Debug)]
pub struct View {
    live: bool,
    drawn_lines: usize,
    plain_every_seconds: f64,
    last_plain_seconds: f64,
}

/// What the status block shows beside the sample.
#[derive(Debug, Clone)]
pub struct Context<'a> {
    /// The story's length in seconds.
    pub story_seconds: f64,
    /// The offered rate the story asks for now, in replica capacities.
    pub capacity_multiple: f64,
    /// The latency SLO in seconds.
    pub slo_seconds: f64,
    /// The highest replica count.
    pub max_replicas: u32,
    /// Replicas starting (asked for, not ready yet).
    pub starting: u32,
    /// Replicas draining.
    pub draining: u32,
    /// The latest decision's explanation.
    pub explanation: Option<&'a str>,
}

impl View {
    /// A view redrawing in place when `live`, else printing a plain status line every
    /// `plain_every_seconds`.
    pub fn new(live: bool, plain_every_seconds: f64) -> Self {
        Self {
            live,
            drawn_lines: 0,
            plain_every_seconds,
            last_plain_seconds: f64::NEG_INFINITY,
        }
    }

    /// Prints a log line (above the status block when live).
    pub fn event(&mut self, line: &str) {
        let mut out = std::io::stdout().lock();
        self.clear(&mut out);
        let _ = writeln!(out, "{line}");
        let _ = out.flush();
    }

    /// Shows the latest sample.
    pub fn status(&mut self, sample: &Sample, ctx: &Context<'_>) {
        let lines = status_lines(sample, ctx);
        let mut out = std::io::stdout().lock();
        if self.live {
            self.clear(&mut out);
            for line in &lines {
                let _ = writeln!(out, "{}", cut(line, WIDTH));
            }
            self.drawn_lines = lines.len();
        } else if sample.t_seconds - self.last_plain_seconds >= self.plain_every_seconds - 1e-6 {
            self.last_plain_seconds = sample.t_seconds;
            let _ = writeln!(out, "{}", plain_line(sample, ctx));
        }
        let _ = out.flush();
    }

    /// Leaves the last status block on screen and stops redrawing it.
    pub fn finish(&mut self) {
        self.drawn_lines = 0;
    }

    fn clear(&mut self, out: &mut impl std::io::Write) {
        if self.live && self.drawn_lines > 0 {
            // Up to the block's first line, then clear to the end of the screen.
            let _ = write!(out, "\x1b[{}F\x1b[J", self.drawn_lines);
            self.drawn_lines = 0;
        }
    }
}

fn opt(v: Option<f64>, digits: usize, unit: &str) -> String {
    v.map_or_else(|| "-".to_owned(), |v| format!("{v:.digits$}{unit}"))
}

fn bar(ready: u32, target: u32, max: u32) -> String {
    (1..=max.max(1))
        .map(|i| {
            if i <= ready {
                '#'
            } else if i <= target {
                '+'
            } else {
                '.'
            }
        })
        .collect()
}

fn status_lines(s: &Sample, ctx: &Context<'_>) -> Vec<String> {
    let target = s.target_replicas.unwrap_or(0);
    let header = if s.t_seconds < ctx.story_seconds {
        format!(
            "── {:>5.1} s of {:.0} s · phase {} ({:.1}x one replica's capacity) ──",
            s.t_seconds, ctx.story_seconds, s.phase, ctx.capacity_multiple
        )
    } else {
        format!(
            "── {:>5.1} s · the story is over, waiting for the last answers ──",
            s.t_seconds
        )
    };
    let mut lines = vec![
        header,
        format!(
            "  load      {:>5.2} req/s offered, {:>5.2} served, {} in flight",
            s.offered_rps, s.completed_rps, s.in_flight
        ),
        format!(
            "  scaler    queue {}, running {}, P95 e2e {} (SLO {} s), KV max {}",
            opt(s.queue, 0, ""),
            opt(s.running, 0, ""),
            opt(s.p95_e2e_seconds, 2, " s"),
            ctx.slo_seconds,
            opt(s.kv_usage_max.map(|v| v * 100.0), 0, " %"),
        ),
        format!(
            "  replicas  [{}] ready {}, starting {}, draining {}; HPA {}, scaler target {}",
            bar(
                s.ready_replicas,
                target.max(s.hpa_replicas),
                ctx.max_replicas
            ),
            s.ready_replicas,
            ctx.starting,
            ctx.draining,
            s.hpa_replicas,
            s.target_replicas
                .map_or_else(|| "-".to_owned(), |v| v.to_string())
        ),
    ];
    // The explanation is what the demo is about: wrap it over up to three lines.
    let decision = format!(
        "{}: {}",
        s.reason.as_deref().unwrap_or("-"),
        ctx.explanation.unwrap_or("waiting for the first scrape")
    );
    for (i, chunk) in wrap(&decision, WIDTH - 12).into_iter().take(3).enumerate() {
        let label = if i == 0 { "decision" } else { "" };
        lines.push(format!("  {label:<8}  {chunk}"));
    }
    lines
}

/// Splits `text` at spaces into lines of at most `width` characters (longer words are cut).
fn wrap(text: &str, width: usize) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    for word in text.split(' ') {
        let needed = if line.is_empty() { 0 } else { 1 } + word.chars().count();
        if !line.is_empty() && line.chars().count() + needed > width {
            lines.push(std::mem::take(&mut line));
        }
        if !line.is_empty() {
            line.push(' ');
        }
        line.push_str(word);
    }
    if !line.is_empty() {
        lines.push(line);
    }
    lines
}

fn plain_line(s: &Sample, ctx: &Context<'_>) -> String {
    format!(
        "[{:>5.1} s] {:<5} offered {:.2} req/s, in flight {}, queue {}, P95 {}, KV {}, ready {} (+{} starting, {} draining), HPA {}, target {} ({})",
        s.t_seconds,
        s.phase,
        s.offered_rps,
        s.in_flight,
        opt(s.queue, 0, ""),
        opt(s.p95_e2e_seconds, 2, " s"),
        opt(s.kv_usage_max.map(|v| v * 100.0), 0, " %"),
        s.ready_replicas,
        ctx.starting,
        ctx.draining,
        s.hpa_replicas,
        s.target_replicas
            .map_or_else(|| "-".to_owned(), |v| v.to_string()),
        s.reason.as_deref().unwrap_or("-"),
    )
}

fn cut(line: &str, width: usize) -> String {
    if line.chars().count() <= width {
        line.to_owned()
    } else {
        let mut s: String = line.chars().take(width - 1).collect();
        s.push('…');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replica_bar_shows_ready_asked_and_room() {
        assert_eq!(bar(2, 4, 5), "##++.");
        assert_eq!(bar(1, 1, 3), "#..");
        assert_eq!(cut("abcdef", 4), "abc…");
        assert_eq!(wrap("aa bb cc dd", 5), vec!["aa bb", "cc dd"]);
        assert_eq!(wrap("abcdefgh x", 4), vec!["abcdefgh", "x"]);
    }
}
