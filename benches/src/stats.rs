//! The two summaries every report prints: the median of rounds and a
//! percentile of latency samples.

/// Median of the values that are numbers; NaN when there are none (a
/// measurement that never ran must not print as 0).
pub fn median(values: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = values.into_iter().filter(|x| !x.is_nan()).collect();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The `q` quantile (0..=1) of sorted samples, by the nearest rank; None
/// when there are no samples.
pub fn percentile<T: Copy>(sorted: &[T], q: f64) -> Option<T> {
    let last = sorted.len().checked_sub(1)?;
    let i = (last as f64 * q.clamp(0.0, 1.0)).round() as usize;
    Some(sorted[i.min(last)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_skips_nan_and_averages_the_middle_pair() {
        assert_eq!(median([3.0, f64::NAN, 1.0, 2.0]), 2.0);
        assert_eq!(median([4.0, 1.0, 3.0, 2.0]), 2.5);
        assert!(median([f64::NAN]).is_nan());
    }

    #[test]
    fn percentile_is_a_nearest_rank() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 0.99), Some(99));
        assert_eq!(percentile(&v, 0.5), Some(51));
        assert_eq!(percentile(&v, 1.0), Some(100));
        assert_eq!(percentile::<u32>(&[], 0.5), None);
    }
}
