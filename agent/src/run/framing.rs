//! TCP syslog framing (RFC 6587), detected per frame.
//!
//! - Octet counting: `LEN SP MSG`, where LEN is 1–10 ASCII digits without a leading zero
//!   (RFC 6587); a count written with leading zeros (`0049 `, or `0 ` for an empty frame),
//!   as some senders pad it, is read as one when a PRI (`<`) follows it, so the frames after
//!   it are not run together into one line.
//! - Non-transparent framing: the message ends at LF (a CR before it is trimmed by the parser)
//!   or NUL.
//!
//! A frame that starts with a digit and continues with digits and a space is octet-counted
//! when a PRI (`<`) follows the count, or the connection counted frames before (except `1 `:
//! no syslog message is one byte long, and `1 ` starts an RFC 5424 line sent without PRI);
//! anything else is delimiter-framed, so a line that begins with a number (`200 OK`) does
//! not swallow the messages after it; but a count without PRI on a connection that has not
//! counted yet frames its message when that message holds no line end and is followed right
//! away by another count and a PRI, or by another count whose message (all of it come) holds
//! no line end either, line ends between frames skipped (an octet-counting sender whose
//! first message, or every message, has no PRI: a log file's lines sent octet-counted).
//! A frame longer than the maximum message size is
//! skipped: a delimited frame up to its next delimiter, an octet-counted frame by its
//! declared length.
//!
//! On a counted connection, bytes where a frame should begin that hold no count and no PRI
//! (a count that was wrong: a sender that counted characters, not bytes; a stray partial
//! line) are dropped up to the next count followed by a space and a PRI (`<` and a digit),
//! within the maximum and before any line end, and said ([`Frame::Resynced`]): the frames
//! after them are read on. (Bytes left over that are digits, a message ending in `port 42`
//! counted short, run into the next count and are not found: no verdict may wait for bytes
//! after a frame, or the last message of a burst would wait for the next.)
//!
//! Some streams cannot be framed any more, and [`Frame::Fatal`] tells the caller to close the
//! connection (a syslog sender reconnects and goes on), rather than read the rest of it as
//! one endless line, which would lose everything it sends until the idle timeout:
//! - a length that is absurd: more than 16 times the maximum;
//! - on a connection that has sent octet-counted frames (whose senders never send a
//!   delimiter), a delimited frame longer than the maximum: the counting was lost;
//! - a line longer than 16 times the maximum (a length of 11 digits, say, followed by
//!   octet-counted frames that never end it).
//!
//! Each verdict depends on the stream only, never on how it was cut into reads.
//!
//! The framer never looks for frames inside a message it framed: text a message carries
//! (`... 5 <0>x`) is never taken for a frame of its own. Only bytes that are no frame (after
//! a counted frame, where the next should begin) are searched for one.

use bytes::{Buf, BytesMut};

/// Why a stream whose lines never end is closed.
const ENDLESS: &str = "no line end in 16 times the maximum";

/// One decoding step's result.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A complete message (without its framing).
    Msg(BytesMut),
    /// A message longer than the maximum was skipped.
    Oversized,
    /// Bytes of a counted connection that were no frame (a count that was wrong, a stray
    /// partial line) were dropped up to the next frame, which is read on.
    Resynced,
    /// The stream cannot be framed any more (why); close the connection.
    Fatal(&'static str),
    /// The stream ended inside a counted frame (`50 <13>...` with fewer bytes): dropped,
    /// cut short (a line's end is its delimiter, but a count says the message goes on).
    Unfinished,
}

/// The framing state of one connection.
#[derive(Debug)]
pub struct Framer {
    max: usize,
    /// Bytes still to discard of an oversized frame.
    skip: usize,
    /// Discarding an oversized delimited frame up to its delimiter.
    skip_to_delim: bool,
    /// Bytes discarded so far while looking for that delimiter.
    skipped: usize,
    /// The connection has sent an octet-counted frame.
    counted: bool,
}

impl Framer {
    /// A framer for messages of at most `max` bytes.
    pub fn new(max: usize) -> Framer {
        Framer {
            max,
            skip: 0,
            skip_to_delim: false,
            skipped: 0,
            counted: false,
        }
    }

    /// The most a frame may declare, or a delimiter search discard, before the stream is
    /// taken for unframeable.
    fn absurd(&self) -> usize {
        self.max.saturating_mul(16)
    }

    /// Whether an octet count whose message begins with `first` frames it: when that
    /// message is syslog (a PRI), or the connection counted frames before. A line-framed
    /// sender's line that merely begins with a number (`200 OK`, a continuation line) is a
    /// line: taken for a count, it would swallow the messages after it. `None` while the
    /// byte that decides has not come (a read that ends right after the count must not
    /// decide otherwise than one that goes on).
    fn counts(&mut self, first: Option<u8>) -> Option<bool> {
        let pri = first? == b'<';
        self.counted |= pri;
        Some(pri || self.counted)
    }

    /// Whether the octet count `buf` starts with (`digits` long, of `len`) frames its message
    /// ([`Framer::counts`]); if the connection has not counted and no PRI follows, it does
    /// when its message holds no line end and another count with a PRI follows right after it
    /// (an octet-counting sender whose first message has no PRI: read as a line, it would
    /// wait for a line end that never comes). `None` while that is not decided.
    fn frames(&mut self, buf: &[u8], digits: usize, len: usize) -> Option<bool> {
        if self.counts(buf.get(digits + 1).copied())? {
            return Some(true);
        }
        if len > self.max {
            return Some(false);
        }
        let end = digits + 1 + len;
        if line_end(&buf[digits + 1..end.min(buf.len())]).is_some() {
            return Some(false);
        }
        // Without a PRI, a count is believed only before a syslog message: one that begins
        // with a stamp (decided on its first bytes, which come before the rest).
        let stamped = match stamp_begins(&buf[digits + 1..end.min(buf.len())]) {
            Some(v) => v,
            // (A whole message too short to tell is no stamp.)
            None if end <= buf.len() => false,
            None => return None,
        };
        let rest = buf.get(end..)?;
        // (A sender of stamped messages may end each counted frame with a line end as well:
        // a separator. After any other message a line end is a line's.)
        let sep = if stamped {
            rest.iter()
                .take_while(|&&b| b == b'\n' || b == b'\r')
                .count()
        } else {
            0
        };
        let rest = &rest[sep..];
        let d = count_digits(rest);
        if d == rest.len() {
            return (d > 10).then_some(false);
        }
        if d == 0 || rest[d] != b' ' {
            return Some(false);
        }
        // A padded count (`012 `) is one only if a PRI follows: wait for the byte that
        // decides, as one read would have shown it (found by the property test below).
        if rest[0] == b'0' && d <= 10 && rest.len() == d + 1 {
            return None;
        }
        let Some((nd, nlen)) = octet_count(rest) else {
            return Some(false);
        };
        // The next count frames its message as well: a PRI follows it, or (this message
        // stamped) that message begins with a stamp too and holds no line end, all of it come
        // (a sender whose messages have no PRI at all, a log file's lines sent
        // octet-counted: read as lines, each would keep its count and run into the next).
        // A line end in what has come of it decides at once.
        let pri = *rest.get(nd + 1)? == b'<';
        if pri {
            self.counted = true;
            return Some(true);
        }
        if !stamped || nlen > self.max {
            return Some(false);
        }
        let next = &rest[nd + 1..];
        let came = &next[..nlen.min(next.len())];
        if line_end(came).is_some() {
            return Some(false);
        }
        match stamp_begins(came) {
            Some(true) => {}
            Some(false) => return Some(false),
            None if next.len() >= nlen => return Some(false),
            None => return None,
        }
        if next.len() < nlen {
            return None;
        }
        self.counted = true;
        Some(true)
    }

    /// Takes the next frame out of `buf`; `None` when more bytes are needed.
    pub fn decode(&mut self, buf: &mut BytesMut) -> Option<Frame> {
        loop {
            // (An oversized frame was counted when it was seen: its rest is only dropped, so a
            // sender that never ends it is counted all the same.)
            if self.skip > 0 {
                let n = self.skip.min(buf.len());
                buf.advance(n);
                self.skip -= n;
                if self.skip > 0 {
                    return None;
                }
                continue;
            }
            if self.skip_to_delim {
                // (However the stream was cut into reads, the line is judged by its length up
                // to its end: the same verdict as when it came in one read.)
                let delim = line_end(buf);
                self.skipped = self.skipped.saturating_add(delim.unwrap_or(buf.len()));
                if self.skipped > self.absurd() {
                    return Some(Frame::Fatal(ENDLESS));
                }
                match delim {
                    Some(i) => {
                        buf.advance(i + 1);
                        self.skip_to_delim = false;
                        continue;
                    }
                    None => {
                        buf.clear();
                        return None;
                    }
                }
            }
            if skip_separators(buf) {
                return None;
            }
            if buf[0].is_ascii_digit() {
                let digits = count_digits(buf);
                if digits == buf.len() {
                    // Digits up to the end of what we have: wait for more (bounded by 10).
                    if digits <= 10 {
                        return None;
                    }
                } else if buf[0] == b'0'
                    && digits <= 10
                    && buf.len() == digits + 1
                    && buf[digits] == b' '
                {
                    // A padded count (`0049 `) is one only if a PRI follows: wait for the byte
                    // that decides, as one read would have shown it.
                    return None;
                } else if let Some((digits, len)) = octet_count(buf)
                    && self.frames(buf, digits, len)?
                {
                    if len > self.max {
                        if len > self.absurd() {
                            return Some(Frame::Fatal("a frame length over 16 times the maximum"));
                        }
                        buf.advance(digits + 1);
                        self.skip = len;
                        return Some(Frame::Oversized);
                    }
                    if buf.len() < digits + 1 + len {
                        buf.reserve(digits + 1 + len - buf.len());
                        return None;
                    }
                    buf.advance(digits + 1);
                    if len == 0 {
                        // `0 `: an empty frame, no message.
                        continue;
                    }
                    return Some(Frame::Msg(buf.split_to(len)));
                }
            }
            if self.counted && !pri_begins(buf)? {
                // No count where a frame should begin (and no PRI: a line of a sender that
                // mixes framings, read whole below): a count that was wrong (a sender that
                // counted characters, not bytes) or a stray partial line. The next frame is
                // found (a count and a PRI) and read on, rather than the rest of the stream
                // read as one line that never ends.
                match resync(buf, self.max) {
                    Resync::At(at) => {
                        buf.advance(at);
                        return Some(Frame::Resynced);
                    }
                    Resync::Wait => return None,
                    Resync::None => {}
                }
            }
            let delim = line_end(buf);
            let line = delim.unwrap_or(buf.len());
            // The CR of a CRLF ending is the line end's, not the message's: a message of
            // `max` bytes is whole with either ending (a CR last in the read may be one).
            let line = if line > 0 && buf.get(line - 1) == Some(&b'\r') {
                line - 1
            } else {
                line
            };
            if line > self.max && self.counted {
                // An octet-counting sender never sends a line end: past a frame it could not
                // count, the rest would be one endless line.
                return Some(Frame::Fatal(
                    "an uncounted frame over the maximum after octet-counted ones",
                ));
            }
            if line > self.max {
                // Counted now, skipped (or found endless) by the skipping above, whether its
                // end is in this read or not.
                self.skip_to_delim = true;
                self.skipped = 0;
                return Some(Frame::Oversized);
            }
            match delim {
                Some(i) => {
                    let msg = buf.split_to(i);
                    buf.advance(1);
                    return Some(Frame::Msg(msg));
                }
                None => return None,
            }
        }
    }

    /// At end of stream: what is left in `buf` (a last message without its delimiter, as
    /// `logger` and `nc` send it), one frame per call, `None` once nothing is left (call it
    /// until then: counted frames whose verdict waited for the bytes after them are framed
    /// now, one by one).
    pub fn finish(&mut self, buf: &mut BytesMut) -> Option<Frame> {
        if self.skip > 0 || self.skip_to_delim {
            // Counted when it began.
            buf.clear();
            self.skip = 0;
            self.skip_to_delim = false;
            return None;
        }
        if skip_separators(buf) {
            return None;
        }
        // A count without PRI on a connection that has not counted, whose verdict waited for
        // what would come after it (the first frames of a sender whose messages have no
        // PRI): decided on what came, as [`Framer::frames`] decides (it counts the connection).
        if !self.counted
            && let Some((digits, len)) = octet_count(buf)
        {
            let _ = self.frames(buf, digits, len);
        }
        if self.counted
            && let Some(fr) = self.decode(buf)
        {
            return Some(fr);
        }
        if skip_separators(buf) {
            return None;
        }
        if buf.len() > self.max {
            buf.clear();
            return Some(Frame::Oversized);
        }
        // (A count on a connection that counts, or one a PRI follows: a last line that
        // merely begins with a number, `200 OK`, is a line.)
        if let Some((digits, len)) = octet_count(buf)
            && buf.len() < digits + 1 + len
            && (self.counted || buf.get(digits + 1) == Some(&b'<'))
        {
            buf.clear();
            return Some(Frame::Unfinished);
        }
        Some(Frame::Msg(buf.split()))
    }
}

/// The octet count `b` starts with, if it starts with one: `LEN SP` with LEN 1–10 ASCII digits;
/// the number of digits and LEN. A count with a leading zero (`0049 `, `0 `), which RFC 6587
/// does not allow but padding senders write, is one only when a PRI (`<`) follows it (or, for
/// an empty frame, the next count). `1 ` is
/// not one: no syslog message is one byte long, and `1 ` is the version of an RFC 5424 line
/// sent without PRI (`1 2020-05-22T14:59:09Z host app ...`), delimited.
pub fn octet_count(b: &[u8]) -> Option<(usize, usize)> {
    let digits = count_digits(b);
    if !(1..=10).contains(&digits) || b.get(digits) != Some(&b' ') {
        return None;
    }
    if b[0] == b'0' {
        // Padded: a PRI must follow, or, after an empty frame, the next count.
        let empty = b[..digits].iter().all(|&d| d == b'0');
        match b.get(digits + 1) {
            Some(b'<') => {}
            Some(d) if empty && d.is_ascii_digit() => {}
            _ => return None,
        }
    }
    if &b[..digits] == b"1" {
        return None;
    }
    let len = std::str::from_utf8(&b[..digits]).ok()?.parse().ok()?;
    Some((digits, len))
}

/// Where the next frame begins in bytes of a counted connection that hold no frame.
#[derive(Debug, PartialEq, Eq)]
enum Resync {
    /// At this offset.
    At(usize),
    /// Not decided until more bytes come (a count or its PRI cut by the read's end).
    Wait,
    /// Nowhere before the line's end (a line, as a mixed sender sends it) or within the
    /// maximum.
    None,
}

/// Where the next frame begins in `b`, bytes of a counted connection where a frame should
/// begin but none does: the first count (after a byte that is not a digit) followed by a
/// space and a PRI (`<` and a digit), within `max` bytes and before any line end. Decided
/// only on bytes that are there, so the verdict does not depend on how reads cut the stream.
fn resync(b: &[u8], max: usize) -> Resync {
    let end = line_end(b).unwrap_or(b.len()).min(max.saturating_add(1));
    for at in 1..end {
        if !b[at].is_ascii_digit() || b[at - 1].is_ascii_digit() {
            continue;
        }
        let d = count_digits(&b[at..]);
        if d > 10 {
            continue;
        }
        // The count, a space, `<` and a digit; cut by the end of what has come, it may still
        // be one.
        match (b.get(at + d), b.get(at + d + 1), b.get(at + d + 2)) {
            (None, ..) | (Some(b' '), None, _) | (Some(b' '), Some(b'<'), None) => {
                return Resync::Wait;
            }
            (Some(b' '), Some(b'<'), Some(x))
                if x.is_ascii_digit() && octet_count(&b[at..]).is_some() =>
            {
                return Resync::At(at);
            }
            _ => {}
        }
    }
    Resync::None
}

/// Whether `b` begins with a PRI (`<`, one to three digits, `>`); `None` while the bytes that
/// decide have not come.
fn pri_begins(b: &[u8]) -> Option<bool> {
    if b.first() != Some(&b'<') {
        return Some(false);
    }
    let digits = b[1..]
        .iter()
        .take(4)
        .take_while(|x| x.is_ascii_digit())
        .count();
    match b.get(1 + digits) {
        None if digits < 4 => None,
        Some(b'>') => Some((1..=3).contains(&digits)),
        _ => Some(false),
    }
}

/// Whether `b` begins with a syslog stamp: RFC 3164's (`Dec 10 06:55:46`), an RFC 3339 date
/// (`2026-12-06`), or RFC 5424's version and stamp without PRI (`1 2026-...`, `1 -`); `None`
/// while the bytes that decide have not come (at most 15).
fn stamp_begins(b: &[u8]) -> Option<bool> {
    const MONTHS: [&[u8]; 12] = [
        b"Jan", b"Feb", b"Mar", b"Apr", b"May", b"Jun", b"Jul", b"Aug", b"Sep", b"Oct", b"Nov",
        b"Dec",
    ];
    // `d` a digit, `D` a digit or a space, `a` a letter, anything else itself.
    let fits = |pat: &[u8]| -> Option<bool> {
        for (i, &p) in pat.iter().enumerate() {
            let c = *b.get(i)?;
            let ok = match p {
                b'd' => c.is_ascii_digit(),
                b'D' => c.is_ascii_digit() || c == b' ',
                b'a' => c.is_ascii_alphabetic(),
                x => c == x,
            };
            if !ok {
                return Some(false);
            }
        }
        Some(true)
    };
    let bsd = fits(b"aaa Dd dd:dd:dd").map(|ok| ok && MONTHS.contains(&&b[..3]));
    let verdicts = [
        bsd,
        fits(b"dddd-dd-dd"),
        fits(b"1 dddd-dd-dd"),
        fits(b"1 - "),
    ];
    if verdicts.contains(&Some(true)) {
        Some(true)
    } else if verdicts.iter().all(|v| *v == Some(false)) {
        Some(false)
    } else {
        None
    }
}

/// The digits `b` begins with, counted up to 11: one more than a count may have, so a
/// longer run of digits is told from a count.
fn count_digits(b: &[u8]) -> usize {
    b.iter().take(11).take_while(|x| x.is_ascii_digit()).count()
}

/// Where the line that `b` begins ends: its LF or NUL.
fn line_end(b: &[u8]) -> Option<usize> {
    b.iter().position(|&x| x == b'\n' || x == 0)
}

/// Drops blank separators between frames (a trailing LF after an octet-counted frame, CRLF,
/// NUL padding): they are not messages. Returns whether nothing is left.
fn skip_separators(buf: &mut BytesMut) -> bool {
    let lead = buf
        .iter()
        .take_while(|&&b| b == b'\n' || b == b'\r' || b == 0 || b == b' ')
        .count();
    buf.advance(lead);
    buf.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frames(max: usize, chunks: &[&[u8]]) -> Vec<Result<String, &'static str>> {
        let mut f = Framer::new(max);
        let mut buf = BytesMut::new();
        let mut out = Vec::new();
        let push = |fr: Frame, out: &mut Vec<_>| match fr {
            Frame::Msg(m) => out.push(Ok(String::from_utf8_lossy(&m).into_owned())),
            Frame::Oversized => out.push(Err("oversized")),
            Frame::Fatal(_) => out.push(Err("fatal")),
            Frame::Resynced => out.push(Err("resynced")),
            Frame::Unfinished => out.push(Err("unfinished")),
        };
        for c in chunks {
            buf.extend_from_slice(c);
            while let Some(fr) = f.decode(&mut buf) {
                let fatal = matches!(fr, Frame::Fatal(_));
                push(fr, &mut out);
                if fatal {
                    return out;
                }
            }
        }
        while let Some(fr) = f.finish(&mut buf) {
            let fatal = matches!(fr, Frame::Fatal(_));
            push(fr, &mut out);
            if fatal {
                break;
            }
        }
        out
    }

    /// A sender that closes inside a counted frame cut it short: dropped as unfinished, not
    /// read as a line (it was counted `malformed`, its count read as its text); a line
    /// without its end is still a message.
    #[test]
    fn a_counted_frame_cut_short_by_the_close_is_unfinished() {
        assert_eq!(
            frames(1024, &[b"9 <13>x y z50 <13>1 - h hb - - - partial"]),
            vec![Ok("<13>x y z".into()), Err("unfinished")]
        );
        assert_eq!(
            frames(1024, &[b"<13>no line end"]),
            vec![Ok("<13>no line end".into())]
        );
        assert_eq!(
            frames(1024, &[b"50 <13>1 - h hb - - - partial"]),
            vec![Err("unfinished")]
        );
        assert_eq!(
            frames(1024, &[b"200 OK done"]),
            vec![Ok("200 OK done".into())]
        );
    }

    #[test]
    fn both_framings_mixed_and_split() {
        let got = frames(100, &[b"8 <1>hello<13>a b\n3 ", b"xyz\0<14>last"]);
        assert_eq!(
            got,
            vec![
                Ok("<1>hello".into()),
                Ok("<13>a b".into()),
                // (Once a connection counted, a count frames what follows it, PRI or not.)
                Ok("xyz".into()),
                Ok("<14>last".into())
            ]
        );
        // Split inside the length and inside the body.
        let got = frames(100, &[b"1", b"4 <1>hello", b" worl", b"d\n"]);
        assert_eq!(got, vec![Ok("<1>hello world".into())]);
    }

    /// A line-framed sender's line that begins with a number and a space (a continuation
    /// line, `200 OK`) is a line, not a count swallowing the messages after it, however the
    /// reads cut the stream.
    #[test]
    fn a_line_beginning_with_a_number_is_not_a_count() {
        let input = b"<13>Mar  1 10:01:20 h app: response follows\n200 OK from upstream\n<13>Mar  1 10:01:21 h app: next\n12345 not syslog\n<13>Mar  1 10:01:22 h app: last\n";
        let want = vec![
            Ok("<13>Mar  1 10:01:20 h app: response follows".to_string()),
            Ok("200 OK from upstream".to_string()),
            Ok("<13>Mar  1 10:01:21 h app: next".to_string()),
            Ok("12345 not syslog".to_string()),
            Ok("<13>Mar  1 10:01:22 h app: last".to_string()),
        ];
        for size in [1, 2, 4, 7, 4096] {
            let pieces: Vec<&[u8]> = input.chunks(size).collect();
            assert_eq!(frames(1000, &pieces), want, "pieces of {size}");
        }
    }

    /// Whether a sender counts octets is read from its first frame's first message byte (a
    /// PRI): a read that ends right after the count waits for that byte, so the verdict on a
    /// later long line does not depend on where the reads were cut (the fuzzer's find).
    #[test]
    fn a_count_cut_from_its_message_decides_as_one_read_would() {
        let stream: &[u8] = b"20 <13>xxxxxxxxxxxxxxxxxyz line far longer than the maximum\n";
        let whole = frames(16, &[stream]);
        assert_eq!(whole, vec![Err("oversized"), Err("fatal")]);
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(frames(16, &bytes), whole);
        assert_eq!(frames(16, &[&stream[..3], &stream[3..]]), whole);
    }

    /// Octet-counted frames, each with its length.
    fn counted(msgs: &[String]) -> Vec<u8> {
        msgs.iter()
            .flat_map(|m| format!("{} {m}", m.len()).into_bytes())
            .collect()
    }

    #[test]
    fn a_stream_that_lost_its_framing_is_closed_not_read_as_one_endless_line() {
        let msgs: Vec<String> = (0..50)
            .map(|i| format!("<13>Dec 10 06:55:46 h app: port {i}2"))
            .collect();
        let frames_ok: Vec<Result<String, &str>> = msgs.iter().map(|m| Ok(m.clone())).collect();
        // A length of 11 digits, then counted frames that never end its line: skipped,
        // then closed once 16 times the maximum went by, however the reads cut it.
        let mut input = b"99999999999 x".to_vec();
        input.extend(counted(&msgs));
        for size in [1, 7, 4096] {
            let pieces: Vec<&[u8]> = input.chunks(size).collect();
            let want = vec![Err("oversized"), Err("fatal")];
            assert_eq!(frames(100, &pieces), want, "pieces of {size}");
        }
        // Counted frames, then bytes it cannot count (a stray partial line): those before
        // are delivered, the stray bytes dropped and said, and the frames after them read on,
        // however the reads cut the stream.
        let mut input = counted(&msgs[..3]);
        input.extend_from_slice(b"stray 12 text");
        input.extend(counted(&msgs));
        let mut want = frames_ok[..3].to_vec();
        want.push(Err("resynced"));
        want.extend(frames_ok.iter().cloned());
        for size in [1, 2, 5, 4096] {
            let pieces: Vec<&[u8]> = input.chunks(size).collect();
            assert_eq!(frames(100, &pieces), want, "pieces of {size}");
        }
        // A line with a PRI after counted frames (a sender mixing framings) is a line, whole,
        // whatever it holds that looks like a count.
        let mut input = counted(&msgs[..1]);
        input.extend_from_slice(b"<13>Mar  1 h app: took 10 <20 ms today\n");
        input.extend(counted(&msgs[1..2]));
        assert_eq!(
            frames(100, &[&input]),
            vec![
                frames_ok[0].clone(),
                Ok("<13>Mar  1 h app: took 10 <20 ms today".into()),
                frames_ok[1].clone()
            ]
        );
        // Left over bytes that begin with `<` but no PRI (`</E>`, the tail of a message whose
        // characters were counted): resynced like any other.
        let bad = "<13>Dec 10 06:55:46 h app: üüüü <E>x</E>";
        let mut input = format!("{} {bad}", bad.chars().count()).into_bytes();
        input.extend(counted(&msgs[..3]));
        for size in [1, 3, 4096] {
            let pieces: Vec<&[u8]> = input.chunks(size).collect();
            let got = frames(200, &pieces);
            assert_eq!(got.len(), 5, "{got:?}");
            assert_eq!(got[1], Err("resynced"), "{got:?}");
            assert_eq!(&got[2..], &frames_ok[..3], "{got:?}");
        }
        // A count short by the bytes of a character counted as one (`ß` is two bytes): that
        // frame is cut, its last bytes dropped, and the next frames read on.
        let bad = "<13>Dec 10 06:55:46 h app: Übergröße";
        let mut input = format!("{} {bad}", bad.chars().count()).into_bytes();
        input.extend(counted(&msgs[..2]));
        let got = frames(100, &[&input]);
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!(got[1], Err("resynced"), "{got:?}");
        assert_eq!(&got[2..], &frames_ok[..2], "{got:?}");
        // Stray bytes longer than the maximum with no frame in them: closed, as before.
        let mut input = counted(&msgs[..1]);
        input.extend_from_slice(&[b'x'; 150]);
        input.extend(counted(&msgs));
        assert_eq!(
            frames(100, &[&input]),
            vec![frames_ok[0].clone(), Err("fatal")]
        );
        // An oversized line that never ends: skipped, then closed after 16 times the maximum.
        let endless = vec![b'a'; 100 * 17 + 50];
        let pieces: Vec<&[u8]> = endless.chunks(64).collect();
        assert_eq!(frames(100, &pieces), vec![Err("oversized"), Err("fatal")]);
        // Never a frame inside a message: text that looks like one stays in its line, whole
        // or unterminated, and a line may start with a long number.
        for text in [
            &b"<13>host app: user said 6 <0>pwn"[..],
            b"<13>host app: user said 6 <0>pwn\n",
            b"1764176889698 x 4 <1>a2 <b\n",
        ] {
            let got = frames(4096, &[text]);
            assert_eq!(got.len(), 1, "{got:?}");
            assert!(got[0].is_ok(), "{got:?}");
        }
    }

    /// A message of the maximum size is whole with a CRLF ending as with an LF one, however
    /// the reads cut it (an audit found CRLF counted toward the size); one byte more is not.
    #[test]
    fn a_crlf_ending_is_not_part_of_the_message() {
        for cut in 1..13 {
            let stream = b"0123456789\r\n0123456789\n";
            let (a, b) = stream.split_at(cut);
            let got = frames(10, &[a, b]);
            assert_eq!(got.len(), 2, "{cut}: {got:?}");
            assert!(
                got.iter()
                    .all(|m| m.as_ref().is_ok_and(|m| m.trim_end() == "0123456789")),
                "{cut}: {got:?}"
            );
        }
        assert_eq!(frames(10, &[b"0123456789X\r\n"]), [Err("oversized")]);
    }

    proptest::proptest! {
        /// Whatever the stream (pieces that look like counts, PRIs, digits, spaces, line ends
        /// and text, in any order) and however reads cut it, the frames are those of one
        /// read, and none is longer than the maximum.
        #[test]
        fn frames_do_not_depend_on_how_reads_cut_the_stream(
            parts in proptest::collection::vec(0usize..12, 0..40),
            cuts in proptest::collection::vec(1usize..9, 1..8),
            max in 8usize..40,
        ) {
            const PIECES: [&[u8]; 12] = [
                b"12 ", b"<13>", b"5", b"0", b" ", b"\n", b"\0", b"abc", b"7 <1>x", b"1 ",
                b"<", b"99999999999 ",
            ];
            let stream: Vec<u8> = parts.iter().flat_map(|&i| PIECES[i].iter().copied()).collect();
            let whole = frames(max, &[&stream]);
            let mut pieces: Vec<&[u8]> = Vec::new();
            let (mut at, mut k) = (0, 0);
            while at < stream.len() {
                let n = cuts[k % cuts.len()].min(stream.len() - at);
                pieces.push(&stream[at..at + n]);
                at += n;
                k += 1;
            }
            proptest::prop_assert_eq!(&frames(max, &pieces), &whole);
            for m in whole.iter().flatten() {
                proptest::prop_assert!(m.len() <= max, "{:?}", whole);
            }
        }
    }

    /// A sender whose messages have no PRI at all (a log file's lines sent octet-counted),
    /// back to back, each followed by a line end, or one alone: each message framed by its
    /// count (all were lost: the first was read as a line holding the rest), however reads
    /// cut the stream; a line-framed stream whose lines begin with numbers stays lines.
    #[test]
    fn counted_frames_without_any_pri_are_framed_by_their_counts() {
        let msgs: Vec<String> = (0..5)
            .map(|i| format!("Dec 10 06:55:4{i} LabSZ sshd[2420{i}]: Failed password for root"))
            .chain(std::iter::once(
                "1 2026-12-06T08:00:00Z host app - - - five four two four without PRI".to_string(),
            ))
            .collect();
        let want: Vec<Result<String, &str>> = msgs.iter().map(|m| Ok(m.clone())).collect();
        let lf: Vec<u8> = msgs
            .iter()
            .flat_map(|m| format!("{} {m}\n", m.len()).into_bytes())
            .collect();
        for input in [counted(&msgs), lf] {
            for size in [1, 2, 7, 4096] {
                let pieces: Vec<&[u8]> = input.chunks(size).collect();
                assert_eq!(frames(1000, &pieces), want, "pieces of {size}");
            }
        }
        let one = &msgs[0];
        assert_eq!(
            frames(1000, &[format!("{} {one}", one.len()).as_bytes()]),
            [Ok(format!("{} {one}", one.len()))],
            "one alone, nothing after it to tell: a line, as before"
        );
        // Lines of a newline-framed sender that begin with numbers, whose counts land on
        // more numbers (found by a review): lines, at once, however reads cut them.
        for (input, want) in [
            (
                &b"4 of 15 tests failed\nnext line\n200 OK done here\nanother line\n"[..],
                &[
                    "4 of 15 tests failed",
                    "next line",
                    "200 OK done here",
                    "another line",
                ][..],
            ),
            (
                b"3 abc\n5 hello world\nx\n",
                &["3 abc", "5 hello world", "x"],
            ),
            (b"3 abc\n", &["3 abc"]),
            (b"2 ok\n", &["2 ok"]),
            (b"2 disks failed on host7", &["2 disks failed on host7"]),
            (b"3 foo and more text", &["3 foo and more text"]),
        ] {
            let want: Vec<Result<String, &str>> = want.iter().map(|w| Ok(w.to_string())).collect();
            for size in [1, 3, 4096] {
                let pieces: Vec<&[u8]> = input.chunks(size).collect();
                assert_eq!(frames(1000, &pieces), want, "pieces of {size}: {input:?}");
            }
        }
        // Each line is out as soon as its line end has come, not held for what follows.
        let mut f = Framer::new(1000);
        let mut buf = BytesMut::from(&b"2 ok\n"[..]);
        assert_eq!(
            f.decode(&mut buf),
            Some(Frame::Msg(BytesMut::from(&b"2 ok"[..])))
        );
        // Lines beginning with numbers whose counts land on text: lines.
        let lines = b"12 apples and 3 pears\n40 more lines here\n7 days\n";
        assert_eq!(
            frames(1000, &[lines]),
            [
                Ok("12 apples and 3 pears".to_string()),
                Ok("40 more lines here".to_string()),
                Ok("7 days".to_string())
            ]
        );
    }

    /// An octet-counting sender whose first message has no PRI: its count frames it when
    /// another count with a PRI follows right after its message (read as a line, it would
    /// wait for a line end that never comes, and take every message after it), however the
    /// reads cut the stream; a line that begins with a number stays a line.
    #[test]
    fn a_first_counted_frame_without_pri_is_framed_by_the_count_after_it() {
        let first = "Mar  1 00:02:05 octfirst app: no PRI first";
        let msgs: Vec<String> = (0..3)
            .map(|i| format!("<13>Mar  1 00:02:0{i} h app: next {i}"))
            .collect();
        let mut input = format!("{} {first}", first.len()).into_bytes();
        input.extend(counted(&msgs));
        let mut want = vec![Ok(first.to_string())];
        want.extend(msgs.iter().map(|m| Ok(m.clone())));
        for size in [1, 3, 4096] {
            let pieces: Vec<&[u8]> = input.chunks(size).collect();
            assert_eq!(frames(1000, &pieces), want, "pieces of {size}");
        }
        // The count's length lands on text, not on a count and a PRI: a line.
        for text in [
            &b"5 hello world\n<13>h app: x\n"[..],
            b"10 hellos\n<13>h app: x\n",
        ] {
            let got = frames(1000, &[text]);
            let line = text.split(|&b| b == b'\n').next().unwrap_or_default();
            assert_eq!(
                got[0],
                Ok(String::from_utf8_lossy(line).into_owned()),
                "{got:?}"
            );
        }
    }

    /// Counts padded with zeros (`0049 `) and empty frames (`0 `), as some senders write
    /// them, frame the messages after them, however the reads cut the stream; a line that
    /// starts with zeros and no PRI after them stays a line.
    #[test]
    fn padded_and_empty_octet_counts_frame_what_follows() {
        let a = "<13>Dec 10 06:55:46 h app: one";
        let b = "<13>Dec 10 06:55:47 h app: two";
        let input = format!("{:04} {a}0 {:04} {b}0 00 <14>", a.len(), b.len()).into_bytes();
        let want = vec![Ok(a.to_string()), Ok(b.to_string()), Ok("<14>".to_string())];
        for size in [1, 3, 5, 4096] {
            let pieces: Vec<&[u8]> = input.chunks(size).collect();
            assert_eq!(frames(100, &pieces), want, "pieces of {size}");
        }
        assert_eq!(
            frames(100, &[b"007 bond\n0 x\n"]),
            vec![Ok("007 bond".into()), Ok("0 x".into())]
        );
    }

    #[test]
    fn oversized_frames_are_skipped() {
        let long = vec![b'a'; 50];
        let mut input = Vec::new();
        input.extend_from_slice(&long);
        input.extend_from_slice(b"\nok1\n60 <");
        input.extend_from_slice(&[b'b'; 59]);
        input.extend_from_slice(b"ok2\n");
        let got = frames(20, &[&input[..30], &input[30..]]);
        assert_eq!(
            got,
            vec![
                Err("oversized"),
                Ok("ok1".into()),
                Err("oversized"),
                Ok("ok2".into())
            ]
        );
        assert_eq!(frames(20, &[b"999999999 <x"]), vec![Err("fatal")]);
        // Counted when seen, not when (if ever) it ends: a sender that never sends the newline.
        let mut f = Framer::new(20);
        let mut buf = BytesMut::from(&[b'c'; 30][..]);
        assert_eq!(f.decode(&mut buf), Some(Frame::Oversized));
        buf.extend_from_slice(&[b'c'; 30]);
        assert_eq!(f.decode(&mut buf), None);
        assert_eq!(f.finish(&mut buf), None);
        let mut f = Framer::new(20);
        let mut buf = BytesMut::from(&b"60 <abc"[..]);
        assert_eq!(f.decode(&mut buf), Some(Frame::Oversized));
        assert_eq!(f.decode(&mut buf), None);
        // Digits then a space are a length (as rsyslog reads them); digits without one are not.
        assert_eq!(
            frames(100, &[b"2026-11-30 x\n"]),
            vec![Ok("2026-11-30 x".into())]
        );
        // An RFC 5424 line without PRI starts with its version `1 `: not a one-byte frame.
        assert_eq!(
            frames(
                100,
                &[b"1 2020-05-22T14:59:09Z h app 12 - - text\n", b"2 <a"]
            ),
            vec![
                Ok("1 2020-05-22T14:59:09Z h app 12 - - text".into()),
                Ok("<a".into())
            ]
        );
        // Garbage without delimiter longer than max, then a good line.
        let got = frames(10, &[&[0xffu8; 40][..], b"\x01\ngood\n"]);
        assert_eq!(got, vec![Err("oversized"), Ok("good".into())]);
    }
}
