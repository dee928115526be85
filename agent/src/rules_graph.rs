//! `cepheus rules graph`: prints the shared operator graph the rules compile to.

use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use cepheus_core::engine::{Engine, EngineConfig};
use cepheus_core::graph;
use cepheus_core::rules::ir::RuleSet;

use crate::{rulefiles, rules_cmd};

/// Output format of `cepheus rules graph`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GraphFormat {
    /// A readable dump: every node with its parents, rules and why it is (not) shared.
    #[default]
    Text,
    /// Graphviz (`| dot -Tsvg > graph.svg`); shared nodes are filled and double-bordered.
    Dot,
}

/// Arguments of `cepheus rules graph`.
#[derive(clap::Args, Debug)]
pub struct GraphArgs {
    /// Rule files or folders (folders: every `*.toml` in them, recursively, but `*.test.toml`).
    #[arg(required = true)]
    pub paths: Vec<PathBuf>,
    /// Output format.
    #[arg(long, value_enum, default_value_t = GraphFormat::Text)]
    pub format: GraphFormat,
    /// Compile every rule on its own (no work shared between rules, as `replay --no-share`
    /// runs them), to compare.
    #[arg(long)]
    pub no_share: bool,
}

/// Runs `cepheus rules graph`: exit 0 with the graph on stdout, 1 when the rules have errors,
/// 2 on usage/IO errors. Diagnostics and a summary go to stderr.
pub fn run(args: GraphArgs) -> ExitCode {
    let loaded = match rulefiles::load(&args.paths) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let color = std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none();
    for d in &loaded.compiled.diagnostics {
        eprint!("{}", rules_cmd::render(d, color));
    }
    let Some(rules) = &loaded.compiled.rules else {
        eprintln!("{}", loaded.summary());
        eprintln!("error: the rules have errors; no graph");
        return ExitCode::from(1);
    };
    let g = graph::build(rules, !args.no_share);
    let mut out = match args.format {
        GraphFormat::Text => g.to_text(),
        GraphFormat::Dot => g.to_dot(),
    };
    if args.format == GraphFormat::Text {
        out.push_str(&families_text(rules, !args.no_share));
        out.push_str(&below_roots_text(&g));
    } else if !below_roots_text(&g).is_empty()
        && let Some(end) = out.rfind('}')
    {
        // The picture says it too: shared below the roots in the graph, run per rule state.
        out.insert_str(
            end,
            "  runtime [shape=note, fontname=\"monospace\", fontsize=10, label=\"run time: operators shared below the roots are run by each rule state that holds them\\n(each keeps its own partial matches); `rules graph` without --format dot lists them\"];\n",
        );
    }
    let mut stdout = std::io::stdout().lock();
    if let Err(e) = stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        && e.kind() != std::io::ErrorKind::BrokenPipe
    {
        eprintln!("error: writing the graph: {e}");
        return ExitCode::from(2);
    }
    eprintln!("{}", g.summary());
    ExitCode::SUCCESS
}

/// The run-time side of the graph's shared operators below the roots. The engine shares
/// predicates, event nodes, whole rules (one state per meaning) and, in families, group
/// records; an operator below a root is still run by each rule state that holds it, and the
/// dump must not let an operator think otherwise.
fn below_roots_text(g: &graph::Graph) -> String {
    use graph::NodeKind as K;
    let mut lines = Vec::new();
    for n in &g.nodes {
        let operator = matches!(
            n.kind,
            K::Seq | K::Or | K::And | K::Repeat { .. } | K::Absent { .. } | K::Virtual { .. }
        );
        // A virtual node (OA, SS, OS) is shared by construction; at run time it is its
        // family's group record, and its operations' partial matches are per state.
        if !operator || (n.sharing.is_empty() && !matches!(n.kind, K::Virtual { .. })) {
            continue;
        }
        // The rule states holding it: the roots above it.
        let mut roots = std::collections::BTreeSet::new();
        let mut todo = n.parents.clone();
        while let Some(p) = todo.pop() {
            let Some(pn) = g.nodes.get(p) else { continue };
            if matches!(pn.kind, K::Root { .. }) {
                roots.insert(p);
            } else {
                todo.extend(pn.parents.iter().copied());
            }
        }
        let states: Vec<String> = roots
            .iter()
            .map(|&r| {
                g.nodes[r]
                    .rules
                    .iter()
                    .filter_map(|&i| g.rules.get(i).map(|gr| gr.name.as_str()))
                    .collect::<Vec<_>>()
                    .join(", ")
            })
            .collect();
        lines.push(format!(
            "  #{} {}: run by {} rule state{} ({})\n",
            n.id,
            n.kind.name(),
            states.len(),
            if states.len() == 1 { "" } else { "s" },
            states.join("; ")
        ));
    }
    if lines.is_empty() {
        return String::new();
    }
    let mut s = String::from(
        "\nrun time: operators shared below the roots in this graph are run by each rule state that holds them (each keeps its own partial matches; sharing them at run time is not built yet):\n",
    );
    for l in lines {
        s.push_str(&l);
    }
    s
}

/// The run-time side of the virtual nodes: which rule states the engine runs as families
/// sharing one group record per key (one lookup per event and group for all of them).
fn families_text(rules: &RuleSet, share: bool) -> String {
    let cfg = EngineConfig {
        share,
        ..EngineConfig::default()
    };
    let families = match Engine::new(rules, cfg) {
        Ok(e) => e
            .families()
            .iter()
            .map(|f| f.join(", "))
            .collect::<Vec<_>>(),
        Err(e) => return format!("\nrun time: the engine cannot run these rules: {e}\n"),
    };
    let mut s = String::from("\nrun time: ");
    if families.is_empty() {
        s.push_str(if share {
            "no family (no two rule states are fed by the same events with the same group_by)\n"
        } else {
            "no family (--no-share: every rule on its own)\n"
        });
        return s;
    }
    s.push_str(&format!(
        "{} famil{} of rule states fed by the same events with the same group_by share one group record per key (one lookup per event and group):\n",
        families.len(),
        if families.len() == 1 { "y" } else { "ies" }
    ));
    for (i, f) in families.iter().enumerate() {
        s.push_str(&format!("  family {}: {f}\n", i + 1));
    }
    s
}
