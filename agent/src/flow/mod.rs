//! Packets to flows: decoding, the flow table, pcap files, live capture, and `cepheus flows`.

pub mod cmd;
