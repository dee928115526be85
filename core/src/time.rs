//! Time values of the engine: instants and durations in nanoseconds.
//!
//! `core` has no clock of its own: every instant here comes from the caller (an event's stamp,
//! an arrival stamp, or "the time is now T"). Integers keep arithmetic exact and deterministic.

use std::fmt;

use serde::{Deserialize, Serialize};

/// An instant: nanoseconds since the Unix epoch, UTC.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Timestamp(pub i64);

/// A non-negative length of time in nanoseconds.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub struct Duration(pub i64);

impl Timestamp {
    /// The earliest representable instant; used as "never".
    pub const MIN: Timestamp = Timestamp(i64::MIN);
    /// The latest representable instant; used as "not armed".
    pub const MAX: Timestamp = Timestamp(i64::MAX);

    /// An instant from whole seconds since the epoch.
    pub const fn from_secs(s: i64) -> Self {
        Timestamp(s.saturating_mul(1_000_000_000))
    }

    /// An instant from milliseconds since the epoch.
    pub const fn from_millis(ms: i64) -> Self {
        Timestamp(ms.saturating_mul(1_000_000))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> i64 {
        self.0
    }

    /// This instant plus a duration, saturating at the ends of the range.
    #[inline(always)]
    pub const fn add(self, d: Duration) -> Self {
        // (Checked, the overflow out of line: an add and a branch where a saturating add
        // takes six instructions, on the path of every event of every rule.)
        match self.0.checked_add(d.0) {
            Some(v) => Timestamp(v),
            None => Timestamp::saturated(d.0 > 0),
        }
    }

    /// This instant minus a duration, saturating at the ends of the range.
    #[inline(always)]
    pub const fn sub(self, d: Duration) -> Self {
        match self.0.checked_sub(d.0) {
            Some(v) => Timestamp(v),
            None => Timestamp::saturated(d.0 < 0),
        }
    }

    /// The end of the range an overflowing sum passed: the latest instant if `up`.
    #[cold]
    #[inline(never)]
    const fn saturated(up: bool) -> Self {
        if up { Timestamp::MAX } else { Timestamp::MIN }
    }

    /// The duration from `earlier` to `self` (zero when `earlier` is later).
    pub const fn since(self, earlier: Timestamp) -> Duration {
        let d = self.0.saturating_sub(earlier.0);
        Duration(if d < 0 { 0 } else { d })
    }

    /// RFC 3339 text with nanosecond precision trimmed to what is needed, in UTC (`Z`).
    pub fn to_rfc3339(self) -> String {
        let secs = self.0.div_euclid(1_000_000_000);
        let nanos = self.0.rem_euclid(1_000_000_000) as u32;
        match chrono::DateTime::from_timestamp(secs, nanos) {
            Some(t) => t.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true),
            None => format!("@{}ns", self.0),
        }
    }

    /// Parses RFC 3339 text (`2026-11-30T10:00:00Z`, any offset).
    pub fn parse_rfc3339(s: &str) -> Option<Self> {
        let t = chrono::DateTime::parse_from_rfc3339(s.trim()).ok()?;
        t.timestamp_nanos_opt().map(Timestamp)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

/// The units [`Duration::parse`] reads: every unit of fixed length (no months or years).
pub const DURATION_UNITS: &[&str] = &[
    "ns", "us", "µs", "ms", "s", "sec", "secs", "second", "seconds", "m", "min", "mins", "minute",
    "minutes", "h", "hr", "hrs", "hour", "hours", "d", "day", "days", "w", "week", "weeks",
];

impl Duration {
    /// Zero length.
    pub const ZERO: Duration = Duration(0);
    /// Longer than anything that matters; used for "unbounded".
    pub const MAX: Duration = Duration(i64::MAX);

    /// A duration of whole seconds.
    pub const fn from_secs(s: i64) -> Self {
        Duration(s.saturating_mul(1_000_000_000))
    }

    /// A duration of milliseconds.
    pub const fn from_millis(ms: i64) -> Self {
        Duration(ms.saturating_mul(1_000_000))
    }

    /// Nanoseconds.
    pub const fn as_nanos(self) -> i64 {
        self.0
    }

    /// Parses a human duration as written in rule files: `60s`, `5m`, `1h30m`, `500ms`, `7d`.
    pub fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim();
        if t.is_empty() {
            return Err("empty duration".into());
        }
        if t.chars().all(|c| c.is_ascii_digit()) {
            return Err(format!(
                "`{t}` has no unit: write `{t}s`, `{t}m`, `{t}h` or `{t}ms`"
            ));
        }
        match humantime::parse_duration(t) {
            Ok(d) => match unit_refused(t) {
                Some(why) => Err(why),
                None => i64::try_from(d.as_nanos())
                    .map(Duration)
                    .map_err(|_| format!("`{t}` is too long")),
            },
            // `1h30`: a number without a unit after one with.
            Err(humantime::DurationError::UnknownUnit { unit, value, .. }) if unit.is_empty() => {
                Err(format!(
                    "`{t}`: `{value}` has no unit; write `{t}m` or `{t}s` (units: ms, s, m, h, d, w)"
                ))
            }
            // humantime's own words list units a rule refuses (months, years): ours instead.
            Err(humantime::DurationError::UnknownUnit { unit, .. }) => Err(format!(
                "`{t}`: `{unit}` is not a unit of duration; use ms, s, m, h, d or w, e.g. `30s`, `5m`, `1h30m`, `7d`"
            )),
            Err(_) if t.starts_with('-') => Err(format!(
                "`{t}`: a duration cannot be negative; write `0s` for none"
            )),
            // A fraction finer than a nanosecond overflows humantime too: said as such.
            Err(humantime::DurationError::NumberOverflow)
                if t.split_once('.')
                    .is_some_and(|(whole, _)| whole.len() <= 12) =>
            {
                Err(format!(
                    "`{t}` is finer than a nanosecond: durations are whole nanoseconds (at most 9 decimals of a second)"
                ))
            }
            Err(humantime::DurationError::NumberOverflow) => Err(format!("`{t}` is too long")),
            Err(_) => Err(format!(
                "`{t}` is not a duration; write a number and a unit (ms, s, m, h, d or w), e.g. `30s`, `5m`, `1h30m`, `7d`"
            )),
        }
    }
}

/// Why `t`, which humantime reads, is still refused: humantime also reads months and years
/// (`5M` is five months, not minutes), and only units of fixed length are taken.
fn unit_refused(t: &str) -> Option<String> {
    let mut rest = t;
    while let Some(i) = rest.find(|c: char| c.is_alphabetic()) {
        let unit_len = rest[i..]
            .find(|c: char| !c.is_alphabetic())
            .unwrap_or(rest.len() - i);
        let unit = &rest[i..i + unit_len];
        if !DURATION_UNITS.contains(&unit) {
            let hint = match unit {
                "M" | "mo" | "month" | "months" => {
                    " (`M` would be months: write `m` for minutes, or days such as `30d`)"
                }
                "y" | "year" | "years" => " (write days, such as `365d`)",
                _ => "",
            };
            return Some(format!(
                "`{t}`: `{unit}` is not a unit of duration{hint}; use ms, s, m, h, d or w, e.g. `30s`, `5m`, `1h30m`, `7d`"
            ));
        }
        rest = &rest[i + unit_len..];
    }
    None
}

impl fmt::Display for Duration {
    /// Prints the shortest exact spelling, e.g. `5m`, `1h30m`, `1500ms`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut n = self.0;
        if n == 0 {
            return f.write_str("0s");
        }
        if n % 1_000_000_000 != 0 {
            // Below the millisecond: milliseconds, microseconds, nanoseconds, each unit
            // once (`211ms628us`, not `211628000ns`).
            for (name, size) in [("ms", 1_000_000), ("us", 1_000), ("ns", 1)] {
                if n >= size {
                    write!(f, "{}{name}", n / size)?;
                    n %= size;
                }
            }
            return Ok(());
        }
        n /= 1_000_000_000;
        let units = [("d", 86_400), ("h", 3_600), ("m", 60), ("s", 1)];
        for (name, size) in units {
            if n >= size {
                write!(f, "{}{name}", n / size)?;
                n %= size;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rule_file_durations() {
        assert_eq!(Duration::parse("60s"), Ok(Duration::from_secs(60)));
        assert_eq!(Duration::parse("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(Duration::parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(Duration::parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(Duration::parse("7d"), Ok(Duration::from_secs(7 * 86_400)));
        assert_eq!(Duration::parse("0s"), Ok(Duration::ZERO));
        assert!(Duration::parse("60").is_err());
        assert!(Duration::parse("5 parsecs").is_err());
        assert!(Duration::parse("").is_err());
        assert_eq!(Duration::parse("2w"), Ok(Duration::from_secs(14 * 86_400)));
        assert_eq!(Duration::parse("1h 30min"), Ok(Duration::from_secs(5400)));
        // Fractions are read exactly (docs/rules.md says so).
        assert_eq!(Duration::parse("1.5h"), Ok(Duration::from_secs(5400)));
        assert_eq!(Duration::parse("0.25s"), Ok(Duration::from_millis(250)));
        assert_eq!(Duration::parse("5 minutes"), Ok(Duration::from_secs(300)));
    }

    /// The messages name our units, not the parser's (which lists months and years).
    #[test]
    fn bad_durations_say_what_a_rule_takes() {
        let msg = |t: &str| Duration::parse(t).err().unwrap_or_default();
        assert_eq!(
            msg("5x"),
            "`5x`: `x` is not a unit of duration; use ms, s, m, h, d or w, e.g. `30s`, `5m`, `1h30m`, `7d`"
        );
        assert!(msg("-1s").contains("cannot be negative"), "{}", msg("-1s"));
        assert!(!msg("5 parsecs").contains("months"), "{}", msg("5 parsecs"));
        assert!(msg("s5").contains("a number and a unit"), "{}", msg("s5"));
    }

    /// `5M` is five months to humantime; in a rule it is a typo for `5m` far more often.
    #[test]
    fn months_and_years_are_refused() {
        let Err(e) = Duration::parse("5M") else {
            panic!("5M parsed");
        };
        assert!(e.contains("`M` is not a unit of duration"), "{e}");
        assert!(e.contains("write `m` for minutes"), "{e}");
        let Err(e) = Duration::parse("1h30") else {
            panic!("1h30 parsed");
        };
        assert!(e.contains("`30` has no unit; write `1h30m`"), "{e}");
        for bad in ["1y", "2months", "1M30s", "3years"] {
            assert!(Duration::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn displays_shortest_spelling() {
        assert_eq!(Duration::from_secs(5400).to_string(), "1h30m");
        assert_eq!(Duration::from_millis(1500).to_string(), "1500ms");
        assert_eq!(Duration::ZERO.to_string(), "0s");
        // Below the millisecond (a flow's duration): each unit once, and it reads back.
        for (d, text) in [
            (Duration(211_628_000), "211ms628us"),
            (Duration(3_000), "3us"),
            (Duration(1_500_000_007), "1500ms7ns"),
        ] {
            assert_eq!(d.to_string(), text);
            assert_eq!(Duration::parse(text), Ok(d));
        }
    }

    #[test]
    fn rfc3339_round_trip() {
        let t = Timestamp::parse_rfc3339("2026-11-30T10:00:00Z");
        assert_eq!(t, Some(Timestamp::from_secs(1_796_032_800)));
        assert_eq!(
            Timestamp::from_secs(1_796_032_800).to_rfc3339(),
            "2026-11-30T10:00:00Z"
        );
        assert_eq!(
            Timestamp::from_millis(1_500).to_rfc3339(),
            "1970-01-01T00:00:01.500Z"
        );
    }
}
