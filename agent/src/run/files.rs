//! The file/stdin ingest: syslog lines from files (followed like `tail -F`) or standard input.
//!
//! A reader thread per input does the blocking reads and hands complete lines to a bounded
//! channel; a forwarder thread owns the [`Router`] and stops on shutdown even while a reader is
//! blocked (on stdin, say), so a blocked read never holds the shard queues open.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::time::Duration as StdDuration;

use tokio::sync::watch;

use super::ingest::Router;
use crate::flow::live::wall_clock;

/// Lines waiting between a reader and its forwarder.
const QUEUE: usize = 4096;
/// How often a followed file is checked for new lines, and shutdown for.
const POLL: StdDuration = StdDuration::from_millis(200);

/// One line read, or a line over the size limit (skipped, counted).
enum Line {
    Text(Vec<u8>),
    Oversized,
}

/// Starts the threads that read `path` (`-`: standard input) into `router`.
pub fn start(
    path: PathBuf,
    router: Router,
    shutdown: watch::Receiver<bool>,
    max: usize,
    from_end: bool,
) -> std::io::Result<()> {
    // Where following begins is decided here, before `run` reports itself started: a line
    // appended after that is read, whatever the reader thread's start-up takes.
    let mut start = 0;
    // The file followed is the one opened here (a rotation before the reader thread runs
    // must not make it start on the new file at the old one's offset).
    let mut opened = None;
    if path != Path::new("-") {
        // A missing or unreadable file is a start-up error, and so is what cannot be
        // followed by offset: a folder, a FIFO, a device.
        if !std::fs::metadata(&path)?.is_file() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file (a folder, FIFO or device cannot be followed; list log files)",
            ));
        }
        let mut file = File::open(&path)?;
        if from_end {
            start = end_of_last_line(&mut file)?;
        }
        opened = Some(file);
    }
    let (tx, rx) = sync_channel::<Line>(QUEUE);
    let name = path.display().to_string();
    let stop = shutdown.clone();
    std::thread::Builder::new()
        .name(format!("read {name}"))
        .spawn(move || {
            let r = match opened {
                None => {
                    let stdin = BufReader::new(std::io::stdin().lock());
                    read_stream(stdin, &tx, max, false, &mut false).map(|_| ())
                }
                Some(file) => follow(&path, file, &tx, max, &stop, start),
            };
            if let Err(e) = r {
                tracing::error!(input = %path.display(), error = %e, "input file read error");
            }
        })?;
    std::thread::Builder::new()
        .name(format!("forward {name}"))
        .spawn(move || forward(rx, router, shutdown))?;
    Ok(())
}

/// Reads lines to the end of `r`; returns the bytes consumed. With `partial_waits`, a last
/// line without its newline is left unread (a writer is still writing it). `skipping`: inside
/// an oversized line (counted once), whose rest is passed over up to its newline, a little at
/// a time (a line of gigabytes is not held), and across calls: what a writer appends to it
/// later is the same line, not a message of its own.
fn read_stream(
    mut r: impl BufRead,
    tx: &SyncSender<Line>,
    max: usize,
    partial_waits: bool,
    skipping: &mut bool,
) -> std::io::Result<u64> {
    let mut buf = Vec::new();
    let mut total = 0u64;
    loop {
        if *skipping {
            let (n, ended) = skip_line(&mut r)?;
            total += n;
            if !ended {
                return Ok(total);
            }
            *skipping = false;
        }
        buf.clear();
        // Read at most max + 1 bytes of a line: a longer one is skipped to its end.
        let n = (&mut r).take(max as u64 + 1).read_until(b'\n', &mut buf)?;
        if n == 0 {
            return Ok(total);
        }
        if partial_waits && n <= max && buf.last() != Some(&b'\n') {
            return Ok(total);
        }
        total += n as u64;
        let line = if buf.last() != Some(&b'\n') && n > max {
            *skipping = true;
            Line::Oversized
        } else {
            while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
                buf.pop();
            }
            if buf.is_empty() {
                continue;
            }
            Line::Text(std::mem::take(&mut buf))
        };
        if tx.send(line).is_err() {
            return Ok(total);
        }
    }
}

/// Passes over `r` up to and with its next newline, a buffer at a time: the bytes consumed,
/// and whether the newline came (else the end of what there is to read).
fn skip_line(r: &mut impl BufRead) -> std::io::Result<(u64, bool)> {
    let mut n = 0u64;
    loop {
        let chunk = match r.fill_buf() {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if chunk.is_empty() {
            return Ok((n, false));
        }
        let (took, ended) = match chunk.iter().position(|b| *b == b'\n') {
            Some(i) => (i + 1, true),
            None => (chunk.len(), false),
        };
        r.consume(took);
        n += took as u64;
        if ended {
            return Ok((n, true));
        }
    }
}

/// Reads `file` (opened at `path`) from byte `start` and keeps following `path`: new lines as
/// they are appended; from the start again when it is truncated or replaced (log rotation).
fn follow(
    path: &Path,
    mut file: File,
    tx: &SyncSender<Line>,
    max: usize,
    stop: &watch::Receiver<bool>,
    start: u64,
) -> std::io::Result<()> {
    let mut pos = start;
    let mut id = identity(&file);
    let mut skipping = false;
    while !*stop.borrow() {
        file.seek(SeekFrom::Start(pos))?;
        pos += read_stream(BufReader::new(&file), tx, max, true, &mut skipping)?;
        std::thread::sleep(POLL);
        match File::open(path) {
            Ok(f) if identity(&f) != id => {
                // Rotated: read what the old file got last, then the new one from its start.
                file.seek(SeekFrom::Start(pos))?;
                read_stream(BufReader::new(&file), tx, max, false, &mut skipping)?;
                id = identity(&f);
                file = f;
                pos = 0;
                skipping = false;
            }
            Ok(_) => {
                if file.metadata().map(|m| m.len() < pos).unwrap_or(false) {
                    pos = 0; // truncated
                    skipping = false;
                }
            }
            Err(_) => {} // between rotation steps: keep the old file
        }
    }
    Ok(())
}

/// Where following from the end starts: after the last complete line (a line being written
/// when the agent starts is read whole once its newline comes).
fn end_of_last_line(file: &mut File) -> std::io::Result<u64> {
    let len = file.metadata()?.len();
    let back = len.min(64 * 1024);
    file.seek(SeekFrom::Start(len - back))?;
    let mut tail = Vec::with_capacity(back as usize);
    file.take(back).read_to_end(&mut tail)?;
    Ok(match tail.iter().rposition(|b| *b == b'\n') {
        Some(i) => len - back + i as u64 + 1,
        // No newline in the last 64 KiB: a huge partial line, or none: start at the end.
        None if back == len => 0,
        None => len,
    })
}

/// Device and inode: a replaced file has another.
fn identity(f: &File) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    f.metadata().ok().map(|m| (m.dev(), m.ino()))
}

fn forward(rx: Receiver<Line>, mut router: Router, shutdown: watch::Receiver<bool>) {
    loop {
        if *shutdown.borrow() {
            break;
        }
        match rx.recv_timeout(POLL) {
            Ok(Line::Text(bytes)) => {
                router.accept(&bytes, None, wall_clock());
            }
            Ok(Line::Oversized) => router.oversized(None),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        // Drain what is already there, then hand the batches on.
        while let Ok(line) = rx.try_recv() {
            match line {
                Line::Text(bytes) => {
                    router.accept(&bytes, None, wall_clock());
                }
                Line::Oversized => router.oversized(None),
            }
            if router.full() {
                break;
            }
        }
        router.flush_blocking();
    }
    router.flush_blocking();
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use std::io::Cursor;

    use super::*;

    fn lines(rx: &Receiver<Line>) -> Vec<String> {
        let mut out = Vec::new();
        while let Ok(l) = rx.try_recv() {
            out.push(match l {
                Line::Text(b) => String::from_utf8_lossy(&b).into_owned(),
                Line::Oversized => "<oversized>".into(),
            });
        }
        out
    }

    /// An oversized line being written in pieces (a logger's chunks) is one oversized line:
    /// what is appended to it later is not read as a message of its own.
    #[test]
    fn an_oversized_line_written_in_pieces_is_skipped_whole() {
        let (tx, rx) = sync_channel(100);
        let mut skipping = false;
        let mut file = b"ok one\n".to_vec();
        file.extend(std::iter::repeat_n(b'A', 150));
        let n = read_stream(Cursor::new(&file), &tx, 100, true, &mut skipping).unwrap();
        assert_eq!(n as usize, file.len(), "the oversized part is passed over");
        assert_eq!(lines(&rx), ["ok one", "<oversized>"]);
        // The writer goes on with the same line, then writes another.
        let more = b"AAAA <38>Jan  1 00:00:00 web sshd[1]: Accepted password for root\nok two\n";
        let n = read_stream(Cursor::new(&more[..]), &tx, 100, true, &mut skipping).unwrap();
        assert_eq!(n as usize, more.len());
        assert_eq!(lines(&rx), ["ok two"]);
        assert!(!skipping);
    }

    /// A line longer than what is read at once is passed over without being held whole.
    #[test]
    fn a_huge_line_is_skipped_without_holding_it() {
        let (tx, rx) = sync_channel(100);
        let mut skipping = false;
        let mut file = vec![b'x'; 1 << 20];
        file.extend(b"\nafter\n");
        let r = BufReader::with_capacity(4096, Cursor::new(&file));
        read_stream(r, &tx, 100, false, &mut skipping).unwrap();
        assert_eq!(lines(&rx), ["<oversized>", "after"]);
    }
}
