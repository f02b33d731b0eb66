//! The HPA's tolerance band, computed the way the HPA controller does for an `AverageValue`
//! external metric with target 1: it ignores a value `v` at `c` current replicas when
//! `1 - tolerance <= v / c <= 1 + tolerance` (inclusive, in `f64`, as the controller's
//! tolerance check does since the per-HPA tolerance was added). The simulator's HPA model uses
//! the same band ([`within_hpa_tolerance`]).

/// Whether the HPA, at `current_replicas`, acts on the value `target_replicas` with this
/// tolerance. At zero current replicas the HPA is not in charge (KEDA owns 0 <-> 1): `true`.
pub fn hpa_would_act(current_replicas: u32, target_replicas: u32, tolerance: f64) -> bool {
    if current_replicas == 0 {
        return true;
    }
    let ratio = f64::from(target_replicas) / f64::from(current_replicas);
    !within_hpa_tolerance(ratio, tolerance, tolerance)
}

/// The band itself: whether the HPA ignores the usage `ratio` (desired over current, e.g. the
/// metric's value over target times current replicas), that is whether
/// `1 - tolerance_down <= ratio <= 1 + tolerance_up` (inclusive, in `f64`; a NaN ratio is
/// outside). The two tolerances are the HPA's per-direction `behavior.scaleDown.tolerance`
/// and `behavior.scaleUp.tolerance`.
pub fn within_hpa_tolerance(ratio: f64, tolerance_down: f64, tolerance_up: f64) -> bool {
    1.0 - tolerance_down <= ratio && ratio <= 1.0 + tolerance_up
}

/// The smallest target in `from..=max_replicas` above `current_replicas` that the HPA acts
/// on, if any.
pub fn smallest_acted_scale_up(
    current_replicas: u32,
    from: u32,
    max_replicas: u32,
    tolerance: f64,
) -> Option<u32> {
    let start = from.max(current_replicas.saturating_add(1));
    (start..=max_replicas).find(|&t| hpa_would_act(current_replicas, t, tolerance))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn band_is_inclusive_like_the_hpa() {
        assert!(!hpa_would_act(10, 11, 0.1));
        assert!(!hpa_would_act(10, 9, 0.1));
        assert!(hpa_would_act(10, 12, 0.1));
        assert!(hpa_would_act(10, 8, 0.1));
        assert!(hpa_would_act(9, 10, 0.1));
        assert!(!hpa_would_act(5, 5, 0.0));
        assert!(hpa_would_act(5, 6, 0.0));
        assert!(hpa_would_act(0, 1, 0.1));
    }

    #[test]
    fn band_per_direction() {
        assert!(within_hpa_tolerance(1.1, 0.1, 0.1));
        assert!(within_hpa_tolerance(0.9, 0.1, 0.1));
        assert!(!within_hpa_tolerance(1.1, 0.1, 0.05));
        assert!(within_hpa_tolerance(0.8, 0.2, 0.0));
        assert!(!within_hpa_tolerance(1.01, 0.2, 0.0));
        assert!(!within_hpa_tolerance(f64::NAN, 0.1, 0.1));
    }

    #[test]
    fn smallest_step_the_hpa_acts_on() {
        assert_eq!(smallest_acted_scale_up(10, 11, 20, 0.1), Some(12));
        assert_eq!(smallest_acted_scale_up(20, 22, 30, 0.1), Some(23));
        assert_eq!(smallest_acted_scale_up(5, 6, 5, 0.1), None);
        assert_eq!(smallest_acted_scale_up(10, 11, 11, 0.1), None);
        assert_eq!(smallest_acted_scale_up(3, 4, 5, 0.1), Some(4));
    }
}
