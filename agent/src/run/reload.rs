//! Rule loading and hot reload (SIGHUP, and a watcher on the rule folders).
//!
//! A reload compiles the rule files; on any error their diagnostics go to stderr and the old
//! rules keep running. On success every shard gets its new share first (engines of unchanged
//! rules keep their state: `Engine::reload`), then the ingest side gets the new routing plan.

use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration as StdDuration;

use actix::Addr;
use cepheus_core::rules::ir::RuleSet;
use tokio::sync::{mpsc, watch};

use super::builtin;
use super::counters::{SinkCounters, bump};
use super::route::RoutePlan;
use super::shard::{Reload, Shard};

/// Where the rules come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleSource {
    /// Files and folders on disk.
    Paths(Vec<PathBuf>),
    /// The rules built into the binary.
    Builtin,
}

impl RuleSource {
    /// `rules.paths`, else `rules/` when it exists, else the built-in rules.
    pub fn from_paths(paths: &[PathBuf]) -> RuleSource {
        if !paths.is_empty() {
            return RuleSource::Paths(paths.to_vec());
        }
        if Path::new("rules").is_dir() {
            return RuleSource::Paths(vec![PathBuf::from("rules")]);
        }
        RuleSource::Builtin
    }

    /// Compiles the rules, printing diagnostics to stderr; `None` when they have errors.
    pub fn load(&self) -> anyhow::Result<Option<RuleSet>> {
        match self {
            RuleSource::Paths(p) => crate::replay::load_rules(p),
            RuleSource::Builtin => {
                let c = builtin::compile_builtin();
                let color = std::io::stderr().is_terminal();
                for d in &c.diagnostics {
                    eprint!("{}", crate::rules_cmd::render(d, color));
                }
                Ok(c.rules)
            }
        }
    }

    /// What to watch: folders recursively, files through their folder.
    pub fn watch_targets(&self) -> Vec<(PathBuf, notify::RecursiveMode)> {
        let RuleSource::Paths(paths) = self else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for p in paths {
            if p.is_dir() {
                out.push((p.clone(), notify::RecursiveMode::Recursive));
            } else {
                let parent = match p.parent() {
                    Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
                    _ => PathBuf::from("."),
                };
                out.push((parent, notify::RecursiveMode::NonRecursive));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.dedup_by(|a, b| a.0 == b.0);
        out
    }
}

/// Why a reload was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// SIGHUP.
    Hangup,
    /// A rule file changed.
    Files,
}

/// Starts a watcher that sends [`Trigger::Files`] on a change to a rule file or an `expect`
/// file under the watched folders (not to anything else there).
pub fn watch(
    source: &RuleSource,
    tx: mpsc::Sender<Trigger>,
) -> anyhow::Result<Option<notify::RecommendedWatcher>> {
    use notify::Watcher;
    let targets = source.watch_targets();
    if targets.is_empty() {
        return Ok(None);
    }
    let mut w = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
        match res {
            Ok(ev)
                if !matches!(ev.kind, notify::EventKind::Access(_))
                    && ev
                        .paths
                        .iter()
                        .any(|p| crate::rulefiles::is_rule_material(p)) =>
            {
                // Full: a reload is already pending, which will read this change too.
                let _ = tx.try_send(Trigger::Files);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "rule watcher error"),
        }
    })?;
    for (p, mode) in targets {
        w.watch(&p, mode)
            .map_err(|e| anyhow::anyhow!("cannot watch {}: {e}", p.display()))?;
        tracing::info!(path = %p.display(), "watching rules");
    }
    Ok(Some(w))
}

/// What the reloader drives.
pub struct Reloader {
    /// Where rules come from.
    pub source: RuleSource,
    /// The ingest side's routing plan.
    pub plan_tx: watch::Sender<Arc<RoutePlan>>,
    /// The shards.
    pub shards: Vec<Addr<Shard>>,
    /// Reload counters.
    pub counters: Arc<SinkCounters>,
    /// Quiet time after a change before reading the files (editors write in several steps).
    pub debounce: StdDuration,
}

impl Reloader {
    /// Runs until every trigger sender is gone.
    pub async fn run(self, mut rx: mpsc::Receiver<Trigger>) {
        while let Some(why) = rx.recv().await {
            tokio::time::sleep(self.debounce).await;
            while rx.try_recv().is_ok() {}
            self.reload(why).await;
        }
    }

    async fn reload(&self, why: Trigger) {
        tracing::info!(trigger = ?why, "reloading rules");
        let rules = match self.source.load() {
            Ok(Some(r)) => r,
            Ok(None) => {
                bump(&self.counters.reloads_failed, 1);
                tracing::error!("the rules have errors (above); the old rules keep running");
                return;
            }
            Err(e) => {
                bump(&self.counters.reloads_failed, 1);
                tracing::error!(error = %format!("{e:#}"), "cannot read the rules; the old rules keep running");
                return;
            }
        };
        let shards = self.shards.len();
        let plan = RoutePlan::new(&rules, shards);
        for (i, s) in self.shards.iter().enumerate() {
            if let Err(e) = s.send(Reload(plan.rules().clone())).await {
                tracing::error!(shard = i, error = %e, "shard did not take the new rules");
            }
        }
        let _ = self.plan_tx.send(Arc::new(plan));
        bump(&self.counters.reloads, 1);
        tracing::info!(rules = rules.rules.len(), "rules reloaded");
    }
}
