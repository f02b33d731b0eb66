//! The metadata keys, each declared once: its name, its default and meaning as documented
//! (the README's and docs/policy.md's tables are checked against them), and the reader that
//! parses its value into the field it sets. [`super::ScalerConfig::from_metadata`] reads every
//! key through [`KEYS`], so a key cannot be documented without being read. Also the
//! unknown-key check with a closest-key suggestion.

use std::collections::HashMap;
use std::time::Duration;

use super::targets::{self, TargetKeys};
use super::{ConfigError, parse};
use crate::policy::PolicyConfig;

/// The scrape interval when `scrapeIntervalSeconds` is not set.
pub(super) const DEFAULT_SCRAPE_INTERVAL: Duration = Duration::from_secs(2);

/// A configuration being read: the defaults, with each key present overwriting its field.
#[derive(Debug, Clone)]
pub(super) struct Draft {
    /// The target keys, combined once all are read.
    pub(super) targets: TargetKeys,
    /// `model`.
    pub(super) model: Option<String>,
    /// `scrapeIntervalSeconds`.
    pub(super) scrape_interval: Duration,
    /// Every policy key.
    pub(super) policy: PolicyConfig,
}

impl Default for Draft {
    fn default() -> Self {
        Self {
            targets: TargetKeys::default(),
            model: None,
            scrape_interval: DEFAULT_SCRAPE_INTERVAL,
            policy: PolicyConfig::default(),
        }
    }
}

/// Reads one value into its field of the draft, or says what was expected (the caller names
/// the key).
pub(super) type Read = fn(&mut Draft, &str) -> Result<(), String>;

/// One metadata key: its name, default, meaning, and how its value is read.
#[derive(Debug, Clone, Copy)]
pub struct MetadataKey {
    /// The key as written in the trigger's `metadata`.
    pub key: &'static str,
    /// The default, as documented ("required" or "unset" where there is none).
    pub default: &'static str,
    /// What it means.
    pub meaning: &'static str,
    /// Parses a value and sets the field it fills.
    pub(super) read: Read,
}

/// Every key the scaler reads, in validation order (and the docs' order).
pub const KEYS: &[MetadataKey] = &[
    MetadataKey {
        key: "endpoints",
        default: "required unless `service`",
        meaning: "comma-separated vLLM metrics URLs (`http://10.0.0.7:8000/metrics`) or `host:port` entries (`metricsPath` appended)",
        read: |d, v| {
            d.targets.endpoints = Some(targets::endpoints(v)?);
            Ok(())
        },
    },
    MetadataKey {
        key: "service",
        default: "required unless `endpoints`",
        meaning: "DNS name of a headless Service (`name` or `name:port`), every address re-resolved each scrape",
        read: |d, v| {
            d.targets.service = Some(targets::service(v)?);
            Ok(())
        },
    },
    MetadataKey {
        key: "port",
        default: "8000",
        meaning: "port of vLLM's `/metrics` with `service`",
        read: |d, v| {
            d.targets.port = Some(targets::port(v)?);
            Ok(())
        },
    },
    MetadataKey {
        key: "metricsPath",
        default: "/metrics",
        meaning: "path of the metrics endpoint for `service` and `host:port` endpoints",
        read: |d, v| {
            d.targets.metrics_path = Some(targets::metrics_path(v)?);
            Ok(())
        },
    },
    MetadataKey {
        key: "model",
        default: "unset (all models)",
        meaning: "only series whose `model_name` label equals this",
        read: |d, v| {
            d.model = Some(parse::model(v)?);
            Ok(())
        },
    },
    MetadataKey {
        key: "queueDepthPerReplica",
        default: "25",
        meaning: "N: waiting requests per ready replica above which to scale out; demand is ceil(queue / N) replicas",
        read: |d, v| {
            d.policy.queue_depth_per_replica = parse::positive(v, "a positive number")?;
            Ok(())
        },
    },
    MetadataKey {
        key: "latencySloSeconds",
        default: "60",
        meaning: "P95 end-to-end latency SLO in seconds, or `off`; above it scale out, below half of it counts as calm, and `off` takes it out of both. End-to-end latency grows with output length, so the default is only a runaway guard: set it to a real budget only for short, fixed-length outputs (the source guide's 5 s)",
        read: |d, v| {
            d.policy.e2e_latency_slo_seconds = parse::slo(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "ttftSloSeconds",
        default: "2",
        meaning: "P95 time-to-first-token SLO in seconds, or `off`; same rules as latencySloSeconds",
        read: |d, v| {
            d.policy.ttft_slo_seconds = parse::slo(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "itlSloSeconds",
        default: "0.07",
        meaning: "P95 inter-token latency (TPOT) SLO in seconds, or `off`; same rules as latencySloSeconds",
        read: |d, v| {
            d.policy.itl_slo_seconds = parse::slo(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "kvCacheWarning",
        default: "0.80",
        meaning: "KV-cache usage fraction (fullest pod) at or above which the fleet is not calm",
        read: |d, v| {
            d.policy.kv_cache_warning = parse::fraction(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "kvCacheCritical",
        default: "0.95",
        meaning: "KV-cache usage fraction (fullest pod) above which, held for 30 s, to scale out",
        read: |d, v| {
            d.policy.kv_cache_critical = parse::fraction(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "preemptionRateThreshold",
        default: "5",
        meaning: "preemptions per second per ready replica above which to scale out",
        read: |d, v| {
            d.policy.preemptions_per_second_per_replica =
                parse::positive(v, "a positive number of preemptions per second per replica")?;
            Ok(())
        },
    },
    MetadataKey {
        key: "minReplicas",
        default: "1",
        meaning: "lowest replica target (>= 1; scale to zero is KEDA's `minReplicaCount` with IsActive)",
        read: |d, v| {
            d.policy.min_replicas = parse::replicas(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "maxReplicas",
        default: "5",
        meaning: "highest replica target",
        read: |d, v| {
            d.policy.max_replicas = parse::replicas(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "scaleUpPods",
        default: "2",
        meaning: "at most this many replicas added per scale-up period",
        read: |d, v| {
            d.policy.scale_up_pods = parse::pods(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "scaleUpPeriodSeconds",
        default: "60",
        meaning: "the scale-up rate-limit window",
        read: |d, v| {
            d.policy.scale_up_period = parse::seconds_positive(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "scaleUpStabilizationSeconds",
        default: "30",
        meaning: "a breach must hold this long before scaling out",
        read: |d, v| {
            d.policy.scale_up_stabilization = parse::seconds(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "scaleDownPods",
        default: "1",
        meaning: "at most this many replicas removed per scale-down period",
        read: |d, v| {
            d.policy.scale_down_pods = parse::pods(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "scaleDownPeriodSeconds",
        default: "120",
        meaning: "the scale-in rate-limit window",
        read: |d, v| {
            d.policy.scale_down_period = parse::seconds_positive(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "scaleDownStabilizationSeconds",
        default: "300",
        meaning: "calm must hold this long before scaling in; any breach restarts it",
        read: |d, v| {
            d.policy.scale_down_stabilization = parse::seconds(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "startupGraceSeconds",
        default: "600",
        meaning: "replicas asked for but not ready count as capacity on the way this long (guardrails do not stack)",
        read: |d, v| {
            d.policy.startup_grace = parse::seconds(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "scrapeIntervalSeconds",
        default: "2",
        meaning: "how often the scaler scrapes and decides (>= 0.1)",
        read: |d, v| {
            d.scrape_interval = parse::scrape_interval(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "rateWindowSeconds",
        default: "60",
        meaning: "window of the request and token rates and the P95 latencies, like Prometheus's `rate(x[1m])` (at least 3 scrape intervals, at most 180); the proactive policy's demand growth, stable-fleet and withdrawal windows follow it",
        read: |d, v| {
            d.policy.rate_window = parse::rate_window(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "hpaTolerance",
        default: "0.1",
        meaning: "the HPA's tolerance; set it to the HPA's `behavior.scaleUp/scaleDown.tolerance` when you change that",
        read: |d, v| {
            d.policy.hpa_tolerance = parse::tolerance(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "mode",
        default: "active",
        meaning: "`active` returns the decided target; `advisory` returns the observed ready replicas and reports the decision",
        read: |d, v| {
            d.policy.mode = parse::mode(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "policy",
        default: "proactive",
        meaning: "`guide` runs the source guide's reactive rules alone; `proactive` sizes the fleet for the demand forecast over the start-up time at a learned per-replica capacity, with the guide's rules as a backstop; settings follow after `;`: `utilization=F` (default 0.8), `capacity=R` (prior, requests per second per replica within the SLO), `startup=S` (seconds; learned when unset; recommended: set it to the pods' mean creation-to-ready time, since the learned value can read half of it), `peak=S` (a floor for the highest minute of demand in the last S seconds, set aside like the hindsight floor in a repeating pattern's troughs under `troughs=pattern`; 0 turns it off; default 1800 since the thirtieth round, 0 before), `drain=S` (seconds to clear the backlog; default 60), `trend=W` (weight of the projected trend; default 1), `backstop=always|growing` (follow the guide's triggers always, or only while in-flight requests grow; default growing), `periodic=on|off` (expect a demand pattern that repeated twice with a period of 10 to 120 minutes again, a start-up ahead; default on), `release=S` (a surplus of at least half the fleet, unneeded with no trigger for S seconds and never less than the start-up time in use, is released without waiting for the calm period; default 60; 0 turns it off), `rise=S` (the rising trend is at most the slope over the last S seconds, so a step that has happened is not extrapolated as a ramp; default 180; 0 turns it off), `backlog=K` (the backlog term asks for at most K replicas beyond the demand's own need, a whole number; default unset, no cap), `settle=on|off|steady|band` (once the ready replicas cover the demand's own need, the backlog is left to drain on them: it is not sized for, and replicas still starting beyond the need are withdrawn at once instead of after a rate window; `steady`: as `on`, and for a rate window after settling a need one replica above the ready ones asks for that replica rather than for the backlog's; `band`: as `steady`, and starting replicas are withdrawn only after the need stayed at or below the ready ones for a rate window; default on), `hold=K` (a surplus of at least half the fleet, the capacity of a burst that has passed, is held until the need has stayed below the level for K start-up times, at the highest need of the demand alone within them; default 3 since the twenty-sixth round, where it kept on-off-mooncake's fleet through its 15-minute troughs; 0, off, before), `onset=S` (the in-flight growth is also measured over the last S seconds and the larger growth counts in the demand while the in-flight requests grow, so a burst's arrivals are seen within seconds; default 0, off), `breach=any|queued` (whether a sustained P95 TTFT over its SLO lowers the capacity estimate with no queue, or only while requests wait beyond one per ready replica: with no queue, TTFT is the prompts' own prefill, which more replicas do not shorten; ITL breaches count either way; default any), `startups=ask|each` (how the start-up time is learned when not set: `ask`, from an ask to the ready replicas reaching it, what is waited for cut back with the ask; `each`, every replica asked matched, oldest first, with the next that becomes ready, the mean over the first ten then a running mean; default ask), `attainment=F` (0 < F <= 1: what \"within the SLO\" means to the capacity estimate, at least F of the latency window's first tokens and inter-token gaps within their SLOs, read from the histograms' buckets, instead of P95 TTFT and ITL within them; 0.95 is the P95 test; a share the traffic cannot attain at any load drives the need up to maxReplicas; default unset, the P95 test), `shares=both|ttft` (which latencies `attainment` reads as a share: `both`, first tokens and inter-token gaps, counted per token; `ttft`, first tokens only, one per request, and inter-token gaps keep the P95 test; default both), `hindsight=advice|floor` (`floor`: once the policy's own once-a-minute hindsight finds a static fleet that would have served at least 1 point more of the demand with at most 97 % of ours' replica-hours, that fleet's size is a floor under the need until no comparison has found one for a day; `advice` only reports it; default floor), `trendcap=off|pattern` (`pattern`: while a repeating pattern is found, the forecast over the start-up time is at most the higher of the demand now and the highest minute of demand one period ago over the same stretch, so a repeating burst's onset is not extrapolated as a ramp beyond the level it reached before; default pattern since the fifty-ninth round, off before), `troughs=floor|pattern` (`pattern`: while a repeating pattern is found and the highest minute it expects over the next `ahead` start-up times and two minutes (one period ago) is below its mean over the last period, the hindsight floor is set aside and the pattern sizes the fleet, so a floor learned from repeating bursts is held for the bursts and not between them; default pattern since the twenty-second round, floor before), `ahead=K` (1 <= K <= 10: under `troughs=pattern`, how many start-up times and two minutes ahead the pattern must expect less than its mean for the floor to be set aside; default 2 since the twenty-second round), `ceiling=off|seen|breach|history|at99` (`seen`: while a hindsight floor is held, the fleet is within its SLOs with no queue and no guide trigger, and the demand now is at most both the highest demand of the history that named the fleet and what that fleet serves at the capacity estimate, the need is at most that fleet's size; `breach`: as `seen`, and through a breach, a queue and a guide trigger too, since the demand counts the in-flight growth; `history`: as `breach`, and whatever the capacity estimate now, the demand now need only be within the history's highest; `at99`: as `history` at a fleet its comparison found serving at least 99 % of the demand, and as `seen` at another, the largest that merely beats ours, which may not carry a crowd's return; the guide's backstop is never capped; default seen since the twenty-second round, off before), `floorsize=largest|latest` (which fleet the hindsight floor holds when comparisons name different ones: `largest`, the largest named within the day; `latest`, the one the last comparison named; default largest), `named=at99|cheapest` (which fleet a comparison names as beating ours: `at99`, the smallest fleet serving 99 % of the demand if that one beats ours, else the largest that beats ours; `cheapest`, the smallest that beats ours; default at99, and cheapest in the twenty-seventh to twenty-ninth rounds), `holdtroughs=keep|pattern` (`pattern`: while `troughs=pattern` sets the hindsight floor aside in a repeating pattern's trough, the hold of a passed burst is set aside too and its surplus is released after the start-up time; default pattern since the seventy-fifth round and in the twenty-seventh to twenty-ninth, keep in the thirtieth to seventy-fourth), `scalein=any|steady` (`steady`: a scale-in that is due, after the calm period, a release or a hold, waits while the in-flight requests grow, since the demand estimate lags a load that is returning; default any), `peakat=need|full|limit` (how `peak=S` sizes the peak it holds: `need`, at the target utilisation as the demand's own need is sized; `full`, at the capacity estimate itself, the fewest replicas that would carry that demand again; `limit`, at what one replica carries at most, the most requests per second per replica a saturated fleet completed, where that is above the estimate, and at the estimate until a fleet has been seen saturated; default limit since the fifty-ninth round, full from the thirtieth), `peakwhen=any|halved` (when `peak=S` holds: `any`, whenever its peak needs more than the demand's own need; `halved`, only once the demand has fallen below half that peak, as at a burst's end, and not through a gradual decline; default any), `peaks=any|dropped` (which peak `peak=S` holds: `any`, the highest minute of demand in its window; `dropped`, the highest minute the demand fell from to below half within ten minutes, as at a burst's or an on-phase's end, so a gradual decline, which the demand's own need follows down, holds no floor; default any), `breachwhile=queued|growing` (when a sustained breach lowers the capacity estimate: `queued`, while requests wait beyond one per ready replica or the in-flight requests do not shrink; `growing`, only while the in-flight requests do not shrink, since a queue that drains sits on the replicas that were ready when it arrived and the fleet's throughput per replica then says nothing about one replica's limit; default growing since the thirtieth round, queued before), `periods=F` (1.2 <= F <= 4: how many periods of history a repeating pattern must span before it is found; fewer finds it sooner from a shorter overlap, and at 1.5 found patterns the training scenarios do not have; default 2), `early=F` (1.2 <= F <= 4, or 0 for none: a pattern whose changes correlate at least 0.9 with themselves one period earlier, over at least 20 minutes of overlap, is found once the history spans F periods, when F is fewer than `periods`, since the patterns that repeat on the training set correlate 0.94-0.99 and those fewer periods read by chance 0.6-0.7; default 1.5 since the seventy-seventh round, 0 before), `levels=F` (0 <= F <= 1, or 0 for none: a pattern is found only if the demand one period earlier explains at least F of the demand's variation over the overlap, one less the squared error of reading each minute as one period ago over the squared spread about the overlap's mean, since a staircase whose steps come at a steady interval repeats in its changes and not in its levels; every pattern's decision shows its levels whatever F; default 0), `tail=p95|lighter` (`lighter`: where light load itself keeps fewer first tokens within the TTFT SLO than the test asks for plus 2 points, as with prompts whose own prefill is longer than the SLO, a TTFT tail counts as a breach against the capacity estimate only more than 2 points below light load's share, first tokens are comfortable at light load's share, and a P95 TTFT over the SLO above that bar is no guide trigger; default lighter since the twenty-sixth round, chosen with `hold=3`, which keeps the fleet through on-off-mooncake's troughs that the tail's trigger had held; p95 before, and alone a negative result in the twenty-fifth round), `probe=F` (0 <= F <= 0.1: how much the capacity estimate rises per decision while every P95 is within half its SLO and the fleet serves at least half the estimate per replica, since a fleet sized below its capacity never shows more throughput by itself; default 0.03, 0.003 before the twentieth round), `probecap=K` (1 <= K <= 4, or 0: the most `probe` raises the capacity estimate to, K times the most known to be served per replica: the prior, the highest throughput served within the SLO, or a saturated fleet's share; without it the probe reads a load served with room to spare at half a replica's capacity as twice that; default 1.5 since the thirty-seventh round, chosen with floors of one and two replicas; 0, no bound, before), `breachcap=off|probe|estimate` (what the throughput per replica of a sustained breach bounds until more than that is served within the SLO: `probe`, how far the probe raises the capacity estimate, since a load whose P95 flickers about its SLO breaches for less than a rate window at a time and reads comfortable between breaches; `estimate`, that and the estimate itself, which a breach below it lowers to the breach's throughput at once instead of a tenth of the way; default off), `saturated=F` (0 <= F <= 1: once requests have waited beyond one per ready replica for a whole rate window with the same ready replicas, every replica busy, the capacity estimate is at least F of the requests per second per replica the fleet completed, aborted ones (clients that gave up in the queue) left out; a fleet kept above its need, as under a floor of replicas for availability, otherwise never serves half the estimate per replica, so the probe leaves the estimate low; a breach at a lower throughput corrects it as it corrects any estimate; default 0.8 since the thirty-third round, chosen with floors of one and two replicas; 0, off, before), `served=finished|completed` (what the capacity estimate counts as served: `finished`, every finished request; `completed`, finished requests less those finished with reason `abort`, clients that gave up, often in a queue, whose aborts otherwise read as throughput; a saturated fleet's throughput counts completed requests either way, and the demand every finished request; default finished), `itltest=p95|mean|request` (what the capacity estimate tests against `itlSloSeconds`: `p95`, the inter-token gaps' P95; `mean`, their mean; `request`, the P95 over finished requests of each one's own time per output token (`vllm:request_time_per_output_token_seconds`, the gaps' P95 where the engine lacks it), the statistic of a request-level SLO; the guide's ITL trigger reads the gaps' P95 whatever this is; default p95), `backstopitl=p95|test` (what the guide's ITL trigger reads against `itlSloSeconds` under this policy: `p95`, the inter-token gaps' P95, as under `guide`; `test`, what `itltest` names, so the trigger and the capacity estimate agree on what is within the SLO; default p95), `saturation=window|queued` (when a queue says the fleet is saturated, for `saturated=F`: `window`, once requests have waited beyond one per ready replica for a whole rate window; `queued`, as soon as they do, the ready replicas unchanged over the window, whose rate then still holds the calm before the queue and reads low; default window), `untested=K` (1 <= K <= 20, or 0: while the capacity estimate has met no replica's limit, no prior, nothing inherited, no sustained breach and no saturated fleet, it rests on what lighter load served, a lower bound, and the need it sets (the demand's, the peak floor's and a repeating pattern's) is at most K times the ready replicas and at least one more than them; the burst that meets it tests it within a rate window, and the bound is gone from then on; the hindsight's fleet and the guide's backstop are not bounded; default 0, none), `breached=F` (0 <= F <= 1: once P95 TTFT or ITL has stayed over its SLO for a rate window with the same ready replicas while they completed more requests per replica than the capacity estimate (aborted ones, clients that gave up in a queue, left out), the estimate is at least F of that throughput: replicas whose latency breaks the SLO while they serve it are at their limit, as a saturated fleet's are, before any queue has lasted the window; without it a breach only lowers the estimate, so one learned from light load stays a lower bound through the burst that breaks it; default 0.8 since the fifty-ninth round, 0 (none) before), `breachedif=always|untested|above|light` (when `breached=F` raises the capacity estimate: `always`, at every sustained breach above it, and a breach before any estimate makes the first; `untested`, only at the breach that first tests an estimate no prior, inherited estimate, breach or saturated fleet has tested (or makes the first), so a light load's estimate learns from the burst that breaks it and later breaches, whose long requests can complete more per replica than one serves within the SLO, only lower it; `above`, at every sustained breach above an estimate that exists, so a breach before any estimate, as on a cold fleet's long prompts, makes none; `light`, only at the breach that first tests an estimate that exists, one light load set; default light since the fifty-ninth round, always before), `inherit=estimate|verified` (what a record inherited through `--learned-state-configmap`, from an earlier pod at start-up or a running peer with a longer history, starts the capacity estimate at: `estimate`, the estimate the other pod last held; `verified`, the lower of that and the most it knew to be served within the SLO, since on long-request loads the last estimate is wherever the probe and the last burst left it; default estimate), `floorat=named|estimate` (how many replicas the hindsight floor holds: `named`, the fleet its comparison named; `estimate`, at most that many, and no more than carry what that fleet carried at the capacity estimate it was named at (its replicas times that estimate) at the estimate now, so a floor named while the estimate was low, as under a floor of replicas that starves it, shrinks as the estimate rises; default named), `troughnow=any|below` (when a repeating pattern's trough sets the floors aside under `troughs=pattern`: `any`, whenever the pattern expects less than its mean, whatever the demand now; `below`, only while the demand now is also below that mean, since a burst under way where the pattern expects a trough says its phase no longer holds, as when a pattern inherited through `--learned-state-configmap` was learned on a day whose bursts came at other times; default below since the fifty-first round, any before), `hindsightat=estimate|limit|need` (what one replica carries in the hindsight's fluid model, and in the ceiling its fleet sets: `estimate`, the capacity estimate; `limit`, the most requests per second per replica a saturated fleet completed, where that is above the estimate, since the model asks which static fleet would have carried the demand and a replica carries up to its limit, of which the estimate is a share under `saturated=F`; `need`, the estimate at the target utilisation, as the demand's own need is sized, since a fleet at an estimate the P95 test set serves about 95 % of its requests within the SLO where the comparison names the fleet that serves 99 %; default estimate), `arrivals=rate|count|history` (what the demand's finished term reads, the demand being finished requests plus the in-flight growth over the rate window: `rate`, the fleet's finished requests per second, the sum of each pod's rate over its own span; `count`, the finished requests the fleet counted over the rate window divided by that window's span, the stretch the growth is taken over; `history`, the rate for the need now and the count for the demand history the peak floor, the repeating pattern and the hindsight read; since the sum of rates counts a replica that became ready seconds ago, draining a backlog, at that rate for the whole window and so reads the drain as arrivals; default rate), `ramp=recent|halves` (what caps the rising trend with `rise=S`: `recent`, the slope over the last S seconds; `halves`, the smaller of the slopes over their two halves, since a ramp rises in both while a burst's step, which the one-minute rate window turns into a minute's rise, rises in one and is flat in the other and would otherwise be carried over the start-up time for as long as it stays within the S seconds; default recent), `floorlapse=S` (seconds: once the last S seconds' demand has stayed within what `lapseif` asks, the hindsight floor is set aside until the demand needs it again, since the comparison looks back a day and names a fleet for a crowd until the crowd is a day old; 0, never; default 2400 since the sixty-second round, 0 before), `lapseif=fewer|peak` (what `floorlapse=S` asks of the last S seconds' demand: `fewer`, that it stayed within what one replica fewer than the floor's fleet carries; `peak`, that no minute of it reached half the highest minute of the history that named the fleet, so bursts that recur below one replica fewer's load keep their floor; default peak since the sixty-second round, fewer before), `lapsegap=F` (0 <= F <= 10: a floor lapses only once no minute reached half the peak of the history that named it for F times the longest stretch between two minutes that did, within the day the hindsight keeps, as well as for `floorlapse` seconds, so bursts that recur further apart than `floorlapse` keep their floor from the second on; 0, none; default 1.5 since the sixty-third round, 0 before), `lapsegapmax=S` (0 <= S <= 86400 seconds: the longest stretch between the floor's bursts `lapsegap` counts, since a longer one, such as the most of a day from yesterday's last crowd to today's first, says nothing about when the next burst comes; 0, any, the default), `missprice=P` (0 <= P <= 1000000 GPU-seconds per missed request: the hindsight floor is held until the replica-seconds it has held beyond what the demand's own need and the peak floor ask, since the demand last needed it, exceed P times the requests its comparison says the named fleet would have served beyond ours, then set aside until the demand needs it again, so a floor kept for a crowd that may return costs at most what that crowd's misses would cost at that price (a floor inherited from an earlier pod carries the count it was named with in the learned state; one from a record written before that count was kept is held as without it); 0, none, the default), `backstopstep=K` (a whole number 0 <= K <= 20: while the demand's need is within the target already asked for, one step of the guide's backstop adds at most K replicas, since the forecast has sized the fleet and a latency trigger then says it is near its limit, not that a burst arrived; a need above the target keeps the guide's step; 0, the guide's step, the default), `oursby=fluid|counted` (what the hindsight judges ours' share of the demand by: `fluid`, the default, its fluid model, which serves each minute's demand up to the ready replicas' capacity and carries nothing over, so it reads a burst's queue and the requests that time out in it as served; `counted`, the lower of that and what the engines counted, the demand less the requests finished aborted and the larger of the first tokens over `ttftSloSeconds` and the finished requests over `itlSloSeconds` per output token; the comparison's explanation gives the count either way), `confirm=S` (0 <= S <= 600 seconds: a step of one replica waits until the need has stayed above the target for S seconds, so a need that crosses a whole replica and falls back within them, the demand's noise about the boundary, asks for nothing, where otherwise the replica is asked for and withdrawn while it still starts; a step of two or more, a burst's, and the guide's backstop are not delayed; default 0, none), `breachload=F` (0 <= F <= 1: a sustained breach lowers the capacity estimate only while the fleet serves at least F of the estimate per replica, since a breach on replicas far below the load the estimate says they carry, such as a thin latency window's few slow first tokens on long prompts between bursts, is not their limit and more replicas would not remove it, and a fleet the estimate sizes too small serves more per replica until it reaches F; default 0, at any load), `period=best|fundamental|divisor` (which lag is a repeating pattern's period: `best`, the lag at which the demand's changes correlate best with themselves one lag earlier; `fundamental`, the shortest lag that correlates within 0.05 of that and passes the half-period test itself, since a pattern repeats at every multiple of its period, and once the history spans two of a multiple, the multiple can correlate a few thousandths better by noise while its half, the period, correlates as well, which the half-period test, there to tell a smooth curve, reads as no pattern at all; `divisor`, as `fundamental` among the best lag and the lags it is two or more times, within a minute, since a shorter lag that merely comes within 0.05 of the best can be noise in a curve that does not repeat; default divisor since the seventy-fourth round, fundamental in the seventy-third, best before)",
        read: |d, v| {
            d.policy.proactive = crate::policy::proactive::parse_policy(v)?;
            Ok(())
        },
    },
    MetadataKey {
        key: "dcgmEndpoints",
        default: "unset",
        meaning: "comma-separated DCGM exporter URLs or `host:port` entries (GPU memory joins the calm check)",
        read: |d, v| {
            d.targets.dcgm_endpoints = Some(targets::endpoints(v)?);
            Ok(())
        },
    },
    MetadataKey {
        key: "dcgmService",
        default: "unset",
        meaning: "DNS name of the DCGM exporter's headless Service (`name` or `name:port`, port 9400)",
        read: |d, v| {
            d.targets.dcgm_service = Some(targets::service(v)?);
            Ok(())
        },
    },
];

/// KEDA's own keys: accepted and ignored.
pub const IGNORED_KEYS: &[&str] = &["scalerAddress", "enableTLS", "unsafeSsl"];

/// The first unknown key (alphabetically), with the closest known key when one is near.
pub(super) fn check_unknown(metadata: &HashMap<String, String>) -> Result<(), ConfigError> {
    let mut unknown: Vec<&str> = metadata
        .keys()
        .map(String::as_str)
        .filter(|k| !KEYS.iter().any(|d| d.key == *k) && !IGNORED_KEYS.contains(k))
        .collect();
    unknown.sort_unstable();
    let Some(key) = unknown.first() else {
        return Ok(());
    };
    let message = match closest(key) {
        Some(known) => format!("unknown key; did you mean \"{known}\"?"),
        None => {
            let all: Vec<&str> = KEYS.iter().map(|d| d.key).collect();
            format!("unknown key; known keys are {}", all.join(", "))
        }
    };
    Err(ConfigError::new(key, message))
}

/// The known key nearest to `key` (case-insensitive edit distance), if near enough: at most
/// a third of the key's length, and at least 2 edits allowed; or the known key that `key`
/// begins (`latencySlo` -> `latencySloSeconds`).
fn closest(key: &str) -> Option<&'static str> {
    let lower = key.to_lowercase();
    let known = KEYS
        .iter()
        .map(|d| d.key)
        .chain(IGNORED_KEYS.iter().copied());
    if lower.len() >= 4 {
        if let Some(k) = known.clone().find(|k| k.to_lowercase().starts_with(&lower)) {
            return Some(k);
        }
    }
    let limit = (key.chars().count() / 3).max(2);
    known
        .map(|k| (edit_distance(&lower, &k.to_lowercase()), k))
        .filter(|&(d, _)| d <= limit)
        .min_by_key(|&(d, _)| d)
        .map(|(_, k)| k)
}

/// Levenshtein distance over chars.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    let mut cur = vec![0; b.len() + 1];
    for (i, ca) in a.chars().enumerate() {
        cur[0] = i + 1;
        for (j, &cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur[j + 1] = sub.min(prev[j + 1] + 1).min(cur[j] + 1);
        }
        std::mem::swap(&mut prev, &mut cur);
    }
    prev[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distances() {
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
        // Deletions at the start go through the first column.
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("xab", "ab"), 1);
    }

    #[test]
    fn suggestions() {
        assert_eq!(
            closest("queueDepthPerReplcia"),
            Some("queueDepthPerReplica")
        );
        assert_eq!(closest("MinReplicas"), Some("minReplicas"));
        assert_eq!(closest("minReplicaCount"), Some("minReplicas"));
        assert_eq!(closest("scaleraddress"), Some("scalerAddress"));
        assert_eq!(closest("completelyDifferent"), None);
    }
}
