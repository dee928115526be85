//! cepheus-agent: everything of the `cepheus` binary that is not the command line.
//!
//! This crate is the shell around `cepheus-core`: it reads files, captures and (next) sockets,
//! turns their bytes into events, drives the engine's clock, and writes alerts; `run` is the
//! live appliance (actix actors). It owns all
//! I/O; the semantics live in `cepheus-core`. A library target so that tests and benchmarks
//! link the same code the binary runs.

// The standard printing macros panic when their stream is gone (`cepheus rules check x 2>&1 |
// head -c 100`): Rust ignores SIGPIPE, so a write to a closed pipe fails, and the panic's exit
// code 101 would hide the command's own (0, 1 or 2). These shadow them in every module below
// (macro_rules scope is textual): the same output, and a write that cannot be made is dropped.
macro_rules! eprintln {
    ($($t:tt)*) => {{
        use ::std::io::Write as _;
        let _ = writeln!(::std::io::stderr(), $($t)*);
    }};
}
macro_rules! eprint {
    ($($t:tt)*) => {{
        use ::std::io::Write as _;
        let _ = write!(::std::io::stderr(), $($t)*);
    }};
}
macro_rules! println {
    ($($t:tt)*) => {{
        use ::std::io::Write as _;
        let _ = writeln!(::std::io::stdout(), $($t)*);
    }};
}
macro_rules! print {
    ($($t:tt)*) => {{
        use ::std::io::Write as _;
        let _ = write!(::std::io::stdout(), $($t)*);
    }};
}

pub mod alerts_cmd;
pub mod api_client;
pub mod events_cmd;
pub mod flow;
pub mod groups_cmd;
pub mod ingest;
pub mod replay;
pub mod rulefiles;
pub mod rules_cmd;
pub mod rules_graph;
pub mod rules_test;
pub mod run;
pub mod silence_cmd;
pub mod tui_cmd;
