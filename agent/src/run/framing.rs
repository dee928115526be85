//! TCP syslog framing (RFC 6587), detected per frame.
//!
//! - Octet counting: `LEN SP MSG`, where LEN is 1–10 ASCII digits without a leading zero.
//! - Non-transparent framing: the message ends at LF (a CR before it is trimmed by the parser)
//!   or NUL.
//!
//! A frame that starts with a digit and continues with digits and a space is octet-counted
//! (except `1 `: no syslog message is one byte long, and `1 ` starts an RFC 5424 line sent
//! without PRI); anything else is delimiter-framed. A frame longer than the maximum message size is
//! skipped: a delimited frame up to its next delimiter, an octet-counted frame by its
//! declared length — unless that length is absurd (more than 16 times the maximum), which
//! means the stream is not syslog: [`Frame::Fatal`] tells the caller to close the connection.
//!
//! Octet-counted senders never send a delimiter, so one broken frame among theirs (a length
//! of 11 digits, a stray partial line) would make the rest of the connection one endless
//! delimited frame. The framer finds its way back (*resyncs*) to the first octet-counted
//! frame whose message begins with `<` and is followed by another frame or the end of what
//! was received: when the broken frame outgrows the maximum, when it starts with a length
//! too long to be one, while an oversized frame is skipped, and at the end of the stream.
//! What came before is one frame (malformed, or oversized).

use bytes::{Buf, BytesMut};

/// One decoding step's result.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A complete message (without its framing).
    Msg(BytesMut),
    /// A message longer than the maximum was skipped.
    Oversized,
    /// The stream cannot be framed any more; close the connection.
    Fatal,
}

/// The framing state of one connection.
#[derive(Debug)]
pub struct Framer {
    max: usize,
    /// Bytes still to discard of an oversized frame.
    skip: usize,
    /// Discarding an oversized delimited frame up to its delimiter.
    skip_to_delim: bool,
    /// While discarding: where in the buffer to look on for a frame to resync to (before it,
    /// every place was ruled out).
    resync_from: usize,
}

impl Framer {
    /// A framer for messages of at most `max` bytes.
    pub fn new(max: usize) -> Framer {
        Framer {
            max,
            skip: 0,
            skip_to_delim: false,
            resync_from: 0,
        }
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
                let delim = delimiter(buf);
                let scope = &buf[..delim.unwrap_or(buf.len())];
                match (delim, self.resync(scope, self.resync_from, false)) {
                    (_, Ok(p)) => {
                        buf.advance(p);
                        self.skip_to_delim = false;
                    }
                    (Some(i), Err(_)) => {
                        buf.advance(i + 1);
                        self.skip_to_delim = false;
                    }
                    (None, Err(from)) => {
                        // Kept: where a frame may begin whose end has not come yet.
                        let cut = buf.len().saturating_sub(self.max + 12);
                        buf.advance(cut);
                        self.resync_from = from.saturating_sub(cut);
                        return None;
                    }
                }
                continue;
            }
            if skip_separators(buf) {
                return None;
            }
            if buf[0].is_ascii_digit() && buf[0] != b'0' {
                let digits = buf
                    .iter()
                    .take(11)
                    .take_while(|b| b.is_ascii_digit())
                    .count();
                if digits == buf.len() {
                    // Digits up to the end of what we have: wait for more (bounded by 10).
                    if digits <= 10 {
                        return None;
                    }
                } else if let Some((digits, len)) = octet_count(buf) {
                    if len > self.max {
                        if len / 16 > self.max {
                            return Some(Frame::Fatal);
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
                    return Some(Frame::Msg(buf.split_to(len)));
                }
            }
            let delim = delimiter(buf);
            let long_length = buf.iter().take_while(|b| b.is_ascii_digit()).count() > 10;
            if (long_length || (delim.is_none() && buf.len() > self.max))
                && let Ok(p) = self.resync(&buf[..delim.unwrap_or(buf.len())], 0, false)
            {
                return Some(self.broken_frame(buf, p));
            }
            match delim {
                Some(i) if i > self.max => {
                    buf.advance(i + 1);
                    return Some(Frame::Oversized);
                }
                Some(i) => {
                    let msg = buf.split_to(i);
                    buf.advance(1);
                    return Some(Frame::Msg(msg));
                }
                None if buf.len() > self.max => {
                    // Kept, for a frame that may begin in it (see `resync`).
                    buf.advance(buf.len().saturating_sub(self.max + 12));
                    self.skip_to_delim = true;
                    self.resync_from = 0;
                    return Some(Frame::Oversized);
                }
                None => return None,
            }
        }
    }

    /// At end of stream: the frames left in `buf`, one per call until `None` (the last
    /// message without its delimiter, as `logger` and `nc` send it).
    pub fn finish(&mut self, buf: &mut BytesMut) -> Option<Frame> {
        if let Some(f) = self.decode(buf) {
            return Some(f);
        }
        if self.skip > 0 {
            // Counted when it began.
            buf.clear();
            self.skip = 0;
            return None;
        }
        if self.skip_to_delim {
            // Counted when it began; frames after it (the last one, which nothing follows)
            // are still taken.
            self.skip_to_delim = false;
            match self.resync(buf, 0, true) {
                Ok(p) => buf.advance(p),
                Err(_) => buf.clear(),
            }
            return self.finish(buf);
        }
        if skip_separators(buf) {
            return None;
        }
        if let Ok(p) = self.resync(buf, 0, true) {
            // The rest is octet-counted frames, taken at the next call.
            return Some(self.broken_frame(buf, p));
        }
        if buf.len() > self.max {
            buf.clear();
            return Some(Frame::Oversized);
        }
        Some(Frame::Msg(buf.split()))
    }

    /// Where in `b` an octet-counted frame begins whose message starts with `<` (a PRI), at
    /// or after `from`, and is followed by the start of another (or, `at_end`, by the end of
    /// the stream): a frame not received whole, or whose successor has not come, is not enough
    /// to go by. Else where to look on once more bytes came: the first such frame, or the end.
    fn resync(&self, b: &[u8], from: usize, at_end: bool) -> Result<usize, usize> {
        let mut at = from;
        let mut pending = None;
        while let Some(i) = b.get(at..).and_then(|r| r.iter().position(|&x| x == b'<')) {
            let lt = at + i;
            at = lt + 1;
            if lt < 2 || b[lt - 1] != b' ' {
                continue;
            }
            // The length is a tail of the digits before the space: the message before it may
            // end in digits too (`port 22`).
            let run = b[..lt - 1]
                .iter()
                .rev()
                .take_while(|x| x.is_ascii_digit())
                .count();
            for k in 1..=run.min(10) {
                let p = lt - 1 - k;
                match self.whole_frame_at(b, p, at_end) {
                    Some(true) => return Ok(p),
                    Some(false) => {}
                    None => pending = pending.or(Some(lt)),
                }
            }
        }
        Err(pending.unwrap_or(b.len().max(from)))
    }

    /// Whether an octet-counted frame begins at `p` in `b`, whole, at most the maximum, and
    /// followed by the start of another (`LEN <`), or, at the end of the stream (`at_end`),
    /// by nothing; `None`: it may, once more bytes came.
    fn whole_frame_at(&self, b: &[u8], p: usize, at_end: bool) -> Option<bool> {
        let Some((d, len)) = octet_count(&b[p..]) else {
            return Some(false);
        };
        let end = p + d + 1 + len;
        if len > self.max {
            return Some(false);
        }
        let rest = b.get(end..)?;
        // (A sender may end each counted frame with a newline.)
        let sep = rest
            .iter()
            .take_while(|&&c| c == b'\n' || c == b'\r' || c == 0)
            .count();
        let rest = &rest[sep..];
        let digits = rest.iter().take_while(|x| x.is_ascii_digit()).count();
        let next = match octet_count(rest) {
            Some((d, _)) => rest.get(d + 1).map(|&c| c == b'<'),
            None if digits == rest.len() && digits <= 10 => None,
            None => Some(false),
        };
        match next {
            None if at_end => Some(true),
            next => next,
        }
    }

    /// The bytes before a resync point `p`, as one frame (a message the parser will refuse or
    /// read, or an oversized one).
    fn broken_frame(&self, buf: &mut BytesMut, p: usize) -> Frame {
        if p > self.max {
            buf.advance(p);
            Frame::Oversized
        } else {
            Frame::Msg(buf.split_to(p))
        }
    }
}

/// Where the next delimiter (LF or NUL) is.
fn delimiter(b: &[u8]) -> Option<usize> {
    b.iter().position(|&x| x == b'\n' || x == 0)
}

/// The octet count `b` starts with, if it starts with one: `LEN SP` with LEN 1–10 ASCII digits
/// without a leading zero; the number of digits and LEN. `1 ` is not one: no syslog message is
/// one byte long, and `1 ` is the version of an RFC 5424 line sent without PRI
/// (`1 2020-05-22T14:59:09Z host app ...`), delimited.
pub fn octet_count(b: &[u8]) -> Option<(usize, usize)> {
    let digits = b.iter().take(11).take_while(|x| x.is_ascii_digit()).count();
    if !(1..=10).contains(&digits) || b[0] == b'0' || b.get(digits) != Some(&b' ') {
        return None;
    }
    if &b[..digits] == b"1" {
        return None;
    }
    let len = std::str::from_utf8(&b[..digits]).ok()?.parse().ok()?;
    Some((digits, len))
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
            Frame::Fatal => out.push(Err("fatal")),
        };
        for c in chunks {
            buf.extend_from_slice(c);
            while let Some(fr) = f.decode(&mut buf) {
                let fatal = fr == Frame::Fatal;
                push(fr, &mut out);
                if fatal {
                    return out;
                }
            }
        }
        while let Some(fr) = f.finish(&mut buf) {
            push(fr, &mut out);
        }
        out
    }

    #[test]
    fn both_framings_mixed_and_split() {
        let got = frames(100, &[b"5 hello<13>a b\n3 ", b"xyz\0<14>last"]);
        assert_eq!(
            got,
            vec![
                Ok("hello".into()),
                Ok("<13>a b".into()),
                Ok("xyz".into()),
                Ok("<14>last".into())
            ]
        );
        // Split inside the length and inside the body.
        let got = frames(100, &[b"1", b"1 hello", b" worl", b"d\n"]);
        assert_eq!(got, vec![Ok("hello world".into())]);
    }

    /// Octet-counted frames, each with its length.
    fn counted(msgs: &[String]) -> Vec<u8> {
        msgs.iter()
            .flat_map(|m| format!("{} {m}", m.len()).into_bytes())
            .collect()
    }

    #[test]
    fn a_broken_frame_among_counted_ones_loses_only_itself() {
        let msgs: Vec<String> = (0..50)
            .map(|i| format!("<13>Dec 10 06:55:46 h app: port {i}2"))
            .collect();
        let ok: Vec<Result<String, &str>> = msgs.iter().map(|m| Ok(m.clone())).collect();
        for broken in [
            &b"99999999999 x"[..],
            b"stray text",
            b"12345678901234567890 <13>y",
        ] {
            let mut input = broken.to_vec();
            input.extend(counted(&msgs));
            let mut want = vec![Ok(String::from_utf8_lossy(broken).into_owned())];
            want.extend(ok.iter().cloned());
            // All at once, at the end of the stream, and in small pieces below the maximum
            // (framed as soon as the broken frame outgrows it, or by its length's digits).
            assert_eq!(frames(4096, &[&input]), want, "{broken:?}");
            let pieces: Vec<&[u8]> = input.chunks(7).collect();
            assert_eq!(frames(4096, &pieces), want, "{broken:?} in pieces");
            let got = frames(100, &pieces);
            assert_eq!(got[1..], want[1..], "{broken:?}, max 100");
        }
        // While an oversized delimited frame is skipped, counted frames end it.
        let mut input = vec![b'a'; 300];
        input.extend(counted(&msgs));
        let mut want = vec![Err("oversized")];
        want.extend(ok.iter().cloned());
        for size in [1, 5, 64, 1000] {
            let pieces: Vec<&[u8]> = input.chunks(size).collect();
            assert_eq!(frames(100, &pieces), want, "pieces of {size}");
        }
        // One frame after it, then the end of the stream.
        let mut input = vec![b'a'; 300];
        input.extend(counted(&msgs[..1]));
        assert_eq!(frames(100, &[&input]), want[..2]);
    }

    #[test]
    fn oversized_frames_are_skipped() {
        let long = vec![b'a'; 50];
        let mut input = Vec::new();
        input.extend_from_slice(&long);
        input.extend_from_slice(b"\nok1\n60 ");
        input.extend_from_slice(&[b'b'; 60]);
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
        assert_eq!(frames(20, &[b"999999999 x"]), vec![Err("fatal")]);
        // Counted when seen, not when (if ever) it ends: a sender that never sends the newline.
        let mut f = Framer::new(20);
        let mut buf = BytesMut::from(&[b'c'; 30][..]);
        assert_eq!(f.decode(&mut buf), Some(Frame::Oversized));
        buf.extend_from_slice(&[b'c'; 30]);
        assert_eq!(f.decode(&mut buf), None);
        assert_eq!(f.finish(&mut buf), None);
        let mut f = Framer::new(20);
        let mut buf = BytesMut::from(&b"60 abc"[..]);
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
                &[b"1 2020-05-22T14:59:09Z h app 12 - - text\n", b"2 ab"]
            ),
            vec![
                Ok("1 2020-05-22T14:59:09Z h app 12 - - text".into()),
                Ok("ab".into())
            ]
        );
        // Garbage without delimiter longer than max, then a good line.
        let got = frames(10, &[&[0xffu8; 40][..], b"\x01\ngood\n"]);
        assert_eq!(got, vec![Err("oversized"), Ok("good".into())]);
    }
}
