//! pcap and pcapng files as a stream of raw packets (pcap-file 2.0, read leniently).
//!
//! Two departures from pcap-file's defaults, both on purpose:
//! - classic pcap goes through `next_raw_packet`, because pcap-file's checked `next_packet`
//!   rejects a record whose original length exceeds the file's snap length — exactly what a
//!   truncated capture contains;
//! - pcapng Enhanced Packet Block stamps are rescaled by the interface's `if_tsresol` and
//!   `if_tsoffset` (pcap-file 2.0 reads the raw tick count as nanoseconds).
//!
//! A read error (a record cut short at the end of the file, a corrupt block) ends the stream
//! after being reported once; nothing here panics on any input.

use std::borrow::Cow;
use std::io::{self, Chain, Cursor, Read};
use std::path::Path;

use cepheus_core::time::Timestamp;
use pcap_file::TsResolution;
use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgReader};

/// Most pcapng interfaces tracked per section (a hostile file cannot grow this).
const MAX_INTERFACES: usize = 4096;

/// Errors reading a capture.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Not a pcap or pcapng file (by its first four bytes).
    #[error(
        "not a pcap or pcapng file (its first bytes are {}): {}",
        hex4(.0),
        if .0[..2] == [0x1f, 0x8b] {
            "it is gzip-compressed: decompress it first (`gunzip -k FILE`)"
        } else {
            "damaged, or not a capture (a text log is read by `cepheus replay` and `cepheus events`)"
        }
    )]
    NotACapture([u8; 4]),
    /// The pcap/pcapng structure is broken (header, record or block).
    #[error("broken capture: {0}")]
    Format(String),
}

impl CaptureError {
    /// The error for a message, naming the file `path` once (an I/O error names it already).
    pub fn about(&self, path: &std::path::Path) -> String {
        match self {
            // Read errors past the open (a folder reads as EISDIR) have no path of their own.
            CaptureError::Io { path: p, source } if p == "input" => {
                format!("cannot read {}: {source}", path.display())
            }
            CaptureError::Io { .. } => self.to_string(),
            _ => format!("{}: {self}", path.display()),
        }
    }
}

/// One captured frame as read from a file or an interface.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawPacket<'a> {
    /// Capture stamp.
    pub ts: Timestamp,
    /// pcap LINKTYPE_* of the frame.
    pub linktype: u32,
    /// Length of the frame on the wire (may exceed `data.len()` when cut by the snap length).
    pub orig_len: u32,
    /// The captured bytes.
    pub data: &'a [u8],
}

type Src<R> = Chain<Cursor<Vec<u8>>, R>;

#[derive(Clone, Copy, Debug)]
struct Iface {
    linktype: u32,
    /// Ticks per second is 10^n (`pow10`) or 2^n.
    resol: u8,
    offset_secs: i64,
}

enum Inner<R: Read> {
    Pcap {
        reader: PcapReader<Src<R>>,
        linktype: u32,
        nanos: bool,
    },
    PcapNg {
        reader: PcapNgReader<Src<R>>,
        ifaces: Vec<Iface>,
        last_ts: Timestamp,
    },
    Empty,
}

/// A pcap or pcapng reader (the format is told by the magic number).
pub struct CaptureReader<R: Read> {
    inner: Inner<R>,
    done: bool,
    scratch: Vec<u8>,
}

/// A capture read from a file or standard input ([`CaptureReader::open`]).
pub type OpenedCapture = CaptureReader<Box<dyn Read>>;

impl OpenedCapture {
    /// Opens a capture file (`-`: standard input, `tcpdump -w - | cepheus replay -`).
    pub fn open(path: &Path) -> Result<Self, CaptureError> {
        if path == Path::new("-") {
            return Self::new(Box::new(io::stdin()));
        }
        // (A pipe or FIFO a look at its first bytes opened is taken over, as it was left.)
        let file = crate::ingest::input::open_input(path).map_err(|source| CaptureError::Io {
            path: path.display().to_string(),
            source,
        })?;
        Self::new(Box::new(file))
    }
}

impl<R: Read> CaptureReader<R> {
    /// Reads the file header of a capture from `r`. A zero-length input is an empty capture.
    pub fn new(mut r: R) -> Result<Self, CaptureError> {
        let mut magic = Vec::with_capacity(4);
        (&mut r)
            .take(4)
            .read_to_end(&mut magic)
            .map_err(|source| CaptureError::Io {
                path: "input".into(),
                source,
            })?;
        if magic.is_empty() {
            return Ok(CaptureReader {
                inner: Inner::Empty,
                done: true,
                scratch: Vec::new(),
            });
        }
        let m = match magic.as_slice() {
            [a, b, c, d] => u32::from_le_bytes([*a, *b, *c, *d]),
            _ => {
                return Err(CaptureError::Format(format!(
                    "{} bytes: shorter than any capture file header",
                    magic.len()
                )));
            }
        };
        let src = Cursor::new(magic).chain(r);
        let inner = match m {
            0xa1b2_c3d4 | 0xd4c3_b2a1 | 0xa1b2_3c4d | 0x4d3c_b2a1 => {
                let reader = PcapReader::new(src).map_err(|e| {
                    CaptureError::Format(format!(
                        "the pcap file header is cut short or invalid ({e})"
                    ))
                })?;
                let h = reader.header();
                Inner::Pcap {
                    linktype: u32::from(h.datalink),
                    nanos: h.ts_resolution == TsResolution::NanoSecond,
                    reader,
                }
            }
            0x0a0d_0d0a => {
                let reader = PcapNgReader::new(src).map_err(|e| {
                    CaptureError::Format(format!(
                        "the pcapng section header is cut short or invalid ({e})"
                    ))
                })?;
                Inner::PcapNg {
                    reader,
                    ifaces: Vec::new(),
                    last_ts: Timestamp(0),
                }
            }
            other => return Err(CaptureError::NotACapture(other.to_le_bytes())),
        };
        Ok(CaptureReader {
            inner,
            done: false,
            scratch: Vec::new(),
        })
    }

    /// The next frame; `None` at the end; an error ends the stream (later calls give `None`).
    pub fn next_packet(&mut self) -> Option<Result<RawPacket<'_>, CaptureError>> {
        if self.done {
            return None;
        }
        let res = match &mut self.inner {
            Inner::Empty => None,
            Inner::Pcap {
                reader,
                linktype,
                nanos,
            } => match reader.next_raw_packet() {
                None => None,
                Some(Err(e)) => Some(Err(CaptureError::Format(e.to_string()))),
                Some(Ok(raw)) => {
                    let frac = i64::from(raw.ts_frac);
                    let nsec = if *nanos {
                        frac
                    } else {
                        frac.saturating_mul(1000)
                    };
                    let ts = Timestamp(
                        i64::from(raw.ts_sec)
                            .saturating_mul(1_000_000_000)
                            .saturating_add(nsec),
                    );
                    let data: &[u8] = match raw.data {
                        Cow::Borrowed(d) => d,
                        Cow::Owned(v) => {
                            self.scratch = v;
                            &self.scratch
                        }
                    };
                    Some(Ok(RawPacket {
                        ts,
                        linktype: *linktype,
                        orig_len: raw.orig_len.max(data.len() as u32),
                        data,
                    }))
                }
            },
            Inner::PcapNg {
                reader,
                ifaces,
                last_ts,
            } => {
                // The frame is copied into `scratch` so the result does not borrow the reader
                // across loop iterations (which the borrow checker cannot accept yet).
                let scratch = &mut self.scratch;
                let meta = loop {
                    match reader.next_block() {
                        None => break None,
                        Some(Err(e)) => break Some(Err(CaptureError::Format(e.to_string()))),
                        Some(Ok(Block::SectionHeader(_))) => ifaces.clear(),
                        Some(Ok(Block::InterfaceDescription(idb))) => {
                            if ifaces.len() < MAX_INTERFACES {
                                let mut iface = Iface {
                                    linktype: u32::from(idb.linktype),
                                    resol: 6,
                                    offset_secs: 0,
                                };
                                for opt in &idb.options {
                                    match opt {
                                        InterfaceDescriptionOption::IfTsResol(r) => {
                                            iface.resol = *r
                                        }
                                        InterfaceDescriptionOption::IfTsOffset(o) => {
                                            iface.offset_secs = i64::try_from(*o).unwrap_or(0)
                                        }
                                        _ => {}
                                    }
                                }
                                ifaces.push(iface);
                            }
                        }
                        Some(Ok(Block::EnhancedPacket(epb))) => {
                            let Some(iface) = ifaces.get(epb.interface_id as usize).copied() else {
                                break Some(Err(CaptureError::Format(format!(
                                    "packet on undeclared interface {}",
                                    epb.interface_id
                                ))));
                            };
                            let ticks = u64::try_from(epb.timestamp.as_nanos()).unwrap_or(u64::MAX);
                            let ts = ticks_to_ts(ticks, iface.resol, iface.offset_secs);
                            *last_ts = ts;
                            scratch.clear();
                            scratch.extend_from_slice(&epb.data);
                            break Some(Ok((ts, iface.linktype, epb.original_len)));
                        }
                        Some(Ok(Block::SimplePacket(spb))) => {
                            let Some(iface) = ifaces.first().copied() else {
                                break Some(Err(CaptureError::Format(
                                    "simple packet without interface".into(),
                                )));
                            };
                            scratch.clear();
                            scratch.extend_from_slice(&spb.data);
                            break Some(Ok((*last_ts, iface.linktype, spb.original_len)));
                        }
                        Some(Ok(_)) => {}
                    }
                };
                meta.map(|r| {
                    r.map(|(ts, linktype, orig_len)| RawPacket {
                        ts,
                        linktype,
                        orig_len: orig_len.max(self.scratch.len() as u32),
                        data: &self.scratch,
                    })
                })
            }
        };
        match &res {
            None | Some(Err(_)) => self.done = true,
            Some(Ok(_)) => {}
        }
        res
    }
}

/// Converts pcapng ticks at resolution `resol` (if_tsresol) plus an offset to a stamp.
fn ticks_to_ts(ticks: u64, resol: u8, offset_secs: i64) -> Timestamp {
    let ticks = u128::from(ticks);
    let nanos: u128 = if resol & 0x80 == 0 {
        let exp = u32::from(resol);
        if exp <= 9 {
            ticks.saturating_mul(10u128.pow(9 - exp))
        } else {
            ticks / 10u128.checked_pow(exp - 9).unwrap_or(u128::MAX)
        }
    } else {
        let exp = u32::from(resol & 0x7f);
        let per_sec = 1u128.checked_shl(exp).unwrap_or(u128::MAX);
        ticks.saturating_mul(1_000_000_000) / per_sec
    };
    let nanos = i64::try_from(nanos).unwrap_or(i64::MAX);
    Timestamp(nanos.saturating_add(offset_secs.saturating_mul(1_000_000_000)))
}

/// Four bytes in the order a file holds them, as hex (`1f8b0808`).
fn hex4(b: &[u8; 4]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first bytes are said in the file's order, and a gzip file is named as one (found
    /// by an audit: `ABCD` was said `44434241`).
    #[test]
    fn a_file_that_is_no_capture_is_said_as_it_begins() {
        let said = |bytes: &[u8]| match CaptureReader::new(std::io::Cursor::new(bytes.to_vec())) {
            Err(e) => e.to_string(),
            Ok(_) => String::new(),
        };
        let text = said(b"ABCDxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx");
        assert!(text.contains("its first bytes are 41424344"), "{text}");
        let gz = said(&[0x1f, 0x8b, 0x08, 0x08, 0, 0, 0, 0, 0, 0, 0, 0]);
        assert!(
            gz.contains("1f8b0808") && gz.contains("gzip-compressed"),
            "{gz}"
        );
    }

    #[test]
    fn tsresol() {
        assert_eq!(ticks_to_ts(5, 6, 0), Timestamp(5000));
        assert_eq!(ticks_to_ts(5, 9, 0), Timestamp(5));
        assert_eq!(ticks_to_ts(1024, 0x8a, 1), Timestamp(2_000_000_000));
        assert_eq!(ticks_to_ts(u64::MAX, 100, 0), Timestamp(0));
        assert_eq!(ticks_to_ts(1 << 40, 0xc8, 0), Timestamp(0));
    }
}
