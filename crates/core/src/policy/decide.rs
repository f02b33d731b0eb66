//! One decision: read the signals, update the clocks, move or hold the level, explain.

use std::collections::VecDeque;
use std::time::Duration;

use super::explain::{dur, num};
use super::hpa::{hpa_would_act, smallest_acted_scale_up};
use super::rules::{Observed, Trigger, calm_check, to_u32, triggers};
use super::{Decision, Mode, PolicyConfig, PolicyState, Reason};
use crate::signals::FleetSignals;

fn clamp(v: u32, c: &PolicyConfig) -> u32 {
    v.max(c.min_replicas)
        .min(c.max_replicas.max(c.min_replicas))
}

/// Drops steps that left the rate-limit window `(now - period, now]`.
fn prune(steps: &mut VecDeque<(Duration, u32)>, now: Duration, period: Duration) {
    while let Some(&(at, _)) = steps.front() {
        if at.saturating_add(period) <= now {
            steps.pop_front();
        } else {
            break;
        }
    }
}

fn used(steps: &VecDeque<(Duration, u32)>) -> u32 {
    steps.iter().fold(0u32, |a, &(_, n)| a.saturating_add(n))
}

pub(super) fn decide(
    c: &PolicyConfig,
    now: Duration,
    signals: &FleetSignals,
    st: &mut PolicyState,
) -> Decision {
    prune(&mut st.up_steps, now, c.scale_up_period);
    prune(&mut st.down_steps, now, c.scale_down_period);
    let o = Observed::new(signals);
    let known = to_u32(signals.pods_total.max(signals.pods_healthy));

    if o.ready == 0 {
        st.breach_since = None;
        st.calm_since = None;
        st.kv_critical_since = None;
        let (level, floor_note) =
            apply_floor(c, st, st.level.unwrap_or_else(|| clamp(known, c)), o.ready);
        let active = signals.pods_total > 0 && st.last_active;
        let target = match c.mode {
            Mode::Active => level,
            Mode::Advisory => clamp(known, c),
        };
        let explanation = format!(
            "no ready replica answered ({} known, 0 ready); holding at {level}; calm and breach clocks restart{floor_note}",
            signals.pods_total
        );
        return finish(
            c,
            now,
            &o,
            target,
            level,
            active,
            Reason::NoData,
            explanation,
        );
    }

    let (level, floor_note) = apply_floor(c, st, clamp(st.level.unwrap_or(known), c), o.ready);
    st.level = Some(level);
    let active = o.active();
    st.last_active = active;

    let (triggers, kv_pending) = triggers(c, now, &o, st);
    let (not_calm, calm_facts) = calm_check(c, &o);
    let breached = !triggers.is_empty() || kv_pending.is_some();
    let calm = !breached && not_calm.is_empty();
    if breached {
        st.breach_since.get_or_insert(now);
    } else {
        st.breach_since = None;
    }
    if calm {
        let since = *st.calm_since.get_or_insert(now);
        if now.saturating_sub(since) >= c.scale_down_stabilization {
            // From here on the policy's own calm clock rules scale-in: the restart floor ends.
            st.calm_period_seen = true;
        }
    } else {
        st.calm_since = None;
    }
    if level > o.ready {
        st.shortfall_since.get_or_insert(now);
    } else {
        st.shortfall_since = None;
    }

    let (next, reason, text) = if !triggers.is_empty() {
        scale_out(c, now, &o, st, level, &triggers, kv_pending.as_deref())
    } else if calm {
        scale_in(c, now, &o, st, level, &calm_facts)
    } else if let Some(kv) = kv_pending {
        (
            level,
            Reason::HoldStabilizing,
            format!("{kv}; holding at {level}"),
        )
    } else {
        let text = format!(
            "within bounds, not calm ({}); holding at {level}",
            not_calm.join("; ")
        );
        (level, Reason::Hold, text)
    };
    st.level = Some(next);
    if next > o.ready {
        if next > level {
            // New replicas were just asked for: their start-up grace begins now.
            st.shortfall_since = Some(now);
        }
    } else {
        st.shortfall_since = None;
    }
    let target = match c.mode {
        Mode::Active => next,
        Mode::Advisory => o.ready,
    };
    let text = if next == level {
        text + &floor_note
    } else {
        text
    };
    finish(c, now, &o, target, next, active, reason, text)
}

/// The restart floor: until this state has observed a full calm period, the level is at least
/// the scale target's current replicas (clamped to min/max). Returns the level and, when the
/// floor raised it, the sentence saying so with the numbers (else empty).
fn apply_floor(c: &PolicyConfig, st: &PolicyState, level: u32, ready: u32) -> (u32, String) {
    let Some(current) = st.current.filter(|_| !st.calm_period_seen) else {
        return (level, String::new());
    };
    let floor = clamp(current.spec, c);
    if floor <= level {
        return (level, String::new());
    }
    let ready = current.ready.unwrap_or(ready).min(current.spec);
    let note = format!(
        "; held at {floor}, not {level}: {} {} ({ready} ready, {} starting, counted as capacity on the way) and this scaler has not yet observed a full calm period of {} itself since it started",
        current.source.describe(),
        current.spec,
        current.spec - ready,
        dur(c.scale_down_stabilization)
    );
    (floor, note)
}

#[allow(clippy::too_many_arguments)]
fn finish(
    c: &PolicyConfig,
    now: Duration,
    o: &Observed,
    target: u32,
    desired: u32,
    active: bool,
    reason: Reason,
    text: String,
) -> Decision {
    let explanation = match c.mode {
        Mode::Active => text,
        Mode::Advisory => format!("advisory, returning the {target} observed replicas; {text}"),
    };
    Decision {
        at: now,
        target_replicas: target,
        desired_replicas: desired,
        ready_replicas: o.ready,
        active,
        mode: c.mode,
        reason,
        explanation,
    }
}

fn scale_out(
    c: &PolicyConfig,
    now: Duration,
    o: &Observed,
    st: &mut PolicyState,
    level: u32,
    triggers: &[Trigger],
    kv_pending: Option<&str>,
) -> (u32, Reason, String) {
    let shortfall_for = st.shortfall_since.map(|s| now.saturating_sub(s));
    let starting = level > o.ready && shortfall_for.is_some_and(|d| d < c.startup_grace);
    // A guardrail asks for one step above what runs (or is asked for, if more); while asked-for
    // replicas start it asks for nothing more.
    // What runs or is asked for, whichever is more: steps and the rate limit count from here
    // (raising the level to replicas that already run adds no pod), and it is the HPA's
    // current replica count for the tolerance check.
    let base = level.max(o.ready);
    let step = if starting {
        level
    } else {
        base.saturating_add(c.scale_up_pods)
    };
    // The trigger asking for the most replicas leads; the first in rule order on a tie.
    let mut primary = &triggers[0];
    let mut raw = primary.demand.unwrap_or(step);
    for t in &triggers[1..] {
        let want = t.demand.unwrap_or(step);
        if want > raw {
            primary = t;
            raw = want;
        }
    }
    let mut why: Vec<&str> = triggers.iter().map(|t| t.text.as_str()).collect();
    why.extend(kv_pending);
    let why = why.join("; ");

    let held = now.saturating_sub(st.breach_since.unwrap_or(now));
    if held < c.scale_up_stabilization {
        let text = format!(
            "{why}; breach for {} of {}; holding at {level}",
            dur(held),
            dur(c.scale_up_stabilization)
        );
        return (level, Reason::HoldStabilizing, text);
    }
    if base >= c.max_replicas {
        return (
            c.max_replicas,
            Reason::AtMax,
            format!("{why}; at max {}", c.max_replicas),
        );
    }
    if raw <= base {
        let missing = level.saturating_sub(o.ready);
        if starting {
            let text = format!(
                "{why}; {missing} of {level} asked replicas not ready yet ({} of {} grace), counted as capacity on the way; holding at {level}",
                dur(shortfall_for.unwrap_or_default()),
                dur(c.startup_grace)
            );
            return (level, Reason::HoldStartingUp, text);
        }
        let text = format!(
            "{why}; demand {raw} <= {level} asked ({missing} not ready after the {} grace); holding at {level}",
            dur(c.startup_grace)
        );
        return (level, Reason::Hold, text);
    }
    let want = raw.min(c.max_replicas);
    let taken = used(&st.up_steps);
    let budget = c.scale_up_pods.saturating_sub(taken);
    let limit = format!(
        "at most +{} per {}",
        c.scale_up_pods,
        dur(c.scale_up_period)
    );
    if budget == 0 {
        let text = format!(
            "{why}; +{taken} already taken in the last {} ({limit}); holding at {level}",
            dur(c.scale_up_period)
        );
        return (level, Reason::HoldRateLimited, text);
    }
    let mut next = want.min(base.saturating_add(budget));
    let hpa_current = base;
    let mut widened = String::new();
    if !hpa_would_act(hpa_current, next, c.hpa_tolerance) {
        let band = format!(
            "|{next}/{hpa_current} - 1| = {} <= tolerance {}",
            num((f64::from(next) / f64::from(hpa_current) - 1.0).abs()),
            num(c.hpa_tolerance)
        );
        match smallest_acted_scale_up(hpa_current, next, c.max_replicas, c.hpa_tolerance) {
            None => {
                let text = format!(
                    "{why}; {level} -> {next} is inside the HPA tolerance ({band}) and max {} allows no larger step; holding at {level}; lower the HPA's behavior.scaleUp.tolerance and hpaTolerance to allow it",
                    c.max_replicas
                );
                return (level, Reason::HoldTolerance, text);
            }
            Some(wider) if wider - base > budget && taken > 0 => {
                let text = format!(
                    "{why}; {level} -> {next} is inside the HPA tolerance ({band}) and the +{} it needs waits for a fresh {} period ({limit}); holding at {level}",
                    wider - base,
                    dur(c.scale_up_period)
                );
                return (level, Reason::HoldRateLimited, text);
            }
            Some(wider) => {
                widened = format!("; widened from {next} because {band} (the HPA would ignore it)");
                next = wider;
            }
        }
    }
    st.up_steps.push_back((now, next - base));
    let running = if o.ready > level {
        format!("{} ready, ", o.ready)
    } else {
        String::new()
    };
    let text = format!("{why}; target {level} -> {next} ({running}{limit}){widened}");
    (next, primary.reason, text)
}

fn scale_in(
    c: &PolicyConfig,
    now: Duration,
    o: &Observed,
    st: &mut PolicyState,
    level: u32,
    facts: &[String],
) -> (u32, Reason, String) {
    let calm_for = now.saturating_sub(st.calm_since.unwrap_or(now));
    let facts = facts.join(", ");
    if calm_for < c.scale_down_stabilization {
        let text = format!(
            "calm for {} of {} ({facts}); holding at {level}",
            dur(calm_for),
            dur(c.scale_down_stabilization)
        );
        return (level, Reason::HoldCalmPending, text);
    }
    let calm = format!("calm for {} ({facts})", dur(calm_for));
    if level <= c.min_replicas {
        return (
            level,
            Reason::AtMin,
            format!("{calm}; at min {}", c.min_replicas),
        );
    }
    let taken = used(&st.down_steps);
    let budget = c.scale_down_pods.saturating_sub(taken);
    let limit = format!(
        "at most -{} per {}",
        c.scale_down_pods,
        dur(c.scale_down_period)
    );
    if budget == 0 {
        let text = format!(
            "{calm}; -{taken} already taken in the last {} ({limit}); holding at {level}",
            dur(c.scale_down_period)
        );
        return (level, Reason::HoldRateLimited, text);
    }
    let next = level.saturating_sub(budget).max(c.min_replicas);
    st.down_steps.push_back((now, level - next));
    let hpa_current = o.ready.max(level);
    if !hpa_would_act(hpa_current, next, c.hpa_tolerance) {
        let text = format!(
            "{calm}; target {level} -> {next} ({limit}), but |{next}/{hpa_current} - 1| = {} <= tolerance {}: the HPA holds until a later step crosses the band; set the HPA's behavior.scaleDown.tolerance below {} and hpaTolerance to match so every step acts",
            num((1.0 - f64::from(next) / f64::from(hpa_current)).abs()),
            num(c.hpa_tolerance),
            floor3(f64::from(level - next) / f64::from(hpa_current)),
        );
        return (next, Reason::HoldTolerance, text);
    }
    let text = format!("{calm}; target {level} -> {next} ({limit})");
    (next, Reason::ScaleInCalm, text)
}

/// `x` rounded down to three decimals, as short text (a tolerance that is surely below `x`).
fn floor3(x: f64) -> String {
    let s = format!("{:.3}", (x * 1000.0).floor() / 1000.0);
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}
