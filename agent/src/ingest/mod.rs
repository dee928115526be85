//! Ingest: turning bytes from sockets, files and captures into events.
//!
//! Everything here is pure parsing (no sockets, no clock of its own): the syslog parser
//! ([`syslog`]), JSON-lines events for rule tests ([`jsonl`]) and the line reader for replay
//! inputs ([`input`]). Bad input never panics and is never dropped silently: it becomes a
//! [`Malformed`] value that the caller counts and sets aside.

pub mod dedup;
pub mod input;
pub mod jsonl;
pub mod syslog;

/// Why an input line did not become an event; counted and set aside, never fatal.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    /// Nothing but whitespace (or NULs) after trimming.
    #[error("empty message")]
    Empty,
    /// Neither an RFC 5424 header, nor an RFC 3164 timestamp, nor a PRI: not syslog.
    #[error("not a syslog message (no PRI and no RFC 3164/5424 header)")]
    NotSyslog,
    /// A PRI with nothing after it.
    #[error("a PRI and no message after it")]
    PriOnly,
    /// The stamp is a valid date but outside the representable range (1677..2262).
    #[error("timestamp out of range: {0}")]
    TimeOutOfRange(String),
    /// The line was longer than the reader's cap; its content was discarded.
    #[error("line longer than {limit} bytes")]
    Oversized {
        /// The cap in bytes.
        limit: usize,
    },
    /// A JSON event line that is not a JSON object.
    #[error("invalid JSON event: {0}")]
    Json(String),
    /// A JSON event without a required key.
    #[error("JSON event has no `{0}`")]
    Missing(&'static str),
    /// A JSON event key that is neither a registry field nor `sd.*` (syslog), and the
    /// nearest field of the event's source when one is close (a typo).
    #[error("unknown field `{field}`{}", near.map(|n| format!(" (did you mean `{n}`?)")).unwrap_or_default())]
    UnknownField {
        /// The key as written.
        field: String,
        /// The field of that source it is nearest to, if any is near.
        near: Option<&'static str>,
    },
    /// A registry field that events of this source do not carry.
    #[error("field `{field}` does not belong to {kind} events")]
    WrongSource {
        /// The field name.
        field: String,
        /// The event's source keyword.
        kind: &'static str,
    },
    /// A JSON value that does not fit the field's type.
    #[error("field `{field}`: expected {expected}, got {got}")]
    BadValue {
        /// The field name.
        field: String,
        /// What the field's type accepts.
        expected: &'static str,
        /// The offending value, as JSON text (shortened).
        got: String,
    },
}
