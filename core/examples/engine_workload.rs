//! One heartbeat workload through the engine, for instruction and cache-miss counts that do
//! not depend on how busy the machine is, and for quick wall-clock comparisons:
//!
//! `cargo build --release -p cepheus-core --example engine_workload`
//! `valgrind --tool=callgrind --toggle-collect='*Engine::push*' target/release/examples/engine_workload 100 100000 4`
//!
//! Arguments: rules, hosts, rounds, absence seconds, one at a time (defaults 100 100000 4 120
//! 0, as the criterion bench). Events are built before timing; the first round (which creates the
//! groups) and the later rounds (steady state, as in a long-running agent) are timed apart.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use cepheus_core::engine::{Engine, EngineConfig};
use cepheus_core::event::{Event, Field, Source, Value};
use cepheus_core::rules::compile_str;
use cepheus_core::time::Timestamp;

/// The agent's allocator: the engine is timed as the agent runs it.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let rules = args.first().copied().unwrap_or(100);
    let hosts = args.get(1).copied().unwrap_or(100_000);
    let rounds = args.get(2).copied().unwrap_or(4).max(2);
    // Fifth argument: 1 pushes one event at a time (`Engine::push`), 0 (default) in batches
    // (`Engine::push_batch`, as the agent's shards do).
    let one_at_a_time = args.get(4).copied().unwrap_or(0) == 1;
    // Fourth argument: the absence's duration in seconds (default 120: about one timer fire
    // per host per heartbeat period; a long one shows the cost without timers).
    let for_ = format!("{}s", args.get(3).copied().unwrap_or(120));
    let mut text = String::new();
    for r in 0..rules {
        let names: Vec<String> = (0..hosts)
            .filter(|h| h % rules == r)
            .map(|h| format!("\"host{h:06}\""))
            .collect();
        text.push_str(&format!(
            "[[rule]]\nname = \"hb-{r}\"\nseverity = \"critical\"\ngroup_by = [\"host\"]\nevents.hb = 'syslog and app == \"heartbeat\" and host in [{}]'\npattern = \"absent(hb) for {for_}\"\n\n",
            names.join(", ")
        ));
    }
    let set = compile_str("w.toml", &text).rules.expect("valid rules");
    let mut engine = Engine::new(&set, EngineConfig::default()).unwrap();
    let t0 = 1_780_000_000i64 * 1_000_000_000;
    let step = 60_000_000_000 / hosts as i64;
    let mut events = Vec::with_capacity(rounds * hosts);
    for r in 0..rounds {
        for h in 0..hosts {
            let t = Timestamp(t0 + r as i64 * 60_000_000_000 + h as i64 * step);
            events.push(
                Event::new(Source::Syslog, t, t)
                    .with(Field::Host, Value::str(&format!("host{h:06}")))
                    .with(Field::App, Value::str("heartbeat"))
                    .with(Field::Msg, Value::str("alive")),
            );
        }
    }
    let rest = events.split_off(hosts);
    let mut out = Vec::new();
    // Minor page faults of this process so far (Linux; 0 elsewhere): memory touched first.
    let faults = || {
        std::fs::read_to_string("/proc/self/stat")
            .ok()
            .and_then(|s| {
                let after = s.rsplit_once(')')?.1.to_string();
                after.split_whitespace().nth(7)?.parse::<u64>().ok()
            })
            .unwrap_or(0)
    };
    let mut fault_log = Vec::new();
    let mut run = |evs: Vec<Event>| {
        let f0 = faults();
        let started = std::time::Instant::now();
        if one_at_a_time {
            for ev in evs {
                engine.push(ev, &mut out);
            }
        } else {
            engine.push_batch(evs, &mut out);
        }
        let secs = started.elapsed().as_secs_f64();
        fault_log.push(faults() - f0);
        secs
    };
    let first = run(events);
    let n_rest = rest.len();
    let steady = run(rest);
    println!(
        "first round {:.2} M events/s ({hosts} groups created, {} page faults); steady {:.2} M events/s ({n_rest} events, {} page faults); {} alerts",
        hosts as f64 / first / 1e6,
        fault_log.first().copied().unwrap_or(0),
        n_rest as f64 / steady / 1e6,
        fault_log.get(1).copied().unwrap_or(0),
        out.len()
    );
}
