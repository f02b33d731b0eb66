//! The source guide's Prometheus + KEDA chain, modelled: Prometheus scrapes each replica at its
//! interval, and each query KEDA sends is evaluated the way PromQL does (latest sample for an
//! instant selector, `rate` with its extrapolation, `histogram_quantile` over summed buckets, the same function the signals use).
//!
//! Owns: the stored samples and the two queries of the guide's ScaledObject
//! (`sum(vllm:num_requests_waiting)` and
//! `histogram_quantile(0.95, sum(rate(vllm:e2e_request_latency_seconds_bucket[1m])) by (le))`).
//! Does not own: the HPA ([`crate::keda::hpa`]) or the replicas.

use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use vllm_keda_core::signals::{Bucket, histogram_quantile};

/// What Prometheus stores from one scrape of one replica.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ReplicaSample {
    /// `vllm:num_requests_waiting`.
    pub waiting: f64,
    /// `vllm:num_requests_running`.
    pub running: f64,
    /// `vllm:e2e_request_latency_seconds_bucket` as (le, cumulative count), sorted by le,
    /// ending with +Inf.
    pub e2e_buckets: Vec<(f64, f64)>,
    /// `vllm:time_to_first_token_seconds_bucket`, as `e2e_buckets` (empty when not scraped).
    pub ttft_buckets: Vec<(f64, f64)>,
    /// `vllm:inter_token_latency_seconds_bucket`, as `e2e_buckets` (empty when not scraped).
    pub itl_buckets: Vec<(f64, f64)>,
}

/// Which stored histogram a quantile query reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HistogramSeries {
    /// End-to-end latency.
    E2e,
    /// Time to first token.
    Ttft,
    /// Inter-token latency.
    Itl,
}

impl ReplicaSample {
    fn buckets(&self, which: HistogramSeries) -> &[(f64, f64)] {
        match which {
            HistogramSeries::E2e => &self.e2e_buckets,
            HistogramSeries::Ttft => &self.ttft_buckets,
            HistogramSeries::Itl => &self.itl_buckets,
        }
    }
}

#[derive(Debug, Clone, Default)]
struct Series {
    samples: VecDeque<(Duration, ReplicaSample)>,
}

/// Prometheus's staleness: an instant selector sees a series' latest sample up to 5 m old.
const LOOKBACK: Duration = Duration::from_secs(300);

/// Stored samples per replica, pruned to what the queries can still see.
#[derive(Debug, Clone, Default)]
pub struct PrometheusStore {
    series: BTreeMap<u64, Series>,
}

impl PrometheusStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores one scrape of replica `replica` at `now`.
    pub fn ingest(&mut self, now: Duration, replica: u64, sample: ReplicaSample) {
        let series = self.series.entry(replica).or_default();
        series.samples.push_back((now, sample));
        while series
            .samples
            .front()
            .is_some_and(|(t, _)| now.saturating_sub(*t) > LOOKBACK)
        {
            series.samples.pop_front();
        }
    }

    /// Marks a replica's series stale: Prometheus writes staleness markers when a target
    /// leaves service discovery, so its samples stop counting at once.
    pub fn mark_gone(&mut self, replica: u64) {
        self.series.remove(&replica);
    }

    /// `sum(vllm:num_requests_waiting)` at `now`; 0 when no series (KEDA's
    /// `ignoreNullValues` default).
    pub fn sum_waiting(&self, now: Duration) -> f64 {
        self.sum_latest(now, |s| s.waiting)
    }

    /// `sum(vllm:num_requests_running + vllm:num_requests_waiting)` at `now`.
    pub fn sum_in_flight(&self, now: Duration) -> f64 {
        self.sum_latest(now, |s| s.running + s.waiting)
    }

    /// Series that have a sample an instant selector sees at `now`.
    pub fn live_series(&self, now: Duration) -> usize {
        self.series
            .values()
            .filter(|s| {
                s.samples
                    .iter()
                    .rev()
                    .any(|(t, _)| *t <= now && now.saturating_sub(*t) <= LOOKBACK)
            })
            .count()
    }

    fn sum_latest(&self, now: Duration, value: impl Fn(&ReplicaSample) -> f64) -> f64 {
        self.series
            .values()
            .filter_map(|s| {
                s.samples
                    .iter()
                    .rev()
                    .find(|(t, _)| *t <= now && now.saturating_sub(*t) <= LOOKBACK)
            })
            .map(|(_, sample)| value(sample))
            .sum()
    }

    /// `histogram_quantile(q, sum(rate(vllm:e2e_request_latency_seconds_bucket[range])) by (le))`
    /// at `now`; `None` where PromQL returns no value or NaN.
    pub fn e2e_quantile(&self, now: Duration, range: Duration, q: f64) -> Option<f64> {
        self.quantile(HistogramSeries::E2e, now, range, q)
    }

    /// `histogram_quantile(q, sum(rate(<which>_bucket[range])) by (le))` at `now`.
    pub fn quantile(
        &self,
        which: HistogramSeries,
        now: Duration,
        range: Duration,
        q: f64,
    ) -> Option<f64> {
        let mut summed: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        for series in self.series.values() {
            let window: Vec<&(Duration, ReplicaSample)> = series
                .samples
                .iter()
                .filter(|(t, _)| *t <= now && now.saturating_sub(*t) < range)
                .collect();
            if window.len() < 2 {
                continue;
            }
            let first = window[0].1.buckets(which);
            let last = window[window.len() - 1].1.buckets(which);
            if first.len() != last.len() {
                continue;
            }
            for (i, &(le, _)) in last.iter().enumerate() {
                let points: Vec<(Duration, f64)> = window
                    .iter()
                    .map(|(t, s)| (*t, s.buckets(which).get(i).map_or(0.0, |b| b.1)))
                    .collect();
                if let Some(rate) = extrapolated_rate(&points, now, range) {
                    summed.entry(le.to_bits()).or_insert((le, 0.0)).1 += rate;
                }
            }
        }
        let buckets: Vec<Bucket> = summed
            .into_values()
            .map(|(le, count)| Bucket { le, count })
            .collect();
        histogram_quantile(q, &buckets)
    }
}

/// PromQL's `rate(v[range])` at `now` for one counter series: the counter increase (corrected
/// for resets) extrapolated to the range edges as Prometheus does, per second.
pub fn extrapolated_rate(
    points: &[(Duration, f64)],
    now: Duration,
    range: Duration,
) -> Option<f64> {
    if points.len() < 2 {
        return None;
    }
    let (t_first, v_first) = points[0];
    let (t_last, v_last) = points[points.len() - 1];
    let mut delta = v_last - v_first;
    let mut previous = v_first;
    for &(_, v) in &points[1..] {
        if v < previous {
            delta += previous;
        }
        previous = v;
    }
    let range_start = now.as_secs_f64() - range.as_secs_f64();
    let range_end = now.as_secs_f64();
    let sampled = t_last.as_secs_f64() - t_first.as_secs_f64();
    if sampled <= 0.0 {
        return None;
    }
    let average_step = sampled / (points.len() - 1) as f64;
    let mut to_start = t_first.as_secs_f64() - range_start;
    let to_end = range_end - t_last.as_secs_f64();
    if delta > 0.0 && v_first >= 0.0 {
        let to_zero = sampled * (v_first / delta);
        if to_zero < to_start {
            to_start = to_zero;
        }
    }
    let threshold = average_step * 1.1;
    let mut extrapolate_to = sampled;
    extrapolate_to += if to_start < threshold {
        to_start
    } else {
        average_step / 2.0
    };
    extrapolate_to += if to_end < threshold {
        to_end
    } else {
        average_step / 2.0
    };
    Some(delta * (extrapolate_to / sampled) / range.as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secs(s: f64) -> Duration {
        Duration::from_secs_f64(s)
    }

    #[test]
    fn rate_extrapolates_like_prometheus() {
        // Samples every 15 s at 5, 20, 35, 50 s of a 60 s range ending at 60 s, +15 each.
        let points = [
            (secs(5.0), 100.0),
            (secs(20.0), 115.0),
            (secs(35.0), 130.0),
            (secs(50.0), 145.0),
        ];
        let rate = extrapolated_rate(&points, secs(60.0), secs(60.0)).unwrap();
        // sampled 45 s, to_start 5 (< 16.5, extrapolate), to_end 10 (< 16.5): 45 x 60/45 / 60.
        assert!((rate - 1.0).abs() < 1e-12, "{rate}");
        // A reset: 145 -> 10 counts as +10.
        let reset = [(secs(5.0), 100.0), (secs(20.0), 145.0), (secs(35.0), 10.0)];
        let r = extrapolated_rate(&reset, secs(40.0), secs(60.0)).unwrap();
        assert!(r > 0.0);
        assert_eq!(
            extrapolated_rate(&points[..1], secs(60.0), secs(60.0)),
            None
        );
    }

    #[test]
    fn store_sums_latest_waiting_and_forgets_gone_replicas() {
        let mut store = PrometheusStore::new();
        let sample = |waiting| ReplicaSample {
            waiting,
            e2e_buckets: vec![(1.0, 0.0), (f64::INFINITY, 0.0)],
            ..ReplicaSample::default()
        };
        store.ingest(secs(0.0), 1, sample(3.0));
        store.ingest(secs(0.0), 2, sample(4.0));
        store.ingest(secs(15.0), 1, sample(10.0));
        assert_eq!(store.sum_waiting(secs(20.0)), 14.0);
        store.mark_gone(2);
        assert_eq!(store.sum_waiting(secs(20.0)), 10.0);
        assert_eq!(store.sum_waiting(secs(400.0)), 0.0, "stale after 5 m");
    }

    #[test]
    fn e2e_quantile_over_summed_rates() {
        let mut store = PrometheusStore::new();
        for (i, t) in [0.0, 15.0, 30.0, 45.0].iter().enumerate() {
            let n = i as f64;
            // Every 15 s: 10 requests under 1 s and 10 between 5 and 10 s.
            store.ingest(
                secs(*t),
                7,
                ReplicaSample {
                    waiting: 0.0,
                    e2e_buckets: vec![
                        (1.0, 10.0 * n),
                        (5.0, 10.0 * n),
                        (10.0, 20.0 * n),
                        (f64::INFINITY, 20.0 * n),
                    ],
                    ..ReplicaSample::default()
                },
            );
        }
        let p95 = store.e2e_quantile(secs(50.0), secs(60.0), 0.95).unwrap();
        assert!((p95 - 9.5).abs() < 1e-9, "{p95}");
        let p50 = store.e2e_quantile(secs(50.0), secs(60.0), 0.5).unwrap();
        assert!((p50 - 1.0).abs() < 1e-9, "{p50}");
    }
}
