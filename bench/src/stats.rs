//! Summary statistics over samples (seconds, bytes, ...).

use serde_json::{Value, json};

/// Median, p95 and friends of a sample set.
#[derive(Debug, Clone, Copy, Default)]
pub struct Summary {
    /// Number of samples.
    pub n: usize,
    /// Median (mean of the two middle samples for even counts).
    pub median: f64,
    /// 95th percentile, nearest rank.
    pub p95: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// Arithmetic mean.
    pub mean: f64,
}

impl Summary {
    /// Summarizes `samples` (NaNs dropped). All zero when empty.
    pub fn of(samples: &[f64]) -> Self {
        let mut sorted: Vec<f64> = samples.iter().copied().filter(|v| v.is_finite()).collect();
        if sorted.is_empty() {
            return Self::default();
        }
        sorted.sort_by(f64::total_cmp);
        let n = sorted.len();
        let median = if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
        let rank = ((0.95 * n as f64).ceil() as usize).clamp(1, n);
        Self {
            n,
            median,
            p95: sorted[rank - 1],
            min: sorted[0],
            max: sorted[n - 1],
            mean: sorted.iter().sum::<f64>() / n as f64,
        }
    }

    /// JSON form.
    pub fn json(&self) -> Value {
        json!({"n": self.n, "median": self.median, "p95": self.p95, "min": self.min, "max": self.max, "mean": self.mean})
    }
}

#[cfg(test)]
mod tests {
    use super::Summary;

    #[test]
    fn median_and_p95() {
        let s = Summary::of(&[5.0, 1.0, 3.0, 2.0, 4.0]);
        assert_eq!((s.median, s.p95, s.min, s.max), (3.0, 5.0, 1.0, 5.0));
        let samples: Vec<f64> = (1..=20).map(f64::from).collect();
        let s = Summary::of(&samples);
        assert_eq!((s.median, s.p95), (10.5, 19.0));
        assert_eq!(Summary::of(&[]).n, 0);
    }
}
