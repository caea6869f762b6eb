//! Go duration strings (`"30s"`, `"1h30m"`, `"1.5h"`), as upstream's flags, watches and annotations take them.

use std::time::Duration;

/// Why a duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// Not of the form Go's `time.ParseDuration` accepts.
    #[error("invalid duration {0:?}: expected a Go duration such as \"30s\", \"1h30m\" or \"0s\"")]
    Invalid(String),
    /// A negative duration, which has no meaning for a period.
    #[error("invalid duration {0:?}: must not be negative")]
    Negative(String),
}

const UNITS: &[(&str, f64)] = &[
    ("ns", 1e-9),
    ("us", 1e-6),
    ("µs", 1e-6),
    ("μs", 1e-6),
    ("ms", 1e-3),
    ("s", 1.0),
    ("m", 60.0),
    ("h", 3600.0),
];

/// Parses a duration with the grammar of Go's `time.ParseDuration` (a sign, then one or more
/// `<decimal><unit>` terms, or a bare `0`). Negative values are rejected.
pub fn parse(text: &str) -> Result<Duration, Error> {
    let invalid = || Error::Invalid(text.to_string());
    let (negative, mut rest) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if rest == "0" {
        return Ok(Duration::ZERO);
    }
    if rest.is_empty() {
        return Err(invalid());
    }
    let mut seconds = 0f64;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let number = &rest[..number_len];
        if number.is_empty() || number == "." || number.matches('.').count() > 1 {
            return Err(invalid());
        }
        let value: f64 = number.parse().map_err(|_| invalid())?;
        rest = &rest[number_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let factor = UNITS
            .iter()
            .find(|(name, _)| *name == &rest[..unit_len])
            .map(|(_, factor)| *factor)
            .ok_or_else(invalid)?;
        seconds += value * factor;
        rest = &rest[unit_len..];
    }
    if negative && seconds > 0.0 {
        return Err(Error::Negative(text.to_string()));
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| invalid())
}

/// Formats a duration the way Go's `Duration.String` does (`"1h0m0s"`, `"1.5s"`, `"0s"`),
/// for log lines users compare with upstream's.
pub fn format(duration: Duration) -> String {
    let total = duration.as_nanos();
    if total == 0 {
        return "0s".to_string();
    }
    if total < 1_000_000_000 {
        let (unit, scale) = match total {
            n if n < 1_000 => return format!("{n}ns"),
            n if n < 1_000_000 => ("µs", 1_000),
            _ => ("ms", 1_000_000),
        };
        return format!("{}{unit}", fraction(total, scale));
    }
    let hours = total / 3_600_000_000_000;
    let minutes = (total / 60_000_000_000) % 60;
    let seconds = fraction(total % 60_000_000_000, 1_000_000_000);
    match (hours, minutes) {
        (0, 0) => format!("{seconds}s"),
        (0, m) => format!("{m}m{seconds}s"),
        (h, m) => format!("{h}h{m}m{seconds}s"),
    }
}

fn fraction(value: u128, scale: u128) -> String {
    let whole = value / scale;
    let rest = value % scale;
    if rest == 0 {
        return whole.to_string();
    }
    let digits = scale.ilog10() as usize;
    let decimals = format!("{rest:0digits$}");
    format!("{whole}.{}", decimals.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_go_durations() {
        assert_eq!(parse("10h"), Ok(Duration::from_secs(36_000)));
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse("1.5h"), Ok(Duration::from_secs(5_400)));
        assert_eq!(parse("0s"), Ok(Duration::ZERO));
        assert_eq!(parse("0"), Ok(Duration::ZERO));
        assert_eq!(parse("-0s"), Ok(Duration::ZERO));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("2m3s4ms"), Ok(Duration::from_millis(123_004)));
        assert_eq!(parse("+5s"), Ok(Duration::from_secs(5)));
        assert_eq!(parse("1µs"), Ok(Duration::from_micros(1)));
    }

    #[test]
    fn rejects_what_go_rejects() {
        for bad in ["", "5", "1d", "s", "1.2.3s", "1 h", "soon", "-", "."] {
            assert!(matches!(parse(bad), Err(Error::Invalid(_))), "{bad:?} should be rejected");
        }
        assert_eq!(parse("-1s"), Err(Error::Negative("-1s".into())));
    }

    #[test]
    fn formats_like_go() {
        assert_eq!(format(Duration::ZERO), "0s");
        assert_eq!(format(Duration::from_secs(3600)), "1h0m0s");
        assert_eq!(format(Duration::from_secs(90)), "1m30s");
        assert_eq!(format(Duration::from_millis(1500)), "1.5s");
        assert_eq!(format(Duration::from_millis(5)), "5ms");
        assert_eq!(format(Duration::from_micros(1500)), "1.5ms");
    }
}
