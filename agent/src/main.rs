//! The `cepheus` binary: one entry point, subcommands for every job.
//!
//! This file only parses the command line and dispatches; each subcommand lives in its own
//! module. Errors reach the user through `anyhow`-style context at this edge.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use cepheus_agent::{
    alerts_cmd, events_cmd, flow, groups_cmd, replay, rules_cmd, rules_graph, rules_test, run,
    silence_cmd, tui_cmd,
};

/// The process allocator: the CEP shards free events and partial matches long after they
/// were made, in no order, which mimalloc does with fewer cache misses than glibc's malloc
/// (see the workspace Cargo.toml).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// cepheus: a network security monitoring appliance (syslog + flows + CEP rules).
#[derive(Parser, Debug)]
#[command(name = "cepheus", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Work with rule files: check, test, graph.
    Rules {
        #[command(subcommand)]
        command: RulesCommand,
    },
    /// Print the flows of pcap/pcapng captures as JSON lines (like Zeek's conn.log; bytes are
    /// IP bytes, with payload and frame bytes beside them).
    Flows(flow::cmd::FlowsArgs),
    /// Run the appliance: syslog listeners, CEP shards, alerts, HTTP API.
    Run(run::RunArgs),
    /// Print or check the configuration of `cepheus run`.
    Config {
        #[command(subcommand)]
        command: run::ConfigCommand,
    },
    /// Run the rules over syslog files and captures as fast as possible; alerts as JSON lines.
    Replay(replay::ReplayArgs),
    /// Print the events that syslog files, JSON-lines events and captures turn into, as JSON
    /// lines in the shape replay reads (the fields a rule can match, by name and type).
    Events(events_cmd::EventsArgs),
    /// Act on the groups of a running agent (`forget RULE KEY` retires one by hand).
    Groups {
        #[command(subcommand)]
        command: groups_cmd::GroupsCommand,
    },
    /// The alerts of a running agent, from its store: those firing now, or the latest
    /// changes (`--recent N`).
    Alerts(alerts_cmd::AlertsArgs),
    /// Mute, for a while, the notifications (webhook, syslog) of a rule's or a group's
    /// alerts on a running agent: `add`, `list`, `expire`.
    Silence {
        #[command(subcommand)]
        command: silence_cmd::SilenceCommand,
    },
    /// The terminal dashboard of a running agent: firing alerts, latest changes, counters;
    /// acknowledge with `a`.
    Tui(tui_cmd::TuiArgs),
}

#[derive(Subcommand, Debug)]
enum RulesCommand {
    /// Check rule files and folders; exit 0 when valid, 1 on errors, 2 on usage/IO errors.
    Check(rules_cmd::CheckArgs),
    /// Run rule unit tests (`*.test.toml` beside the rule files); exit 1 on any failure, 2
    /// when a test cannot run.
    Test(rules_test::TestArgs),
    /// Print the shared operator graph the rules compile to (text or Graphviz dot).
    Graph(rules_graph::GraphArgs),
}

fn main() -> ExitCode {
    // (For the agent, SIGHUP is caught from the first instant: see `run::catch_early_hup`.
    // Other commands keep its default: a `cepheus tui` whose terminal hangs up ends.)
    if std::env::args_os().nth(1).is_some_and(|a| a == "run") {
        run::catch_early_hup();
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Rules { command } => match command {
            RulesCommand::Check(args) => rules_cmd::check(args),
            RulesCommand::Test(args) => rules_test::run(args),
            RulesCommand::Graph(args) => rules_graph::run(args),
        },
        Command::Flows(args) => flow::cmd::run(args),
        Command::Replay(args) => replay::run(args),
        Command::Events(args) => events_cmd::run(args),
        Command::Run(args) => run::run(args),
        Command::Config { command } => run::config_cmd(command),
        Command::Groups { command } => groups_cmd::run(command),
        Command::Alerts(args) => alerts_cmd::run(args),
        Command::Silence { command } => silence_cmd::run(command),
        Command::Tui(args) => tui_cmd::run(args),
    }
}
