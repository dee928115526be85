//! Events as JSON lines, so rules (flow rules included) can be tested before capture exists.
//!
//! One object per line: `source` (`"syslog"` or `"flow"`) and `time` (RFC 3339) are required,
//! `arrival` (RFC 3339) is optional and defaults to `time`. Every other key is a registry field
//! of that source, typed by [`Field::ty`]: strings (or whole numbers, kept as their digits);
//! integers; floats; booleans; IP addresses
//! from strings; times as RFC 3339 strings; durations as `"5s"`-style strings or numbers of
//! seconds. Syslog events may also carry `sd.<id>.<param>` keys (values kept as text). A `null`
//! value means "absent". Anything else is an error naming the key, so a typo in a test fails
//! loudly instead of silently not matching; so is a key given twice.
//!
//! ```text
//! {"source":"flow","time":"2026-01-01T00:00:00Z","kind":"flow_start","src":"10.0.0.1","dport":22}
//! {"source":"syslog","time":"2026-01-01T00:00:00Z","host":"web-1","app":"sshd","msg":"..."}
//! ```

use std::sync::Arc;

use cepheus_core::event::{Event, Field, FieldKey, Source, Value, ValueType};
use cepheus_core::time::{Duration, Timestamp};
use serde_json::Value as Json;

use cepheus_core::rules::diag::did_you_mean;

use super::Malformed;

/// Parses one JSON event line into an [`Event`], or says which key is wrong.
pub fn parse_json_event(line: &str) -> Result<Event, Malformed> {
    let line = line.trim();
    let Object(obj) =
        serde_json::from_str(line).map_err(|e| Malformed::Json(json_error(&e, line)))?;
    let source = match obj.get("source") {
        None | Some(Json::Null) => return Err(Malformed::Missing("source")),
        Some(Json::String(s)) if s == "syslog" => Source::Syslog,
        Some(Json::String(s)) if s == "flow" => Source::Flow,
        Some(other) => return Err(bad("source", "\"syslog\" or \"flow\"", other)),
    };
    let time = match obj.get("time") {
        None | Some(Json::Null) => return Err(Malformed::Missing("time")),
        Some(v) => time_value("time", v)?,
    };
    let arrival = match obj.get("arrival") {
        None | Some(Json::Null) => time,
        Some(v) => time_value("arrival", v)?,
    };
    let mut event = Event::new(source, time, arrival);
    for (key, value) in &obj {
        if matches!(key.as_str(), "source" | "time" | "arrival") || value.is_null() {
            continue;
        }
        match Field::from_name(key) {
            Some(field) if field.available_in(source) => {
                let v = typed(key, field.ty(), value)?;
                if let Some(expected) = field.out_of_range(&v) {
                    return Err(bad(key, expected, value));
                }
                event.set(field, v);
            }
            Some(_) => {
                return Err(Malformed::WrongSource {
                    field: key.clone(),
                    kind: source.name(),
                });
            }
            None if source == Source::Syslog && is_sd_key(key) => {
                let text =
                    scalar_text(value).ok_or_else(|| bad(key, expected(ValueType::Str), value))?;
                // (A JSON object's keys are distinct: no search for an earlier one.)
                event.extend_new([(FieldKey::Named(Arc::from(key.as_str())), Value::str(&text))]);
            }
            None if key == "matches" => {
                return Err(Malformed::Json(
                    "`matches` is what `cepheus events --rules` adds for reading: print the events without `--rules` to replay them".into(),
                ));
            }
            None => {
                let names = Field::ALL
                    .iter()
                    .filter(|f| f.available_in(source))
                    .map(|f| f.name())
                    .chain(["source", "time", "arrival"]);
                return Err(Malformed::UnknownField {
                    field: key.clone(),
                    near: did_you_mean(key, names),
                });
            }
        }
    }
    Ok(event)
}

/// serde_json's message with the position within the line only (the file's line number is
/// said beside it; "line 1" of the JSON text read as the file's first line). A key given
/// twice is placed at its second occurrence (serde_json knows only the end of its value).
fn json_error(e: &serde_json::Error, line: &str) -> String {
    let text = e.to_string();
    let at = format!(" at line {} column {}", e.line(), e.column());
    match text.strip_suffix(&at) {
        Some(head) if e.line() == 1 => {
            let column = duplicate_key_column(head, line).unwrap_or(e.column());
            format!("{head} at column {column}")
        }
        _ => text,
    }
}

/// The column (1-based, in characters) of the second `"key"` written as an object key in
/// `line`, when `head` says that key was given twice and it is written without escapes.
fn duplicate_key_column(head: &str, line: &str) -> Option<usize> {
    let key = head.strip_prefix("duplicate key `")?.strip_suffix('`')?;
    let quoted = format!("\"{key}\"");
    let mut found = line
        .match_indices(&quoted)
        .filter(|&(i, _)| line[i + quoted.len()..].trim_start().starts_with(':'));
    found.next()?;
    let (i, _) = found.next()?;
    Some(line[..i].chars().count() + 1)
}

/// A JSON object whose keys are all different: a key given twice is an error, not "the last
/// one wins" (two readers of one line must not see two different events).
struct Object(serde_json::Map<String, Json>);

impl<'de> serde::Deserialize<'de> for Object {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Object, D::Error> {
        struct Keys;
        impl<'de> serde::de::Visitor<'de> for Keys {
            type Value = Object;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Object, A::Error> {
                let mut obj = serde_json::Map::new();
                while let Some((k, v)) = map.next_entry::<String, Json>()? {
                    if obj.contains_key(&k) {
                        return Err(serde::de::Error::custom(format_args!(
                            "duplicate key `{k}`"
                        )));
                    }
                    obj.insert(k, v);
                }
                Ok(Object(obj))
            }
        }
        d.deserialize_map(Keys)
    }
}

/// `sd.<id>.<param>` with non-empty id and param.
fn is_sd_key(key: &str) -> bool {
    key.strip_prefix("sd.")
        .and_then(|rest| rest.split_once('.'))
        .is_some_and(|(id, param)| !id.is_empty() && !param.is_empty())
}

/// Strings as they are; whole numbers (a process id written as a number) as their digits.
/// Not fractions, which JSON cannot keep as written (`1.50` reads `1.5`), nor numbers too large
/// for 64 bits, nor booleans: those are errors, so a value never changes its text silently.
fn scalar_text(v: &Json) -> Option<String> {
    match v {
        Json::String(s) => Some(s.clone()),
        Json::Number(n) if n.is_i64() || n.is_u64() => Some(n.to_string()),
        _ => None,
    }
}

/// An RFC 3339 time value.
fn time_value(key: &str, v: &Json) -> Result<Timestamp, Malformed> {
    match v.as_str() {
        Some(s) => Timestamp::parse_rfc3339(s).ok_or_else(|| {
            let expected = if chrono::DateTime::parse_from_rfc3339(s.trim()).is_ok() {
                "a time between the years 1678 and 2261 (64-bit nanoseconds)"
            } else {
                "an RFC 3339 time string"
            };
            bad(key, expected, v)
        }),
        None => Err(bad(key, "an RFC 3339 time string", v)),
    }
}

/// A JSON value converted to the field's type.
fn typed(key: &str, ty: ValueType, v: &Json) -> Result<Value, Malformed> {
    let out = match ty {
        // Process ids and the like are sometimes written as numbers: keep their digits.
        ValueType::Str => scalar_text(v).map(|s| Value::str(&s)),
        ValueType::Int => v.as_i64().map(Value::Int),
        ValueType::Float => v.as_f64().map(Value::Float),
        ValueType::Bool => v.as_bool().map(Value::Bool),
        ValueType::Ip => v
            .as_str()
            .and_then(|s| s.trim().parse().ok())
            .map(Value::ip),
        ValueType::Time => v
            .as_str()
            .and_then(Timestamp::parse_rfc3339)
            .map(Value::Time),
        ValueType::Duration => duration(v).map(Value::Duration),
    };
    out.ok_or_else(|| bad(key, expected(ty), v))
}

/// `"5s"`, `"1h30m"` or a non-negative number of seconds.
fn duration(v: &Json) -> Option<Duration> {
    match v {
        Json::String(s) => Duration::parse(s).ok(),
        Json::Number(n) => {
            if let Some(i) = n.as_i64() {
                (i >= 0)
                    .then(|| Duration::from_secs(i))
                    .filter(|d| d.0 / 1_000_000_000 == i)
            } else {
                let secs = n.as_f64()?;
                let nanos = secs * 1e9;
                (secs.is_finite() && secs >= 0.0 && nanos < i64::MAX as f64)
                    .then(|| Duration(nanos.round() as i64))
            }
        }
        _ => None,
    }
}

/// What a type accepts, for error messages.
fn expected(ty: ValueType) -> &'static str {
    match ty {
        ValueType::Str => "a string (or a whole number of at most 64 bits)",
        ValueType::Int => "an integer",
        ValueType::Float => "a number",
        ValueType::Bool => "true or false",
        ValueType::Ip => "an IP address string",
        ValueType::Time => "an RFC 3339 time string",
        ValueType::Duration => "a duration (\"5s\") or a number of seconds",
    }
}

/// A [`Malformed::BadValue`] with the value's JSON text, shortened.
fn bad(key: &str, expected: &'static str, got: &Json) -> Malformed {
    let mut text = got.to_string();
    if text.len() > 80 {
        let mut cut = 77;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push_str("...");
    }
    Malformed::BadValue {
        field: key.to_string(),
        expected,
        got: text,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn a_key_given_twice_is_an_error() {
        let e = parse_json_event(
            r#"{"source":"syslog","time":"2026-01-01T00:00:00Z","app":"sshd","app":"cron"}"#,
        )
        .unwrap_err();
        // At the second `"app"`, where the line must be edited.
        assert!(
            e.to_string().contains("duplicate key `app` at column 63"),
            "{e}"
        );
        assert!(!e.to_string().contains("line"), "{e}");
        let e = parse_json_event(
            r#"{"source":"syslog","time":"2026-01-01T00:00:00Z","app":"sshd","matches":[]}"#,
        )
        .unwrap_err();
        assert!(e.to_string().contains("without `--rules`"), "{e}");
        let e = parse_json_event(r#"["source"]"#).unwrap_err();
        assert!(e.to_string().contains("expected a JSON object"), "{e}");
    }

    /// A protocol this agent names otherwise (Zeek's `sctp`, an upper-case name, a number)
    /// is still an event: only a rule's test of it is warned of (it never matches what the
    /// agent makes).
    #[test]
    fn a_flow_event_may_name_its_protocol_its_own_way() {
        for proto in ["sctp", "TCP", "6", "unknown_transport"] {
            let line = format!(
                r#"{{"source":"flow","time":"2026-01-01T00:00:00Z","kind":"flow_start","proto":"{proto}"}}"#
            );
            let e = parse_json_event(&line).unwrap();
            assert_eq!(e.get(Field::Proto), Some(&Value::str(proto)));
        }
    }

    #[test]
    fn flow_event_typed() {
        let e = parse_json_event(
            r#"{"source":"flow","time":"2026-01-01T00:00:00Z","kind":"flow_start","src":"10.0.0.1","dport":22,"duration":"5s","orig_bytes":1200}"#,
        )
        .unwrap();
        assert_eq!(e.source, Source::Flow);
        assert_eq!(
            e.time,
            Timestamp::parse_rfc3339("2026-01-01T00:00:00Z").unwrap()
        );
        assert_eq!(e.arrival, e.time);
        assert_eq!(
            e.get(Field::Src),
            Some(&Value::Ip("10.0.0.1".parse().unwrap()))
        );
        assert_eq!(e.get(Field::Dport), Some(&Value::Int(22)));
        assert_eq!(e.get(Field::Kind), Some(&Value::str("flow_start")));
        assert_eq!(
            e.get(Field::Duration),
            Some(&Value::Duration(Duration::from_secs(5)))
        );
        let e =
            parse_json_event(r#"{"source":"flow","time":"2026-01-01T00:00:00Z","duration":1.5}"#)
                .unwrap();
        assert_eq!(
            e.get(Field::Duration),
            Some(&Value::Duration(Duration::from_millis(1500)))
        );
    }

    #[test]
    fn syslog_event_with_sd_and_arrival() {
        let e = parse_json_event(
            r#"{"source":"syslog","time":"2026-01-01T00:00:00Z","arrival":"2026-01-01T00:00:02+00:00","host":"web-1","app":"sshd","msg":"hi","severity":6,"peer":"::1","sd.origin.ip":"10.0.0.9","procid":42}"#,
        )
        .unwrap();
        assert_eq!(
            e.arrival,
            Timestamp::parse_rfc3339("2026-01-01T00:00:02Z").unwrap()
        );
        assert_eq!(e.get(Field::Host), Some(&Value::str("web-1")));
        assert_eq!(e.get(Field::Procid), Some(&Value::str("42")));
        assert_eq!(e.get(Field::Peer), Some(&Value::Ip("::1".parse().unwrap())));
        assert_eq!(
            e.get_key(&FieldKey::from_name("sd.origin.ip")),
            Some(&Value::str("10.0.0.9"))
        );
    }

    #[test]
    fn values_no_sender_could_produce_are_refused() {
        let base = r#""source":"flow","time":"2024-01-01T00:00:00Z""#;
        for (field, bad_value) in [
            ("sport", "70000"),
            ("dport", "-1"),
            ("orig_bytes", "-5"),
            ("vlan", "5000"),
            ("state", "\"XYZ\""),
            ("kind", "\"bogus_kind\""),
        ] {
            let line = format!("{{{base},\"{field}\":{bad_value}}}");
            let e = parse_json_event(&line);
            assert!(
                matches!(&e, Err(Malformed::BadValue { field: f, .. }) if f == field),
                "{line}: {e:?}"
            );
        }
        let ok = format!(
            r#"{{{base},"sport":0,"dport":65535,"vlan":4095,"state":"RSTOS0","kind":"attempt_failed","orig_bytes":0}}"#
        );
        assert!(parse_json_event(&ok).is_ok());
        let e =
            parse_json_event(r#"{"source":"syslog","time":"2024-01-01T00:00:00Z","severity":9}"#);
        assert!(matches!(e, Err(Malformed::BadValue { .. })), "{e:?}");
    }

    #[test]
    fn errors_name_the_key() {
        let cases = [
            (r#"{"time":"2026-01-01T00:00:00Z"}"#, "source"),
            (r#"{"source":"flow"}"#, "time"),
            (r#"{"source":"flow","time":"yesterday"}"#, "time"),
            (
                r#"{"source":"flow","time":"2026-01-01T00:00:00Z","dprot":22}"#,
                "dprot",
            ),
            (
                r#"{"source":"flow","time":"2026-01-01T00:00:00Z","src":"10.0.0.300"}"#,
                "src",
            ),
            (
                r#"{"source":"flow","time":"2026-01-01T00:00:00Z","dport":"22"}"#,
                "dport",
            ),
            (
                r#"{"source":"flow","time":"2026-01-01T00:00:00Z","msg":"x"}"#,
                "msg",
            ),
            (
                r#"{"source":"flow","time":"2026-01-01T00:00:00Z","sd.a.b":"x"}"#,
                "sd.a.b",
            ),
            (
                r#"{"source":"flow","time":"2026-01-01T00:00:00Z","duration":-1}"#,
                "duration",
            ),
            // A string field takes whole numbers as their digits, nothing that would read
            // differently from what was written.
            (
                r#"{"source":"syslog","time":"2026-01-01T00:00:00Z","host":true}"#,
                "host",
            ),
            (
                r#"{"source":"syslog","time":"2026-01-01T00:00:00Z","msg":1.50}"#,
                "msg",
            ),
            (
                r#"{"source":"syslog","time":"2026-01-01T00:00:00Z","procid":123456789012345678901234567890}"#,
                "procid",
            ),
            (
                r#"{"source":"flow","time":"9999-01-01T00:00:00Z"}"#,
                "1678 and 2261",
            ),
        ];
        for (line, key) in cases {
            let err = parse_json_event(line).unwrap_err().to_string();
            assert!(err.contains(key), "{line}: {err}");
        }
        assert!(matches!(parse_json_event("[1,2]"), Err(Malformed::Json(_))));
        assert!(matches!(parse_json_event("{"), Err(Malformed::Json(_))));
    }
}
