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

/// Each unit in nanoseconds.
const UNITS: &[(&str, u128)] = &[
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", NANOS_PER_SECOND),
    ("m", 60 * NANOS_PER_SECOND),
    ("h", 3_600 * NANOS_PER_SECOND),
];

const NANOS_PER_SECOND: u128 = 1_000_000_000;

/// Fraction digits read; more cannot change a whole nanosecond of an hour term.
const FRACTION_DIGITS: usize = 25;

/// Parses a duration with the grammar of Go's `time.ParseDuration` (a sign, then one or more
/// `<decimal><unit>` terms, or a bare `0`). Negative values are rejected. The arithmetic is exact in
/// whole nanoseconds (a fraction is truncated, as Go does), so whatever [`format`] prints parses
/// back to the same duration.
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
    let mut nanos = 0u128;
    while !rest.is_empty() {
        let number_len = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
        let (whole, fraction) = rest[..number_len].split_once('.').unwrap_or((&rest[..number_len], ""));
        if (whole.is_empty() && fraction.is_empty()) || fraction.contains('.') {
            return Err(invalid());
        }
        rest = &rest[number_len..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let unit = UNITS
            .iter()
            .find(|(name, _)| *name == &rest[..unit_len])
            .map(|(_, unit)| *unit)
            .ok_or_else(invalid)?;
        nanos =
            term_nanos(whole, fraction, unit).and_then(|term| nanos.checked_add(term)).ok_or_else(invalid)?;
        rest = &rest[unit_len..];
    }
    if negative && nanos > 0 {
        return Err(Error::Negative(text.to_string()));
    }
    let seconds = u64::try_from(nanos / NANOS_PER_SECOND).map_err(|_| invalid())?;
    Ok(Duration::new(seconds, (nanos % NANOS_PER_SECOND) as u32))
}

/// `<whole>.<fraction>` of `unit` (in nanoseconds) as whole nanoseconds; `None` on overflow.
/// Both parts hold ASCII digits only.
fn term_nanos(whole: &str, fraction: &str, unit: u128) -> Option<u128> {
    let digits = |text: &str| {
        text.bytes()
            .try_fold(0u128, |value, digit| value.checked_mul(10)?.checked_add(u128::from(digit - b'0')))
    };
    let fraction = &fraction[..fraction.len().min(FRACTION_DIGITS)];
    let scale = 10u128.pow(fraction.len() as u32);
    digits(whole)?.checked_mul(unit)?.checked_add(digits(fraction)? * unit / scale)
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
    fn large_and_fractional_durations_parse_exactly() {
        // Found by fuzzing: summing terms in f64 lost the last second and the last nanosecond.
        assert_eq!(parse("33332258434418h31m29s"), Ok(Duration::from_secs(119_996_130_363_906_689)));
        assert_eq!(parse("1.000000001s"), Ok(Duration::from_nanos(1_000_000_001)));
        assert_eq!(parse("4294967295h"), Ok(Duration::from_secs(4_294_967_295 * 3_600)));
        assert_eq!(parse(".5us"), Ok(Duration::from_nanos(500)));
        assert_eq!(parse("5.s"), Ok(Duration::from_secs(5)));
    }

    #[test]
    fn overflowing_durations_are_rejected_naming_the_value() {
        let huge = "9".repeat(40) + "h";
        assert_eq!(parse(&huge), Err(Error::Invalid(huge.clone())));
        assert_eq!(parse("5124095576030432h"), Err(Error::Invalid("5124095576030432h".into())));
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

#[cfg(test)]
mod fuzz {
    use proptest::prelude::*;

    use super::*;
    use crate::proptest_support::{config, text};

    const UNIT_NANOS: [(&str, u64); 8] = [
        ("ns", 1),
        ("us", 1_000),
        ("µs", 1_000),
        ("μs", 1_000),
        ("ms", 1_000_000),
        ("s", 1_000_000_000),
        ("m", 60_000_000_000),
        ("h", 3_600_000_000_000),
    ];

    /// Strings over the duration alphabet, so most reach the unit and number checks.
    fn duration_like() -> impl Strategy<Value = String> {
        "[-+]?([0-9.]{0,4}(ns|us|µs|μs|ms|s|m|h|d|x|)){0,4}"
    }

    fn term() -> impl Strategy<Value = (u32, &'static str, u64)> {
        (any::<u32>(), proptest::sample::select(&UNIT_NANOS[..]))
            .prop_map(|(value, (unit, nanos))| (value, unit, nanos))
    }

    proptest! {
        #![proptest_config(config(1024))]

        #[test]
        fn any_text_parses_or_is_rejected_naming_the_value(input in prop_oneof![text(), duration_like()]) {
            if let Err(error) = parse(&input) {
                let message = error.to_string();
                prop_assert!(message.contains(&format!("{input:?}")), "{message}");
            }
        }

        #[test]
        fn formatted_durations_parse_back_to_the_same_duration(nanos in any::<u64>(), secs in any::<u64>()) {
            for duration in [Duration::from_nanos(nanos), Duration::new(secs / 2, (nanos % 1_000_000_000) as u32)] {
                let text = format(duration);
                prop_assert_eq!(parse(&text), Ok(duration), "{}", text);
            }
        }

        #[test]
        fn a_sum_of_whole_terms_is_exact(terms in proptest::collection::vec(term(), 1..5)) {
            let text: String = terms.iter().map(|(value, unit, _)| format!("{value}{unit}")).collect();
            let nanos: u128 = terms.iter().map(|(value, _, unit)| u128::from(*value) * u128::from(*unit)).sum();
            let want = Duration::new((nanos / 1_000_000_000) as u64, (nanos % 1_000_000_000) as u32);
            prop_assert_eq!(parse(&text), Ok(want));
        }

        #[test]
        fn a_negative_duration_is_rejected_naming_the_value(terms in proptest::collection::vec(term(), 1..4)) {
            let text: String = terms.iter().map(|(value, unit, _)| format!("{value}{unit}")).collect();
            let negative = format!("-{text}");
            let zero = terms.iter().all(|(value, _, _)| *value == 0);
            match parse(&negative) {
                Ok(duration) => prop_assert!(zero && duration.is_zero(), "{negative} parsed as {duration:?}"),
                Err(error) => {
                    prop_assert!(!zero);
                    prop_assert_eq!(error, Error::Negative(negative.clone()));
                }
            }
        }
    }
}
