//! What one replica serves within the SLO, learned online from the fleet: the throughput per
//! ready replica observed while P95 TTFT and ITL stayed within their SLOs raises the estimate;
//! a breach at a lower throughput lowers it (a correction factor in the spirit of Dynamo
//! Planner's). An optional prior from the metadata is the starting point. Under
//! `saturated=F`, a fleet that kept a queue for a whole rate window, every replica busy, served
//! its most: the estimate is then at least F of the requests per replica it completed (aborted
//! ones, such as clients giving up in the queue, left out), which a fleet sized above its need
//! (a floor of replicas kept for availability) never shows otherwise.

/// How far one breaching observation moves the estimate towards the throughput at the breach.
const CORRECTION: f64 = 0.1;
/// How much one comfortable observation raises the estimate by default (a probe: a fleet sized
/// below its capacity never shows a higher throughput by itself); `probe=F` sets it. 3 % since
/// the twentieth round, chosen on the training scenarios (`docs/evaluation/proactive.md`,
/// section 30; 0.3 % before).
pub const DEFAULT_PROBE: f64 = 0.03;
/// The most the probe raises the estimate to by default, as a multiple of the most known to be
/// served per replica (`probecap=K` sets it; 0 for no bound): 1.5 since the thirty-seventh
/// round, chosen on the training scenarios with floors of one and two replicas
/// (`docs/evaluation/proactive.md`, section 51); no bound before.
pub const DEFAULT_PROBE_CAP: f64 = 1.5;
/// A comfortable observation: the fleet serves at least this fraction of the estimate...
const PROBE_LOAD: f64 = 0.5;
/// The share of a saturated fleet's completed throughput the estimate is raised to by
/// default (`saturated=F` sets it): 0.8 since the thirty-third round, chosen on the training
/// scenarios with floors of one and two replicas (`docs/evaluation/proactive.md`, section 47);
/// 0, off, before.
pub const DEFAULT_SATURATED: f64 = 0.8;

/// What the throughput of a sustained breach bounds (`breachcap=off|probe|estimate`): a
/// replica served less than that within the SLO, until more is served within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BreachCap {
    /// Nothing: a breach moves the estimate a tenth of the way towards its throughput.
    Off,
    /// The probe raises the estimate no higher than the lowest throughput per replica a
    /// sustained breach was seen at, until more than that is served within the SLO.
    Probe,
    /// As `Probe`, and a breach below the estimate lowers it to the breach's throughput at
    /// once instead of a tenth of the way.
    Estimate,
}

impl BreachCap {
    /// Every value, in the order the setting lists them.
    pub const ALL: [Self; 3] = [Self::Off, Self::Probe, Self::Estimate];

    /// The setting's value for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Off => "off",
            Self::Probe => "probe",
            Self::Estimate => "estimate",
        }
    }
}

/// When a sustained breach above the estimate raises it (`breachedif=always|untested|above|light`,
/// for `breached=F`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum BreachLesson {
    /// At every sustained breach above the estimate, or with none yet.
    Always,
    /// Only at the breach that first tests the estimate (or makes the first one).
    Untested,
    /// At every sustained breach above an estimate that exists: a breach with none to raise
    /// makes none.
    Above,
    /// Only at the breach that first tests an estimate that exists: one light load set.
    Light,
}

impl BreachLesson {
    /// Every value, in the order the setting lists them.
    pub const ALL: [Self; 4] = [Self::Always, Self::Untested, Self::Above, Self::Light];

    /// The setting's value for it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Always => "always",
            Self::Untested => "untested",
            Self::Above => "above",
            Self::Light => "light",
        }
    }

    /// Whether a breach teaches an estimate that is `tested` or not, and exists or not.
    fn teaches(self, tested: bool, exists: bool) -> bool {
        match self {
            Self::Always => true,
            Self::Untested => !tested,
            Self::Above => exists,
            Self::Light => exists && !tested,
        }
    }
}

/// What one observation of the fleet says about capacity.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Observation {
    /// Finished requests per second per ready replica.
    pub per_replica: f64,
    /// P95 TTFT and ITL within their SLOs and no queue beyond one request per replica.
    pub within_slo: bool,
    /// A P95 latency (TTFT or ITL) over its SLO.
    pub breached: bool,
    /// Every P95 latency below half its SLO: room to serve more.
    pub comfortable: bool,
    /// Requests waited beyond one per ready replica for the whole rate window, with the same
    /// ready replicas: every replica was busy, and this is the requests per second per ready
    /// replica it completed (not aborted), what one serves at most.
    pub saturated: Option<f64>,
    /// Requests per second per ready replica completed (finished, less those aborted, such as
    /// clients giving up in a queue): what a breach's throughput counts (`breached=F`).
    pub completed: f64,
}

/// What last moved the estimate.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Source {
    /// Nothing: the prior from the metadata, or no estimate.
    Prior,
    /// Throughput served within the SLO, a breach or a comfortable probe.
    Served,
    /// A share of a saturated fleet's throughput (`saturated=F`): the throughput per replica.
    Saturated(f64),
    /// A share of the throughput per replica of a sustained breach above the estimate
    /// (`breached=F`): the throughput per replica.
    Breached(f64),
    /// The probe, stopped at its bound (`probecap=K`): the most known to be served per replica.
    ProbeBound(f64),
    /// The probe, stopped at the throughput per replica of a sustained breach (`breachcap`).
    BreachBound(f64),
    /// Inherited from an earlier scaler pod's estimate for the same trigger, not moved since.
    Inherited,
}

/// The running estimate of requests per second one replica serves within the SLO.
#[derive(Debug, Clone, PartialEq)]
pub struct CapacityEstimate {
    value: Option<f64>,
    /// How much one comfortable observation raises the estimate.
    probe: f64,
    /// The share of a saturated fleet's throughput per replica the estimate is at least
    /// (0: saturation teaches nothing).
    saturated: f64,
    /// What last moved it (`Prior` while no observation has).
    source: Source,
    /// The most the probe may raise the estimate to, as a multiple of `verified` (0: no
    /// bound).
    probe_cap: f64,
    /// The highest throughput per replica known to be served: the prior, the most served
    /// within the SLO, or what a saturated fleet's share set.
    verified: Option<f64>,
    /// What a sustained breach's throughput bounds.
    breach_cap: BreachCap,
    /// The share of a sustained breach's throughput per replica the estimate is at least,
    /// where that throughput is above it (0: a breach only lowers the estimate).
    breached: f64,
    /// When a breach's lesson (`breached`) is taken (`breachedif`).
    breached_if: BreachLesson,
    /// The lowest throughput per replica a sustained breach was seen at since more was last
    /// served within the SLO (kept only under `breach_cap` other than `Off`).
    breached_at: Option<f64>,
    /// The share of the estimate the fleet must serve per replica for a sustained breach to
    /// lower it (`breachload=F`; 0: at any load).
    lower_load: f64,
    /// The throughput per replica of the last observation's sustained breach, where
    /// `lower_load` kept it from lowering the estimate (for the decision's explanation).
    held_back: Option<f64>,
    /// Whether the estimate has met a replica's limit: a prior (measured), an inherited
    /// estimate, a sustained breach or a saturated fleet. Until then it rests on what lighter
    /// load served, a lower bound on what a replica serves.
    tested: bool,
    /// The most requests per second per replica a saturated fleet completed: what one replica
    /// carries at most, whatever share of it the estimate is. The most, not the last: a
    /// backlog draining on a fleet that grew during the burst still waits beyond one request
    /// per replica on some of them while the new ones idle, and reads far lower.
    limit: Option<f64>,
}

impl CapacityEstimate {
    /// Starts from a prior (requests per second per replica), or from nothing.
    pub fn with_prior(prior: Option<f64>) -> Self {
        let value = prior.filter(|p| p.is_finite() && *p > 0.0);
        Self {
            value,
            probe: DEFAULT_PROBE,
            saturated: DEFAULT_SATURATED,
            source: Source::Prior,
            probe_cap: DEFAULT_PROBE_CAP,
            verified: value,
            breach_cap: BreachCap::Off,
            breached: 0.0,
            breached_if: BreachLesson::Always,
            breached_at: None,
            lower_load: 0.0,
            held_back: None,
            tested: value.is_some(),
            limit: None,
        }
    }

    /// The same, with a sustained breach's throughput bounding the probe (`Probe`), and the
    /// estimate too (`Estimate`), until more is served within the SLO.
    pub fn bounded_by_breaches(self, cap: BreachCap) -> Self {
        Self {
            breach_cap: cap,
            ..self
        }
    }

    /// The same, with the probe raising the estimate to at most `cap` times the highest
    /// throughput per replica known to be served (the prior, the most served within the SLO,
    /// or a saturated fleet's share); below 1, or NaN: no bound.
    pub fn probing_at_most(self, cap: f64) -> Self {
        Self {
            probe_cap: if cap >= 1.0 { cap } else { 0.0 },
            ..self
        }
    }

    /// The same, raised by `probe` (a fraction, as `parse_policy` bounds it to 0..=0.1) per
    /// comfortable observation instead of the default's 3 %; a negative or NaN rate probes
    /// nothing.
    pub fn probing(self, probe: f64) -> Self {
        Self {
            probe: probe.max(0.0),
            ..self
        }
    }

    /// The same, raised to at least `share` (0..=1, as `parse_policy` bounds it) of the
    /// throughput per replica a saturated fleet serves; 0, negative or NaN: not at all.
    pub fn saturating(self, share: f64) -> Self {
        Self {
            saturated: if share > 0.0 { share.min(1.0) } else { 0.0 },
            ..self
        }
    }

    /// The share of a saturated fleet's throughput the estimate is at least (0: none).
    pub fn saturated_share(&self) -> f64 {
        self.saturated
    }

    /// The same, raised to at least `share` (0..=1, as `parse_policy` bounds it) of the
    /// throughput per replica of a sustained breach above the estimate: replicas whose
    /// latency breaks the SLO while they serve it are at their limit, as a saturated fleet's
    /// are, whether or not a queue has formed yet. 0, negative or NaN: not at all.
    pub fn breaching(self, share: f64) -> Self {
        Self {
            breached: if share > 0.0 { share.min(1.0) } else { 0.0 },
            ..self
        }
    }

    /// The same, lowered by a sustained breach only while the fleet serves at least `share`
    /// (0..=1, as `parse_policy` bounds it) of the estimate per replica: a breach on replicas
    /// far below the load the estimate says they carry is not their limit, but the prompts'
    /// own prefill or a few slow requests in a thin window, and more replicas, each with less
    /// load still, would not remove it. A fleet the estimate sizes too small serves more per
    /// replica until it reaches the share. 0, negative or NaN: at any load.
    pub fn lowering_at_load(self, share: f64) -> Self {
        Self {
            lower_load: if share > 0.0 { share.min(1.0) } else { 0.0 },
            ..self
        }
    }

    /// The share of the estimate a sustained breach must be served at to lower it (0: any).
    pub fn lowering_load(&self) -> f64 {
        self.lower_load
    }

    /// The throughput per replica of the last observation's sustained breach where
    /// `lowering_at_load` kept it from lowering the estimate; `None` otherwise.
    pub fn held_back(&self) -> Option<f64> {
        self.held_back
    }

    /// The share of a sustained breach's throughput the estimate is at least (0: none).
    pub fn breached_share(&self) -> f64 {
        self.breached
    }

    /// The same, with a breach's lesson (`breaching`) taken when `when` says.
    pub fn breaching_if(self, when: BreachLesson) -> Self {
        Self {
            breached_if: when,
            ..self
        }
    }

    /// The probe's bound as a multiple of the most known to be served (0: none).
    pub fn probe_cap(&self) -> f64 {
        self.probe_cap
    }

    /// Starts again from an estimate an earlier scaler pod learned for the same trigger:
    /// `value`, and `verified`, the most it knew to be served (the probe's bound follows it).
    /// Observations move it as they move any estimate; non-finite or non-positive values are
    /// ignored.
    pub fn inherit(&mut self, value: f64, verified: Option<f64>) {
        if !(value.is_finite() && value > 0.0) {
            return;
        }
        self.value = Some(value);
        self.verified = verified
            .filter(|v| v.is_finite() && *v > 0.0)
            .or(Some(value));
        self.source = Source::Inherited;
        self.tested = true;
    }

    /// Whether the estimate has met a replica's limit (a prior, an inherited estimate, a
    /// sustained breach or a saturated fleet), rather than resting only on what lighter load
    /// served.
    pub fn tested(&self) -> bool {
        self.tested
    }

    /// The highest throughput per replica known to be served, once there is one.
    pub fn verified(&self) -> Option<f64> {
        self.verified
    }

    /// The most requests per second per replica a saturated fleet completed, once a fleet has
    /// been seen saturated: a replica's limit, which the estimate is a share of
    /// (`saturated=F`) or below. Not inherited: a pod learns it from a queue.
    pub fn limit(&self) -> Option<f64> {
        self.limit
    }

    /// What last moved the estimate.
    pub fn source(&self) -> Source {
        self.source
    }

    /// The estimate, once there is one.
    pub fn value(&self) -> Option<f64> {
        self.value
    }

    /// Whether observations have moved it.
    pub fn learned(&self) -> bool {
        self.source != Source::Prior
    }

    /// Updates the estimate with one observation: a throughput served within the SLO is at
    /// least the capacity; a breach at a lower throughput moves the estimate towards it.
    pub fn observe(&mut self, o: Observation) {
        self.held_back = None;
        let x = o.per_replica;
        if !x.is_finite() || x <= 0.0 {
            return;
        }
        let was_tested = self.tested;
        let saturated = o.saturated.filter(|d| d.is_finite() && *d > 0.0);
        if o.breached || saturated.is_some() {
            self.tested = true;
        }
        if let Some(done) = saturated {
            self.limit = Some(self.limit.map_or(done, |l| l.max(done)));
        }
        // A saturated fleet completes at most what its replicas can: the capacity within the
        // SLO is taken to be at least the share `saturated` of it. A breach at a lower
        // throughput corrects it as it corrects any estimate.
        if let Some(done) = saturated {
            let floor = self.saturated * done;
            if floor > 0.0 && self.value.is_none_or(|c| floor > c) {
                self.value = Some(floor);
                self.verify(floor);
                self.source = Source::Saturated(done);
                return;
            }
        }
        // Likewise a sustained breach above the estimate (`breached=F`), counting completed
        // requests: clients that give up in a queue finish in bursts that no replica served.
        // `breachedif` says which breaches teach: under `untested` and `light` only the one
        // that first tests the estimate, under `above` and `light` only one above an estimate.
        let done = o.completed;
        let teaches = self.breached_if.teaches(was_tested, self.value.is_some());
        if o.breached && teaches && self.breached > 0.0 && done.is_finite() && done > 0.0 {
            let floor = self.breached * done;
            if self.value.is_none_or(|c| floor > c) {
                self.value = Some(floor);
                self.verify(floor);
                self.source = Source::Breached(done);
                return;
            }
        }
        if o.within_slo {
            self.verify(x);
            if self.breached_at.is_some_and(|b| x > b) {
                self.breached_at = None;
            }
        }
        if o.breached && self.breach_cap != BreachCap::Off {
            self.breached_at = Some(self.breached_at.map_or(x, |b| b.min(x)));
        }
        match self.value {
            None if o.within_slo => {
                self.value = Some(x);
                self.source = Source::Served;
            }
            Some(c) if o.within_slo && x > c => {
                self.value = Some(x);
                self.source = Source::Served;
            }
            Some(c) if o.breached && x < c && x >= self.lower_load * c => {
                self.value = Some(if self.breach_cap == BreachCap::Estimate {
                    x
                } else {
                    c - CORRECTION * (c - x)
                });
                self.source = Source::Served;
            }
            Some(c) if o.breached && x < c => self.held_back = Some(x),
            Some(c) if o.within_slo && o.comfortable && x >= PROBE_LOAD * c => {
                let raised = c * (1.0 + self.probe);
                let (next, source) = match self.verified.filter(|_| self.probe_cap > 0.0) {
                    Some(v) if self.probe_cap * v < raised => {
                        (self.probe_cap * v, Source::ProbeBound(v))
                    }
                    _ => (raised, Source::Served),
                };
                let (next, source) = match self.breached_at {
                    Some(b) if b < next => (b, Source::BreachBound(b)),
                    _ => (next, source),
                };
                if next > c {
                    self.value = Some(next);
                    self.source = source;
                }
            }
            _ => {}
        }
    }

    /// Records `x` requests per second per replica as known to be served.
    fn verify(&mut self, x: f64) {
        self.verified = Some(self.verified.map_or(x, |v| v.max(x)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(x: f64) -> Observation {
        Observation {
            per_replica: x,
            within_slo: true,
            breached: false,
            comfortable: false,
            saturated: None,
            completed: x,
        }
    }

    fn bad(x: f64) -> Observation {
        Observation {
            per_replica: x,
            within_slo: false,
            breached: true,
            comfortable: false,
            saturated: None,
            completed: x,
        }
    }

    /// A sustained queue with every P95 over its SLO, at `x` per replica, all completed.
    fn full(x: f64) -> Observation {
        Observation {
            saturated: Some(x),
            ..bad(x)
        }
    }

    #[test]
    fn an_estimate_is_tested_by_a_prior_an_inheritance_a_breach_or_a_saturated_fleet_only() {
        let mut light = CapacityEstimate::with_prior(None);
        assert!(!light.tested());
        for x in [1.0, 1.5, 2.0] {
            light.observe(Observation {
                comfortable: true,
                ..ok(x)
            });
        }
        assert!(light.value().is_some());
        assert!(
            !light.tested(),
            "what light load served is only a lower bound"
        );
        let mut breached = light.clone();
        breached.observe(bad(8.0));
        assert!(breached.tested());
        let mut saturated = light.clone();
        saturated.observe(Observation {
            breached: false,
            ..full(9.0)
        });
        assert!(saturated.tested());
        let mut inherited = light.clone();
        inherited.inherit(12.0, None);
        assert!(inherited.tested());
        assert!(CapacityEstimate::with_prior(Some(10.0)).tested());
        // Nothing a bad reading says tests it.
        let mut nan = light;
        nan.observe(bad(f64::NAN));
        assert!(!nan.tested());
    }

    #[test]
    fn under_breached_a_breach_above_the_estimate_raises_it_to_its_share() {
        // A light load taught 2.5; two replicas then breach while completing 13 each.
        let light = CapacityEstimate::with_prior(Some(2.5));
        let mut off = light.clone();
        off.observe(bad(13.0));
        assert_eq!(off.value(), Some(2.5), "off: a breach above says nothing");
        let mut on = light.clone().breaching(0.8);
        on.observe(bad(13.0));
        assert_eq!(on.value(), Some(0.8 * 13.0));
        assert_eq!(on.source(), Source::Breached(13.0));
        assert_eq!(on.verified(), Some(0.8 * 13.0));
        // A breach below the estimate corrects it as before.
        on.observe(bad(8.0));
        let corrected = 0.8 * 13.0 - CORRECTION * (0.8 * 13.0 - 8.0);
        assert!((on.value().unwrap() - corrected).abs() < 1e-9);
        assert_eq!(on.source(), Source::Served);
        // A breach whose share is below the estimate leaves it.
        let mut high = CapacityEstimate::with_prior(Some(12.0)).breaching(0.8);
        high.observe(bad(13.0));
        assert_eq!(high.value(), Some(12.0));
        // Requests that finished aborted (clients that gave up in a queue) were not served.
        let mut aborts = light.breaching(0.8);
        aborts.observe(Observation {
            completed: 5.0,
            ..bad(48.0)
        });
        assert_eq!(aborts.value(), Some(4.0));
        assert_eq!(aborts.source(), Source::Breached(5.0));
    }

    #[test]
    fn under_breachedif_untested_only_the_breach_that_first_tests_the_estimate_teaches() {
        // A light load taught 2.5, untested; a breach at 13 per replica tests it.
        let mut light = CapacityEstimate::with_prior(None).breaching(0.8);
        light.observe(ok(2.5));
        assert!(!light.tested());
        let mut once = light.clone().breaching_if(BreachLesson::Untested);
        let mut always = light;
        for e in [&mut once, &mut always] {
            e.observe(bad(13.0));
            assert_eq!(e.value(), Some(0.8 * 13.0));
            assert!(e.tested());
        }
        // A later breach above the estimate teaches only without the gate.
        once.observe(bad(20.0));
        always.observe(bad(20.0));
        assert_eq!(once.value(), Some(0.8 * 13.0));
        assert_eq!(always.value(), Some(0.8 * 20.0));
        // An estimate a saturated fleet tested first is not raised by a breach.
        let mut saturated = CapacityEstimate::with_prior(None)
            .breaching(0.8)
            .breaching_if(BreachLesson::Untested);
        saturated.observe(ok(2.5));
        saturated.observe(full(5.0));
        let before = saturated.value();
        saturated.observe(bad(13.0));
        assert_eq!(saturated.value(), before);
    }

    #[test]
    fn under_breachedif_above_and_light_a_breach_with_no_estimate_makes_none() {
        let lesson = |when: BreachLesson| {
            CapacityEstimate::with_prior(None)
                .breaching(0.8)
                .breaching_if(when)
        };
        // No estimate yet: a breach makes the first one under `always` and `untested` only.
        for (when, made) in [
            (BreachLesson::Always, Some(0.8 * 13.0)),
            (BreachLesson::Untested, Some(0.8 * 13.0)),
            (BreachLesson::Above, None),
            (BreachLesson::Light, None),
        ] {
            let mut e = lesson(when);
            e.observe(bad(13.0));
            assert_eq!(e.value(), made, "{}", when.as_str());
        }
        // A light load's estimate: the first breach above it teaches under all four; the
        // second only where the gate does not ask for an untested estimate.
        for (when, second) in [
            (BreachLesson::Always, 0.8 * 20.0),
            (BreachLesson::Untested, 0.8 * 13.0),
            (BreachLesson::Above, 0.8 * 20.0),
            (BreachLesson::Light, 0.8 * 13.0),
        ] {
            let mut e = lesson(when);
            e.observe(ok(2.5));
            e.observe(bad(13.0));
            assert_eq!(e.value(), Some(0.8 * 13.0), "{}", when.as_str());
            e.observe(bad(20.0));
            assert_eq!(e.value(), Some(second), "{}", when.as_str());
        }
    }

    #[test]
    fn a_saturated_fleet_raises_the_estimate_to_its_share_only_when_set() {
        // A fleet kept above its need (a floor of two replicas) probed the estimate to 6.8; a
        // burst then queues on it at 13 per replica.
        let mut off = CapacityEstimate::with_prior(Some(6.8)).saturating(0.0);
        off.observe(full(13.0));
        assert_eq!(off.value(), Some(6.8), "off: a breach above says nothing");
        assert_eq!(off.source(), Source::Prior);
        let mut default = CapacityEstimate::with_prior(Some(6.8));
        default.observe(full(13.0));
        assert!(
            (default.value().unwrap() - 10.4).abs() < 1e-9,
            "80 % by default"
        );
        let mut on = CapacityEstimate::with_prior(Some(6.8)).saturating(0.9);
        on.observe(full(13.0));
        assert!((on.value().unwrap() - 11.7).abs() < 1e-9);
        assert!(on.learned());
        assert_eq!(on.source(), Source::Saturated(13.0));
        // Never lowered by it: a saturated fleet serving less per replica than the estimate
        // (a breach below it) is corrected as any breach is.
        on.observe(full(20.0 / 3.0));
        assert!(on.value().unwrap() < 11.7 && on.value().unwrap() > 11.0);
        assert_eq!(on.source(), Source::Served);
        // No estimate yet: saturation gives the first one.
        let mut fresh = CapacityEstimate::with_prior(None).saturating(0.8);
        fresh.observe(full(10.0));
        assert_eq!(fresh.value(), Some(8.0));
        // Only what was completed counts: 20 finished per replica, 7 of them aborted.
        let mut aborts = CapacityEstimate::with_prior(Some(6.8)).saturating(0.9);
        aborts.observe(Observation {
            saturated: Some(13.0),
            ..bad(20.0)
        });
        assert!((aborts.value().unwrap() - 11.7).abs() < 1e-9);
        // A queue that was not sustained (not saturated) teaches nothing beyond a breach.
        let mut brief = CapacityEstimate::with_prior(Some(6.8)).saturating(0.9);
        brief.observe(bad(13.0));
        assert_eq!(brief.value(), Some(6.8));
        // Out-of-range shares are clamped or off.
        let mut whole = CapacityEstimate::with_prior(Some(1.0)).saturating(7.0);
        whole.observe(full(5.0));
        assert_eq!(whole.value(), Some(5.0));
        let mut nan = CapacityEstimate::with_prior(Some(1.0)).saturating(f64::NAN);
        nan.observe(full(5.0));
        assert_eq!(nan.value(), Some(1.0));
    }

    #[test]
    fn the_limit_is_the_most_a_saturated_fleet_completed_whatever_the_share() {
        // Light load and breaches say nothing about the limit; no estimate has one at first.
        let mut c = CapacityEstimate::with_prior(None);
        c.observe(ok(2.0));
        c.observe(bad(3.0));
        assert_eq!(c.limit(), None);
        // A saturated fleet: the estimate is 80 % of it by default, the limit all of it.
        c.observe(full(16.0));
        assert!((c.value().unwrap() - 12.8).abs() < 1e-9);
        assert_eq!(c.limit(), Some(16.0));
        // A saturated fleet that completes less (a backlog draining on a grown fleet) does not
        // lower it; one that completes more raises it. With saturation teaching the estimate
        // nothing it is still recorded.
        c.observe(full(8.5));
        assert_eq!(c.limit(), Some(16.0));
        c.observe(full(16.3));
        assert_eq!(c.limit(), Some(16.3));
        let mut off = CapacityEstimate::with_prior(Some(6.8)).saturating(0.0);
        off.observe(full(13.0));
        assert_eq!((off.value(), off.limit()), (Some(6.8), Some(13.0)));
        // A throughput that is not a number is ignored.
        off.observe(Observation {
            saturated: Some(f64::NAN),
            ..bad(20.0)
        });
        assert_eq!(off.limit(), Some(13.0));
    }

    #[test]
    fn comfortable_load_probes_upwards_idle_does_not() {
        let mut c = CapacityEstimate::with_prior(Some(10.0));
        let easy = |x| Observation {
            comfortable: true,
            ..ok(x)
        };
        c.observe(easy(2.0));
        assert_eq!(c.value(), Some(10.0), "too little load to say anything");
        for _ in 0..100 {
            c.observe(easy(6.0));
        }
        let v = c.value().unwrap();
        // Up to where 6 per replica is half the estimate (one 3 % step past it), no further.
        assert!((12.0..12.4).contains(&v), "{v}");
        // Not comfortable (latency above half its SLO): no probe.
        c.observe(ok(6.0));
        assert_eq!(c.value(), Some(v));
    }

    #[test]
    fn the_probe_cap_bounds_the_estimate_by_what_was_served() {
        let easy = |x| Observation {
            comfortable: true,
            ..ok(x)
        };
        // No prior: 4 per replica served within the SLO starts the estimate at 4; comfortable
        // load at that level probes it up to twice that without a bound, to 1.25 times under
        // one of 1.25, and to 1.5 times by default.
        let mut default = CapacityEstimate::with_prior(None);
        for _ in 0..100 {
            default.observe(easy(4.0));
        }
        assert_eq!(default.value(), Some(6.0));
        let mut free = CapacityEstimate::with_prior(None).probing_at_most(0.0);
        let mut capped = CapacityEstimate::with_prior(None).probing_at_most(1.25);
        for c in [&mut free, &mut capped] {
            for _ in 0..100 {
                c.observe(easy(4.0));
            }
        }
        assert!(free.value().unwrap() > 7.9, "{free:?}");
        assert_eq!(capped.value(), Some(5.0));
        assert_eq!(capped.source(), Source::ProbeBound(4.0));
        // More served within the SLO lifts the bound with it.
        for _ in 0..100 {
            capped.observe(easy(6.0));
        }
        assert_eq!(capped.value(), Some(7.5));
        // A breach lowers the estimate; the probe climbs back no higher than the bound.
        capped.observe(bad(3.0));
        assert!(capped.value().unwrap() < 7.5);
        for _ in 0..100 {
            capped.observe(easy(6.0));
        }
        assert_eq!(capped.value(), Some(7.5));
        // A prior counts as served; a cap below 1 is none; an estimate above the bound (here
        // the prior) is not lowered by it.
        let mut prior = CapacityEstimate::with_prior(Some(10.0)).probing_at_most(1.1);
        for _ in 0..100 {
            prior.observe(easy(6.0));
        }
        assert_eq!(prior.value(), Some(11.0));
        let mut none = CapacityEstimate::with_prior(Some(10.0)).probing_at_most(0.5);
        for _ in 0..100 {
            none.observe(easy(6.0));
        }
        assert!(none.value().unwrap() > 11.9, "{none:?}");
    }

    #[test]
    fn a_sustained_breach_bounds_the_probe_until_more_is_served() {
        let easy = |x| Observation {
            comfortable: true,
            ..ok(x)
        };
        // 8 per replica served within the SLO: the probe's bound is 12. A breach at 7.5 per
        // replica, then comfortable load at 6: without `breachcap` the probe climbs back to
        // the bound; under `probe` it stops at the breach's throughput.
        let run = |cap| {
            let mut c = CapacityEstimate::with_prior(None).bounded_by_breaches(cap);
            c.observe(ok(8.0));
            for _ in 0..100 {
                c.observe(easy(6.0));
            }
            assert_eq!(c.value(), Some(12.0));
            c.observe(bad(7.5));
            let corrected = c.value().unwrap();
            for _ in 0..100 {
                c.observe(easy(6.0));
            }
            (corrected, c)
        };
        let (corrected, off) = run(BreachCap::Off);
        assert!((corrected - 11.55).abs() < 1e-9, "a tenth of the way");
        assert_eq!(off.value(), Some(12.0));
        let (corrected, probe) = run(BreachCap::Probe);
        assert!((corrected - 11.55).abs() < 1e-9, "the same correction");
        assert_eq!(probe.value(), Some(corrected), "no probe above the breach");
        // Under `estimate` the breach lowers the estimate to its throughput at once, and the
        // probe climbs no higher than it.
        let (corrected, mut estimate) = run(BreachCap::Estimate);
        assert_eq!(corrected, 7.5);
        assert_eq!(estimate.value(), Some(7.5));
        estimate.observe(bad(7.0));
        assert_eq!(estimate.value(), Some(7.0), "the lowest breach bounds");
        estimate.observe(easy(6.9));
        assert_eq!(estimate.value(), Some(7.0));
        // With no `probecap`, comfortable load at 3.6 probes the estimate up from 3.5 no
        // higher than the breach's 7: it is the bound the explanation names.
        let mut low = CapacityEstimate::with_prior(Some(3.5))
            .probing_at_most(0.0)
            .bounded_by_breaches(BreachCap::Probe);
        low.observe(bad(7.0));
        assert_eq!(
            low.value(),
            Some(3.5),
            "a breach above the estimate lowers nothing"
        );
        for _ in 0..100 {
            low.observe(easy(3.6));
        }
        assert_eq!(low.value(), Some(7.0));
        assert_eq!(low.source(), Source::BreachBound(7.0));
        // More than the breach's throughput served within the SLO lifts the bound.
        low.observe(ok(7.2));
        assert_eq!(low.value(), Some(7.2));
        for _ in 0..100 {
            low.observe(easy(7.2));
        }
        assert!(low.value().unwrap() > 10.0, "{low:?}");
    }

    #[test]
    fn the_probe_rate_is_a_setting() {
        let easy = Observation {
            comfortable: true,
            ..ok(8.0)
        };
        let mut slow = CapacityEstimate::with_prior(Some(10.0)).probing(0.003);
        let mut fast = CapacityEstimate::with_prior(Some(10.0)).probing(0.01);
        let mut off = CapacityEstimate::with_prior(Some(10.0)).probing(0.0);
        for c in [&mut slow, &mut fast, &mut off] {
            c.observe(easy);
        }
        assert!((slow.value().unwrap() - 10.03).abs() < 1e-9);
        assert!((fast.value().unwrap() - 10.1).abs() < 1e-9);
        assert_eq!(off.value(), Some(10.0));
        let mut default = CapacityEstimate::with_prior(Some(10.0));
        default.observe(easy);
        assert!((default.value().unwrap() - 10.3).abs() < 1e-9);
    }

    #[test]
    fn healthy_throughput_raises_and_breaches_lower() {
        let mut c = CapacityEstimate::with_prior(None);
        assert_eq!(c.value(), None);
        c.observe(bad(3.0));
        assert_eq!(c.value(), None, "a breach alone gives no capacity");
        c.observe(ok(10.0));
        c.observe(ok(8.0));
        assert_eq!(c.value(), Some(10.0));
        c.observe(ok(14.0));
        assert_eq!(c.value(), Some(14.0));
        // Breaking the SLO at 12 per replica: the estimate moves towards 12, never below it.
        for _ in 0..100 {
            c.observe(bad(12.0));
        }
        let v = c.value().unwrap();
        assert!((12.0..12.01).contains(&v), "{v}");
        // A breach above the estimate says nothing new.
        c.observe(bad(20.0));
        assert_eq!(c.value(), Some(v));
        assert!(c.learned());
    }

    #[test]
    fn under_breachload_a_breach_far_below_the_estimate_does_not_lower_it() {
        // An estimate of 0.8 per replica; between bursts 15 replicas serve 0.75 req/s, 0.05
        // each, and a thin window's slow first tokens breach. At any load the breach pulls
        // the estimate towards 0.05; with `breachload=0.5` only a breach at 0.4 or more does.
        let run = |load: f64| {
            let mut c = CapacityEstimate::with_prior(Some(0.8)).lowering_at_load(load);
            for _ in 0..20 {
                c.observe(bad(0.05));
            }
            let light = c.value().unwrap();
            for _ in 0..20 {
                c.observe(bad(0.5));
            }
            (light, c.value().unwrap())
        };
        let (light, loaded) = run(0.0);
        assert!(light < 0.2, "{light}");
        assert!(loaded < 0.5, "{loaded}");
        let (light, loaded) = run(0.5);
        assert_eq!(light, 0.8);
        assert!((0.5..0.6).contains(&loaded), "{loaded}");
        // The breach held back is kept for the explanation until the next observation.
        let mut c = CapacityEstimate::with_prior(Some(0.8)).lowering_at_load(0.5);
        c.observe(bad(0.05));
        assert_eq!(c.held_back(), Some(0.05));
        c.observe(bad(0.5));
        assert_eq!(c.held_back(), None);
        c.observe(bad(0.05));
        c.observe(ok(0.05));
        assert_eq!(c.held_back(), None);
        // Out-of-range shares are bounded, as `breaching` bounds its own.
        let (light, _) = run(f64::NAN);
        assert!(light < 0.2, "{light}");
        let (light, _) = run(7.0);
        assert_eq!(light, 0.8);
    }

    #[test]
    fn a_prior_is_the_start_and_junk_is_ignored() {
        let mut c = CapacityEstimate::with_prior(Some(15.0));
        assert_eq!(c.value(), Some(15.0));
        assert!(!c.learned());
        c.observe(ok(f64::NAN));
        c.observe(ok(-1.0));
        c.observe(ok(9.0));
        assert_eq!(c.value(), Some(15.0));
        assert_eq!(CapacityEstimate::with_prior(Some(0.0)).value(), None);
    }
}
