//! Classic (bucketed) Prometheus histograms as owned cumulative buckets, their deltas, and
//! PromQL's `histogram_quantile`.
//!
//! Owns: the bucket arithmetic (summing children, deltas between scrapes, merging pods with
//! possibly different layouts) and the quantile estimate. Does not own: which series feed a
//! histogram (see `snapshot`) or which scrapes are compared (see `window`).

use serde::Serialize;

use super::Quantiles;

/// One cumulative bucket: observations `<= le`.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Bucket {
    /// Upper bound, parsed from the `le` label (`+Inf` for the last bucket).
    pub le: f64,
    /// Cumulative count of observations `<= le` (a float: deltas and sums stay exact up to 2^53).
    pub count: f64,
}

/// One histogram of one pod (summed over `engine`), owned.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// Cumulative buckets, sorted by `le` ascending once [`Histogram::finish`] ran.
    pub buckets: Vec<Bucket>,
    /// Sum of observations (`_sum`).
    pub sum: f64,
    /// Number of observations (`_count`).
    pub count: f64,
}

impl Histogram {
    /// Adds `count` to the bucket `le`, creating it if needed (children of the same family,
    /// e.g. one per `engine`, are summed per `le`). Buckets stay sorted by `le`: a binary
    /// search, never a scan per bound.
    pub fn add_bucket(&mut self, le: f64, count: f64) {
        let at = self
            .buckets
            .partition_point(|b| b.le.total_cmp(&le).is_lt());
        match self.buckets.get_mut(at) {
            Some(bucket) if bucket.le == le => bucket.count += count,
            _ => self.buckets.insert(at, Bucket { le, count }),
        }
    }

    /// Sorts the buckets by `le` and sums buckets with the same `le` (in their order); call
    /// once after filling [`Histogram::buckets`] directly. O(b log b).
    pub fn finish(&mut self) {
        if !self
            .buckets
            .is_sorted_by(|a, b| a.le.total_cmp(&b.le).is_le())
        {
            // Stable: equal bounds keep their order, so sums add up as they came.
            self.buckets.sort_by(|a, b| a.le.total_cmp(&b.le));
        }
        self.buckets.dedup_by(|later, kept| {
            if later.le == kept.le {
                kept.count += later.count;
                true
            } else {
                false
            }
        });
    }

    /// Whether both histograms have the same set of `le` bounds.
    pub fn same_layout(&self, other: &Histogram) -> bool {
        self.buckets.len() == other.buckets.len()
            && self
                .buckets
                .iter()
                .zip(&other.buckets)
                .all(|(a, b)| a.le == b.le)
    }

    /// Whether any bucket or the count went down from `earlier` to `self` (a counter reset).
    pub fn decreased_from(&self, earlier: &Histogram) -> bool {
        self.count < earlier.count
            || self
                .buckets
                .iter()
                .zip(&earlier.buckets)
                .any(|(now, then)| now.count < then.count)
    }

    /// The observations between `earlier` and `self`: per-`le` bucket deltas, sum and count.
    /// `None` when the layouts differ or any bucket went down (a restart): never negative.
    pub fn delta_since(&self, earlier: &Histogram) -> Option<Histogram> {
        if !self.same_layout(earlier) || self.decreased_from(earlier) {
            return None;
        }
        Some(Histogram {
            buckets: self
                .buckets
                .iter()
                .zip(&earlier.buckets)
                .map(|(now, then)| Bucket {
                    le: now.le,
                    count: now.count - then.count,
                })
                .collect(),
            sum: self.sum - earlier.sum,
            count: self.count - earlier.count,
        })
    }

    /// The largest finite `le`, if any (quantiles above it read as this bound).
    pub fn top_finite_bound(&self) -> Option<f64> {
        self.buckets
            .iter()
            .rev()
            .map(|b| b.le)
            .find(|le| le.is_finite())
    }

    /// P50/P95/P99 of these buckets with [`histogram_quantile`] semantics.
    pub fn quantiles(&self) -> Quantiles {
        quantiles_of(&self.buckets)
    }
}

/// A histogram as a pod's scrape history keeps it: the `le` bounds, shared (one allocation)
/// by the pod's consecutive samples while the layout does not change, and per sample only the
/// cumulative counts, `_sum` and `_count`. Holds exactly what [`Histogram`] holds; compared and
/// subtracted the same way.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct KeptHistogram {
    bounds: std::sync::Arc<[f64]>,
    counts: Box<[f64]>,
    sum: f64,
    count: f64,
}

impl KeptHistogram {
    /// Keeps `histogram`, sharing `previous`'s bounds when the layout is the same.
    pub(super) fn keep(histogram: Histogram, previous: Option<&KeptHistogram>) -> Self {
        let bounds = match previous {
            Some(previous) if previous.same_layout_as(&histogram) => {
                std::sync::Arc::clone(&previous.bounds)
            }
            _ => histogram.buckets.iter().map(|b| b.le).collect(),
        };
        KeptHistogram {
            bounds,
            counts: histogram.buckets.iter().map(|b| b.count).collect(),
            sum: histogram.sum,
            count: histogram.count,
        }
    }

    /// Whether `histogram` has this one's set of `le` bounds ([`Histogram::same_layout`]).
    pub(super) fn same_layout_as(&self, histogram: &Histogram) -> bool {
        self.bounds.len() == histogram.buckets.len()
            && self
                .bounds
                .iter()
                .zip(&histogram.buckets)
                .all(|(le, b)| *le == b.le)
    }

    /// Whether any bucket or the count of `histogram` is below this one's
    /// ([`Histogram::decreased_from`]).
    pub(super) fn decreased_to(&self, histogram: &Histogram) -> bool {
        histogram.count < self.count
            || histogram
                .buckets
                .iter()
                .zip(self.counts.iter())
                .any(|(now, then)| now.count < *then)
    }

    fn same_layout(&self, other: &KeptHistogram) -> bool {
        std::sync::Arc::ptr_eq(&self.bounds, &other.bounds)
            || (self.bounds.len() == other.bounds.len()
                && self
                    .bounds
                    .iter()
                    .zip(other.bounds.iter())
                    .all(|(a, b)| a == b))
    }

    /// [`Histogram::delta_since`] of the two histograms these were kept from.
    pub(super) fn delta_since(&self, earlier: &KeptHistogram) -> Option<Histogram> {
        if !self.same_layout(earlier)
            || self.count < earlier.count
            || self
                .counts
                .iter()
                .zip(earlier.counts.iter())
                .any(|(now, then)| now < then)
        {
            return None;
        }
        Some(Histogram {
            buckets: self
                .bounds
                .iter()
                .zip(self.counts.iter().zip(earlier.counts.iter()))
                .map(|(le, (now, then))| Bucket {
                    le: *le,
                    count: now - then,
                })
                .collect(),
            sum: self.sum - earlier.sum,
            count: self.count - earlier.count,
        })
    }

    /// Whether both share one allocation of bounds (for tests).
    #[cfg(test)]
    pub(super) fn shares_bounds_with(&self, other: &KeptHistogram) -> bool {
        std::sync::Arc::ptr_eq(&self.bounds, &other.bounds)
    }
}

/// Adds `from` into `into` per `le`, like PromQL's `sum by (le)`: bounds present in only one
/// side are kept (the result may be non-monotonic when layouts differ; the quantile fixes it
/// like PromQL does). Both inputs sorted by `le`; the result stays sorted.
pub fn merge_buckets(into: &mut Vec<Bucket>, from: &[Bucket]) {
    let same = into.len() == from.len() && into.iter().zip(from).all(|(a, b)| a.le == b.le);
    if same {
        for (a, b) in into.iter_mut().zip(from) {
            a.count += b.count;
        }
        return;
    }
    if into.is_empty() {
        into.extend_from_slice(from);
        return;
    }
    let mut merged = Vec::with_capacity(into.len() + from.len());
    let (mut i, mut j) = (0, 0);
    while i < into.len() || j < from.len() {
        match (into.get(i), from.get(j)) {
            (Some(a), Some(b)) if a.le == b.le => {
                merged.push(Bucket {
                    le: a.le,
                    count: a.count + b.count,
                });
                i += 1;
                j += 1;
            }
            (Some(a), Some(b)) if a.le.total_cmp(&b.le).is_lt() => {
                merged.push(*a);
                i += 1;
            }
            (Some(_), Some(b)) | (None, Some(b)) => {
                merged.push(*b);
                j += 1;
            }
            (Some(a), None) => {
                merged.push(*a);
                i += 1;
            }
            (None, None) => break,
        }
    }
    *into = merged;
}

/// Relative tolerance under which PromQL treats neighbouring bucket counts as equal.
const SMALL_DELTA_TOLERANCE: f64 = 1e-12;

/// PromQL `histogram_quantile(q, ...)` over classic buckets (any order, duplicates summed).
///
/// Same rules as Prometheus: the highest bucket must be `+Inf`; buckets are made monotonic
/// (a lower cumulative count than a previous bucket is raised to it; differences below 1e-12
/// relative are treated as float noise); the rank `q * total` falls in the first bucket whose
/// cumulative count reaches it and is interpolated linearly inside it; the first bucket's lower
/// bound is 0 when its upper bound is positive; a rank in the `+Inf` bucket returns the highest
/// finite bound. Where PromQL returns NaN (no `+Inf` bucket, fewer than two buckets, no
/// observations, `q` outside `[0, 1]` or NaN) this returns `None`: undefined, never a number.
pub fn histogram_quantile(q: f64, buckets: &[Bucket]) -> Option<f64> {
    let prepared = prepare(buckets)?;
    quantile_prepared(q, &prepared)
}

/// P50/P95/P99 of `buckets` (see [`histogram_quantile`]).
pub fn quantiles_of(buckets: &[Bucket]) -> Quantiles {
    match prepare(buckets) {
        Some(prepared) => Quantiles {
            p50: quantile_prepared(0.5, &prepared),
            p95: quantile_prepared(0.95, &prepared),
            p99: quantile_prepared(0.99, &prepared),
        },
        None => Quantiles::default(),
    }
}

/// The share (0..1) of the observations in `buckets` at or below `x`: the inverse of
/// [`histogram_quantile`] on the same linear interpolation inside a bucket, so
/// `histogram_quantile(q) <= x` exactly when the share at `x` is at least `q` (where the
/// cumulative counts rise). Above the highest finite bound the share is that bound's count
/// over all observations (what the `+Inf` bucket holds is above every bound). `None` where
/// [`histogram_quantile`] is undefined (no observations, no `+Inf` bucket) or `x` is NaN.
pub fn histogram_share_at_most(x: f64, buckets: &[Bucket]) -> Option<f64> {
    if x.is_nan() {
        return None;
    }
    let b = prepare(buckets)?;
    let n = b.len();
    let observations = b[n - 1].count;
    // The first finite bucket whose upper bound reaches `x`.
    let i = b[..n - 1].partition_point(|bucket| bucket.le < x);
    let below = if i == n - 1 {
        b[n - 2].count
    } else if i == 0 {
        // The first bucket starts at 0 when its bound is positive, as in `histogram_quantile`;
        // a bound at or below 0 holds everything at it (here `x` is at most the bound).
        let end = b[0].le;
        if end > 0.0 {
            b[0].count * (x.max(0.0) / end)
        } else if x == end {
            b[0].count
        } else {
            0.0
        }
    } else {
        let (start, end) = (b[i - 1].le, b[i].le);
        b[i - 1].count + (b[i].count - b[i - 1].count) * ((x - start) / (end - start))
    };
    Some((below / observations).clamp(0.0, 1.0))
}

/// How many observations cumulative `buckets` hold (the `+Inf` bucket's count); `None` when
/// they are not a histogram with at least one observation.
pub fn histogram_observations(buckets: &[Bucket]) -> Option<f64> {
    let b = prepare(buckets)?;
    b.last().map(|last| last.count)
}

/// Sorted, coalesced, monotonic buckets ending in `+Inf` with at least one observation.
/// Borrowed when the input already is (the usual case: one layout, cumulative deltas).
fn prepare(buckets: &[Bucket]) -> Option<std::borrow::Cow<'_, [Bucket]>> {
    let clean = buckets.len() >= 2
        && buckets.last().is_some_and(|b| b.le == f64::INFINITY)
        && buckets
            .windows(2)
            .all(|w| w[0].le < w[1].le && w[0].count <= w[1].count);
    if clean {
        let observations = buckets[buckets.len() - 1].count;
        if observations.is_nan() || observations <= 0.0 {
            return None;
        }
        // Equal neighbours need no fix; strictly increasing ones may still sit within PromQL's
        // float-noise tolerance, which the general path handles.
        let noise = buckets.windows(2).any(|w| {
            w[0].count != w[1].count && almost_equal(w[0].count, w[1].count, SMALL_DELTA_TOLERANCE)
        });
        if !noise {
            return Some(std::borrow::Cow::Borrowed(buckets));
        }
    }
    prepare_owned(buckets).map(std::borrow::Cow::Owned)
}

fn prepare_owned(buckets: &[Bucket]) -> Option<Vec<Bucket>> {
    let mut sorted: Vec<Bucket> = buckets.iter().filter(|b| !b.le.is_nan()).copied().collect();
    if !is_sorted_by_le(&sorted) {
        sorted.sort_by(|a, b| a.le.total_cmp(&b.le));
    }
    let last = sorted.last()?;
    if last.le != f64::INFINITY {
        return None;
    }
    let mut coalesced: Vec<Bucket> = Vec::with_capacity(sorted.len());
    for bucket in sorted {
        match coalesced.last_mut() {
            Some(prev) if prev.le == bucket.le => prev.count += bucket.count,
            _ => coalesced.push(bucket),
        }
    }
    ensure_monotonic(&mut coalesced);
    if coalesced.len() < 2 {
        return None;
    }
    let observations = coalesced[coalesced.len() - 1].count;
    if observations.is_nan() || observations <= 0.0 {
        return None;
    }
    Some(coalesced)
}

fn is_sorted_by_le(buckets: &[Bucket]) -> bool {
    buckets.windows(2).all(|w| w[0].le <= w[1].le)
}

/// PromQL's monotonicity fix: decreases are removed, float noise is ignored.
fn ensure_monotonic(buckets: &mut [Bucket]) {
    let Some(first) = buckets.first() else {
        return;
    };
    let mut prev = first.count;
    for bucket in buckets.iter_mut().skip(1) {
        let curr = bucket.count;
        if curr == prev {
            continue;
        }
        if almost_equal(prev, curr, SMALL_DELTA_TOLERANCE) || curr < prev {
            bucket.count = prev;
            continue;
        }
        prev = curr;
    }
}

/// Relative float comparison as Prometheus's `almost.Equal` does it.
fn almost_equal(a: f64, b: f64, epsilon: f64) -> bool {
    if a == b {
        return true;
    }
    let abs_sum = a.abs() + b.abs();
    let diff = (a - b).abs();
    if a == 0.0 || b == 0.0 || abs_sum < f64::MIN_POSITIVE {
        return diff < epsilon * f64::MIN_POSITIVE;
    }
    diff / abs_sum.min(f64::MAX) < epsilon
}

fn quantile_prepared(q: f64, buckets: &[Bucket]) -> Option<f64> {
    if !(0.0..=1.0).contains(&q) {
        return None;
    }
    let n = buckets.len();
    let observations = buckets[n - 1].count;
    let rank = q * observations;
    // First bucket (among all but +Inf) whose cumulative count reaches the rank.
    let b = buckets[..n - 1].partition_point(|bucket| bucket.count < rank);
    if b == n - 1 {
        return Some(buckets[n - 2].le);
    }
    if b == 0 && buckets[0].le <= 0.0 {
        return Some(buckets[0].le);
    }
    let bucket_end = buckets[b].le;
    let (bucket_start, count, rank) = if b > 0 {
        (
            buckets[b - 1].le,
            buckets[b].count - buckets[b - 1].count,
            rank - buckets[b - 1].count,
        )
    } else {
        (0.0, buckets[0].count, rank)
    };
    Some(bucket_start + (bucket_end - bucket_start) * (rank / count))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buckets(pairs: &[(f64, f64)]) -> Vec<Bucket> {
        pairs
            .iter()
            .map(|&(le, count)| Bucket { le, count })
            .collect()
    }

    const INF: f64 = f64::INFINITY;

    #[test]
    fn the_share_at_a_bound_is_the_inverse_of_the_quantile() {
        // 100 observations: 10 up to 0.5 s, 60 up to 1 s, 90 up to 2.5 s, 100 in +Inf.
        let h = buckets(&[(0.5, 10.0), (1.0, 60.0), (2.5, 90.0), (INF, 100.0)]);
        let share = |x| histogram_share_at_most(x, &h).unwrap();
        assert!((share(0.25) - 0.05).abs() < 1e-12, "first bucket from 0");
        assert!((share(1.0) - 0.60).abs() < 1e-12);
        assert!((share(2.0) - (0.60 + 0.30 * (1.0 / 1.5))).abs() < 1e-12);
        assert!((share(2.5) - 0.90).abs() < 1e-12);
        assert!(
            (share(1000.0) - 0.90).abs() < 1e-12,
            "+Inf holds what is above"
        );
        assert_eq!(share(-1.0), 0.0);
        // P95 at or below x exactly when at least 95 % are at or below x.
        for q in [0.05, 0.3, 0.6, 0.75, 0.85, 0.95, 0.99] {
            let at = histogram_quantile(q, &h).unwrap();
            let s = share(at);
            if at < 2.5 {
                assert!((s - q).abs() < 1e-9, "q {q}: quantile {at}, share {s}");
            }
            assert!(share(at * 1.001) >= q - 1e-9 || at >= 2.5);
            assert!(share(at * 0.999) < q);
        }
        assert_eq!(
            histogram_share_at_most(1.0, &buckets(&[(1.0, 0.0), (INF, 0.0)])),
            None
        );
        assert_eq!(histogram_share_at_most(f64::NAN, &h), None);
        assert_eq!(histogram_share_at_most(1.0, &buckets(&[(1.0, 3.0)])), None);
    }

    #[test]
    fn interpolates_linearly_inside_the_bucket() {
        let b = buckets(&[(1.0, 10.0), (2.0, 30.0), (4.0, 40.0), (INF, 40.0)]);
        // rank 20 -> bucket (1, 2], 10 of 20 into it -> 1.5
        assert_eq!(histogram_quantile(0.5, &b), Some(1.5));
        // rank 38 -> bucket (2, 4], 8 of 10 -> 3.6
        assert!((histogram_quantile(0.95, &b).unwrap() - 3.6).abs() < 1e-12);
    }

    #[test]
    fn first_bucket_starts_at_zero_when_positive() {
        let b = buckets(&[(2.0, 10.0), (INF, 10.0)]);
        assert_eq!(histogram_quantile(0.5, &b), Some(1.0));
    }

    #[test]
    fn first_bucket_non_positive_returns_its_bound() {
        let b = buckets(&[(-1.0, 10.0), (1.0, 20.0), (INF, 20.0)]);
        assert_eq!(histogram_quantile(0.25, &b), Some(-1.0));
        let b = buckets(&[(0.0, 10.0), (1.0, 20.0), (INF, 20.0)]);
        assert_eq!(histogram_quantile(0.25, &b), Some(0.0));
    }

    #[test]
    fn rank_in_inf_bucket_returns_highest_finite_bound() {
        // V0's TTFT tops at 10 s: everything slower reads as "at least 10".
        let b = buckets(&[(5.0, 1.0), (10.0, 2.0), (INF, 100.0)]);
        assert_eq!(histogram_quantile(0.99, &b), Some(10.0));
    }

    #[test]
    fn rank_in_inf_bucket_reads_the_highest_finite_bound_whatever_the_bucket_count() {
        let b = buckets(&[(1.0, 1.0), (INF, 10.0)]);
        assert_eq!(histogram_quantile(0.99, &b), Some(1.0));
        let b = buckets(&[(1.0, 1.0), (2.0, 1.0), (3.0, 1.0), (4.0, 1.0), (INF, 10.0)]);
        assert_eq!(histogram_quantile(0.99, &b), Some(4.0));
    }

    #[test]
    fn no_observations_is_undefined_not_zero() {
        let b = buckets(&[(1.0, 0.0), (2.0, 0.0), (INF, 0.0)]);
        assert_eq!(histogram_quantile(0.5, &b), None);
        assert_eq!(quantiles_of(&b), Quantiles::default());
    }

    #[test]
    fn missing_inf_or_single_bucket_or_bad_q_is_undefined() {
        assert_eq!(histogram_quantile(0.5, &buckets(&[(1.0, 3.0)])), None);
        assert_eq!(histogram_quantile(0.5, &buckets(&[(INF, 3.0)])), None);
        assert_eq!(histogram_quantile(0.5, &[]), None);
        let b = buckets(&[(1.0, 3.0), (INF, 3.0)]);
        assert_eq!(histogram_quantile(f64::NAN, &b), None);
        assert_eq!(histogram_quantile(1.5, &b), None);
        assert_eq!(histogram_quantile(-0.1, &b), None);
    }

    #[test]
    fn unsorted_duplicate_and_non_monotonic_input_like_promql() {
        // Unsorted with a duplicate `le` (two pods): coalesced by summing.
        let b = buckets(&[(INF, 10.0), (1.0, 2.0), (2.0, 10.0), (1.0, 3.0)]);
        // rank 5 -> bucket (0,1] holds 5 -> 1.0
        assert_eq!(histogram_quantile(0.5, &b), Some(1.0));
        // Non-monotonic: the dip at le=2 is raised to 8.
        let b = buckets(&[(1.0, 8.0), (2.0, 4.0), (3.0, 10.0), (INF, 10.0)]);
        assert_eq!(histogram_quantile(0.5, &b), Some(0.625));
        assert_eq!(histogram_quantile(0.9, &b), Some(2.5));
    }

    #[test]
    fn almost_equal_is_prometheus_relative_comparison() {
        let eps = SMALL_DELTA_TOLERANCE;
        assert!(almost_equal(5.0, 5.0, eps));
        assert!(!almost_equal(1.0, 2.0, eps));
        // Relative to the sum of magnitudes: 0.5 apart at 1e12 is noise (2.5e-13)...
        assert!(almost_equal(1e12, 1e12 + 0.5, eps));
        assert!(almost_equal(-1e12, -1e12 - 0.5, eps));
        // ...1e-11 apart at 4 is not (1.25e-12 of the sum; it would be 6.25e-13 of the product).
        assert!(!almost_equal(4.0, 4.0 + 1e-11, eps));
        // Strictly below epsilon: exactly epsilon apart is not equal.
        assert!(!almost_equal(1.0, 3.0, 0.5));
        assert!(almost_equal(1.0, 3.0, 0.51));
        // Against zero, or with a sum below the smallest normal, the difference is compared
        // with epsilon times the smallest normal, never relatively.
        assert!(!almost_equal(0.0, 1e-13, eps));
        assert!(!almost_equal(1e-13, 0.0, eps));
        assert!(!almost_equal(0.0, 1.0, 2.0));
        assert!(!almost_equal(1.0, 0.0, 2.0));
        let threshold = eps * f64::MIN_POSITIVE;
        assert!(almost_equal(0.0, threshold / 2.0, eps));
        assert!(!almost_equal(0.0, threshold, eps));
        // Two subnormals 1e-321 apart: 1e-11 of their sum, yet equal by the absolute rule.
        assert!(almost_equal(5e-311, 5e-311 + 1e-321, eps));
    }

    #[test]
    fn the_general_path_takes_unsorted_two_bucket_descending_and_empty_input() {
        // Unsorted, so not the borrowed fast path.
        let b = buckets(&[(INF, 4.0), (1.0, 4.0)]);
        assert_eq!(histogram_quantile(0.5, &b), Some(0.5));
        let b = buckets(&[(INF, 10.0), (2.0, 10.0), (1.0, 5.0)]);
        assert_eq!(histogram_quantile(0.5, &b), Some(1.0));
        let b = buckets(&[(INF, 0.0), (1.0, 0.0)]);
        assert_eq!(histogram_quantile(0.5, &b), None);
        assert_eq!(quantiles_of(&b), Quantiles::default());
    }

    #[test]
    fn a_duplicate_bound_in_sorted_input_is_summed_too() {
        // Sorted and cumulative at first sight, but `le` 1 twice (two children): summed to 5,
        // so rank 5 of 10 ends exactly at le 1.
        let b = buckets(&[(1.0, 2.0), (1.0, 3.0), (2.0, 10.0), (INF, 10.0)]);
        assert_eq!(histogram_quantile(0.5, &b), Some(1.0));
    }

    #[test]
    fn rank_exactly_on_a_bucket_boundary_takes_the_lower_bucket() {
        let b = buckets(&[(1.0, 5.0), (2.0, 5.0), (3.0, 10.0), (INF, 10.0)]);
        assert_eq!(histogram_quantile(0.5, &b), Some(1.0));
    }

    #[test]
    fn delta_and_layout_change() {
        let mut a = Histogram::default();
        for (le, c) in [(1.0, 1.0), (INF, 2.0)] {
            a.add_bucket(le, c);
        }
        a.count = 2.0;
        let mut b = a.clone();
        b.add_bucket(1.0, 4.0);
        b.add_bucket(INF, 5.0);
        b.count = 7.0;
        let d = b.delta_since(&a).unwrap();
        assert_eq!(d.buckets, buckets(&[(1.0, 4.0), (INF, 5.0)]));
        assert_eq!(d.count, 5.0);
        // Reversed: a decrease is a reset, never a negative delta.
        assert_eq!(a.delta_since(&b), None);
        // Different `le` set.
        let mut c = Histogram::default();
        c.add_bucket(2.0, 9.0);
        c.add_bucket(INF, 9.0);
        assert_eq!(c.delta_since(&a), None);
    }

    #[test]
    fn buckets_stay_sorted_and_equal_bounds_are_summed() {
        let mut h = Histogram::default();
        for (le, c) in [(INF, 4.0), (1.0, 1.0), (2.0, 3.0), (1.0, 2.0), (INF, 6.0)] {
            h.add_bucket(le, c);
        }
        assert_eq!(h.buckets, buckets(&[(1.0, 3.0), (2.0, 3.0), (INF, 10.0)]));
        // Filled directly (children appended as they came), `finish` sorts and sums.
        let mut h = Histogram {
            buckets: buckets(&[(1.0, 1.0), (INF, 2.0), (1.0, 3.0), (INF, 4.0), (0.5, 1.0)]),
            ..Histogram::default()
        };
        h.finish();
        assert_eq!(h.buckets, buckets(&[(0.5, 1.0), (1.0, 4.0), (INF, 6.0)]));
    }

    #[test]
    fn merge_unions_bounds_sorted() {
        let mut into = buckets(&[(1.0, 1.0), (4.0, 2.0), (INF, 3.0)]);
        merge_buckets(&mut into, &buckets(&[(2.0, 5.0), (4.0, 1.0), (INF, 6.0)]));
        assert_eq!(
            into,
            buckets(&[(1.0, 1.0), (2.0, 5.0), (4.0, 3.0), (INF, 9.0)])
        );
        merge_buckets(
            &mut into,
            &buckets(&[(1.0, 1.0), (2.0, 1.0), (4.0, 1.0), (INF, 1.0)]),
        );
        assert_eq!(
            into,
            buckets(&[(1.0, 2.0), (2.0, 6.0), (4.0, 4.0), (INF, 10.0)])
        );
    }

    #[test]
    fn merge_keeps_the_bounds_of_either_side_beyond_the_others_last() {
        // Without a shared `+Inf` at the end, either side may run out first: its rest is kept.
        let mut into = buckets(&[(1.0, 1.0)]);
        merge_buckets(&mut into, &buckets(&[(2.0, 2.0), (3.0, 3.0)]));
        assert_eq!(into, buckets(&[(1.0, 1.0), (2.0, 2.0), (3.0, 3.0)]));
        let mut into = buckets(&[(1.0, 1.0), (3.0, 3.0), (4.0, 4.0)]);
        merge_buckets(&mut into, &buckets(&[(2.0, 2.0)]));
        assert_eq!(
            into,
            buckets(&[(1.0, 1.0), (2.0, 2.0), (3.0, 3.0), (4.0, 4.0)])
        );
        // As many bounds on each side, none in common: a union, not a sum bound by bound.
        let mut into = buckets(&[(1.0, 1.0), (3.0, 3.0)]);
        merge_buckets(&mut into, &buckets(&[(2.0, 2.0), (4.0, 4.0)]));
        assert_eq!(
            into,
            buckets(&[(1.0, 1.0), (2.0, 2.0), (3.0, 3.0), (4.0, 4.0)])
        );
    }

    fn histogram(pairs: &[(f64, f64)], sum: f64) -> Histogram {
        Histogram {
            buckets: buckets(pairs),
            sum,
            count: pairs.last().map_or(0.0, |b| b.1),
        }
    }

    #[test]
    fn kept_histograms_share_bounds_while_the_layout_holds() {
        let a = histogram(&[(1.0, 1.0), (2.0, 3.0), (INF, 4.0)], 5.0);
        let b = histogram(&[(1.0, 2.0), (2.0, 5.0), (INF, 7.0)], 9.0);
        let c = histogram(&[(1.0, 2.0), (4.0, 5.0), (INF, 7.0)], 9.0);
        let ka = KeptHistogram::keep(a.clone(), None);
        let kb = KeptHistogram::keep(b.clone(), Some(&ka));
        assert!(kb.shares_bounds_with(&ka));
        assert_eq!(kb.delta_since(&ka), b.delta_since(&a));
        assert_eq!(ka.delta_since(&kb), None, "a decrease is a reset");
        // A new layout gets its own bounds, and no delta with the old one.
        let kc = KeptHistogram::keep(c.clone(), Some(&kb));
        assert!(!kc.shares_bounds_with(&kb));
        assert!(!kb.same_layout_as(&c) && kc.same_layout_as(&c));
        assert_eq!(kc.delta_since(&kb), None);
        assert_eq!(c.delta_since(&b), None);
        // Equal bounds not shared (kept separately) still compare equal.
        let kb_alone = KeptHistogram::keep(b.clone(), None);
        assert_eq!(kb_alone.delta_since(&ka), b.delta_since(&a));
    }

    #[test]
    fn an_unchanged_histogram_did_not_decrease_and_a_lower_count_alone_did() {
        // A pod that served nothing in the window: its histogram is unchanged, a zero delta
        // (no observation, calm), never a reset.
        let a = histogram(&[(1.0, 2.0), (INF, 3.0)], 4.0);
        assert!(!a.decreased_from(&a));
        let zero = histogram(&[(1.0, 0.0), (INF, 0.0)], 0.0);
        assert_eq!(a.delta_since(&a), Some(zero.clone()));
        let ka = KeptHistogram::keep(a.clone(), None);
        assert!(!ka.decreased_to(&a));
        assert_eq!(ka.delta_since(&ka), Some(zero));
        // `_count` lower with every bucket unchanged is a decrease too.
        let lower = Histogram {
            count: 2.0,
            ..a.clone()
        };
        assert!(lower.decreased_from(&a) && ka.decreased_to(&lower));
        assert_eq!(lower.delta_since(&a), None);
        // One bucket lower with the count unchanged is one.
        let dip = histogram(&[(1.0, 1.0), (INF, 3.0)], 4.0);
        assert!(dip.decreased_from(&a) && ka.decreased_to(&dip));
        assert_eq!(dip.delta_since(&a), None);
    }

    proptest::proptest! {
        /// A kept histogram compares, subtracts and detects decreases exactly as the
        /// histogram it was kept from, whether the layouts match or not.
        #[test]
        fn kept_histogram_matches_histogram(
            then in proptest::collection::vec((0u8..6, 0u32..50), 1..8),
            now in proptest::collection::vec((0u8..6, 0u32..50), 1..8),
            share in proptest::bool::ANY,
        ) {
            let make = |pairs: &[(u8, u32)]| {
                let mut h = Histogram::default();
                for (le, c) in pairs {
                    let le = if *le == 5 { INF } else { f64::from(*le) * 0.5 };
                    h.add_bucket(le, f64::from(*c));
                }
                h.count = h.buckets.iter().map(|b| b.count).sum();
                h.sum = h.count * 0.25;
                h
            };
            let (a, b) = (make(&then), make(&now));
            let ka = KeptHistogram::keep(a.clone(), None);
            let kb = KeptHistogram::keep(b.clone(), share.then_some(&ka));
            proptest::prop_assert_eq!(kb.delta_since(&ka), b.delta_since(&a));
            proptest::prop_assert_eq!(ka.same_layout_as(&b), b.same_layout(&a));
            if b.same_layout(&a) {
                proptest::prop_assert_eq!(ka.decreased_to(&b), b.decreased_from(&a));
            }
        }
    }

    proptest::proptest! {
        /// The borrowed fast path and the general path agree on clean input.
        #[test]
        fn fast_path_matches_general_path(
            increments in proptest::collection::vec(0u32..1000, 2..30),
            q in 0.0f64..=1.0,
        ) {
            let mut cum = 0.0;
            let mut b: Vec<Bucket> = increments
                .iter()
                .enumerate()
                .map(|(i, inc)| {
                    cum += f64::from(*inc);
                    Bucket { le: 0.1 * (i as f64 + 1.0), count: cum }
                })
                .collect();
            b.push(Bucket { le: INF, count: cum + 1.0 });
            let fast = prepare(&b).map(|p| quantile_prepared(q, &p));
            let slow = prepare_owned(&b).map(|p| quantile_prepared(q, &p));
            proptest::prop_assert!(matches!(prepare(&b), Some(std::borrow::Cow::Borrowed(_))));
            proptest::prop_assert_eq!(fast, slow);
        }

        /// Quantiles are monotone in q and stay inside [0, highest finite bound].
        #[test]
        fn quantiles_monotone_and_bounded(
            increments in proptest::collection::vec(0u32..50, 2..12),
            qs in proptest::collection::vec(0.0f64..=1.0, 2..8),
        ) {
            let mut cum = 0.0;
            let mut b: Vec<Bucket> = increments
                .iter()
                .enumerate()
                .map(|(i, inc)| {
                    cum += f64::from(*inc);
                    Bucket { le: 0.5 * (i as f64 + 1.0), count: cum }
                })
                .collect();
            b.push(Bucket { le: INF, count: cum });
            let top = b[b.len() - 2].le;
            let mut qs = qs;
            qs.sort_by(f64::total_cmp);
            let values: Vec<Option<f64>> = qs.iter().map(|&q| histogram_quantile(q, &b)).collect();
            if cum == 0.0 {
                proptest::prop_assert!(values.iter().all(Option::is_none));
            } else {
                for pair in values.windows(2) {
                    proptest::prop_assert!(pair[0].unwrap() <= pair[1].unwrap());
                }
                for v in values {
                    let v = v.unwrap();
                    proptest::prop_assert!((0.0..=top).contains(&v));
                }
            }
        }
    }
}
