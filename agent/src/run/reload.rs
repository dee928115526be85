//! Rule loading and hot reload (SIGHUP, and a watcher on the rule folders).
//!
//! A reload compiles the rule files; on any error their diagnostics go to stderr and the old
//! rules keep running. On success every shard gets its new share first (engines of unchanged
//! rules keep their state: `Engine::reload`), then the ingest side gets the new routing plan.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration as StdDuration;

use actix::Addr;
use cepheus_core::rules::ir::RuleSet;
use cepheus_core::rules::{Compiled, Level};
use tokio::sync::{mpsc, watch};

use super::builtin;
use super::counters::{SinkCounters, bump};
use super::route::RoutePlan;
use super::shard::{Reload, Shard};
use crate::rulefiles::{folder_of, identity};

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
        self.compile().map(|c| c.rules)
    }

    /// Compiles the rules, printing diagnostics to stderr.
    fn compile(&self) -> anyhow::Result<Compiled> {
        match self {
            RuleSource::Paths(p) => {
                crate::replay::compile_rules_showing(p, crate::replay::AGENT_DIAGNOSTICS_SHOWN)
            }
            RuleSource::Builtin => {
                tracing::info!(
                    "no rules/ folder and no rules.paths: running the built-in rules (heartbeat, ssh, scan, silent agent); make a rules/ folder here and send SIGHUP to run yours"
                );
                let c = builtin::compile_builtin();
                crate::replay::show_diagnostics(
                    &c.diagnostics,
                    crate::replay::AGENT_DIAGNOSTICS_SHOWN,
                );
                Ok(c)
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
                out.push((folder_of(p), notify::RecursiveMode::NonRecursive));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.dedup_by(|a, b| a.0 == b.0);
        out
    }

    /// Whether a rule file it reads is empty (see [`Reloader::run`]).
    fn has_empty_file(&self) -> bool {
        let RuleSource::Paths(paths) = self else {
            return false;
        };
        crate::rulefiles::collect(paths).is_ok_and(|files| {
            files
                .iter()
                .any(|f| std::fs::metadata(f).is_ok_and(|m| m.len() == 0))
        })
    }

    /// The rule files named one by one (not through a folder), made absolute.
    fn named_files(&self) -> Vec<PathBuf> {
        let RuleSource::Paths(paths) = self else {
            return Vec::new();
        };
        paths
            .iter()
            .filter(|p| !p.is_dir())
            .map(|p| std::path::absolute(p).unwrap_or_else(|_| p.clone()))
            .collect()
    }
}

/// Which changes a reload follows: a rule file in a rule folder, a rule file named one by
/// one, an `expect` file, a rule folder itself (deleted and made anew). Not a `*.toml`
/// beside a rule folder (the agent's own config, say), which the folder's parent's watch sees.
struct Relevant {
    /// Rule folders, searched recursively.
    folders: Vec<PathBuf>,
    /// Every watched target folder (the rule folders, the folders of files named one by one).
    targets: Vec<PathBuf>,
    /// Rule files named one by one.
    files: Vec<PathBuf>,
}

impl Relevant {
    fn concerns(&self, p: &Path) -> bool {
        self.targets.iter().any(|t| t == p)
            || self.files.iter().any(|f| f == p)
            || (crate::rulefiles::is_rule_file_name(p)
                && self.folders.iter().any(|d| p.starts_with(d)))
            || crate::rulefiles::is_expect_file(p)
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

/// The watch on the rule folders: a change to a rule file or an `expect` file under them (not
/// to anything else there) sends [`Trigger::Files`]. Each folder's parent is watched too, so
/// a folder deleted and made anew (`git checkout`, `rm -rf rules; cp -r new rules`) triggers a
/// reload, and [`RuleWatcher::rearm`] watches the new folder.
pub struct RuleWatcher {
    watcher: notify::RecommendedWatcher,
    targets: Vec<(PathBuf, notify::RecursiveMode)>,
    /// A folder that could not be watched the last time (said once until it can be again).
    missing: Vec<PathBuf>,
    /// Folders of `expect` files outside the rule folders, watched on their own.
    expect_folders: Vec<PathBuf>,
}

impl RuleWatcher {
    /// Starts watching `source`'s folders (`None` for the built-in rules).
    pub fn start(
        source: &RuleSource,
        tx: mpsc::Sender<Trigger>,
    ) -> anyhow::Result<Option<RuleWatcher>> {
        use notify::Watcher;
        let targets: Vec<(PathBuf, notify::RecursiveMode)> = source
            .watch_targets()
            .into_iter()
            .map(|(p, m)| (std::path::absolute(&p).unwrap_or(p), m))
            .collect();
        if targets.is_empty() {
            return Ok(None);
        }
        // Each path also as its real one: the watcher may report events under either (a rule
        // folder reached through a link and watched again through its real path).
        let both = |paths: Vec<PathBuf>| -> Vec<PathBuf> {
            let mut out = Vec::with_capacity(paths.len() * 2);
            for p in paths {
                out.push(identity(&p));
                out.push(p);
            }
            out.sort();
            out.dedup();
            out
        };
        let relevant = Relevant {
            folders: both(
                targets
                    .iter()
                    .filter(|(_, m)| *m == notify::RecursiveMode::Recursive)
                    .map(|(p, _)| p.clone())
                    .collect(),
            ),
            targets: both(targets.iter().map(|(p, _)| p.clone()).collect()),
            files: both(source.named_files()),
        };
        let watcher = notify::recommended_watcher(move |res: notify::Result<notify::Event>| {
            match res {
                Ok(ev)
                    if !matches!(ev.kind, notify::EventKind::Access(_))
                        && ev.paths.iter().any(|p| relevant.concerns(p)) =>
                {
                    // Full: a reload is already pending, which will read this change too.
                    let _ = tx.try_send(Trigger::Files);
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "rule watcher error"),
            }
        })?;
        let mut w = RuleWatcher {
            watcher,
            targets,
            missing: Vec::new(),
            expect_folders: Vec::new(),
        };
        for (p, _) in &w.targets {
            if !p.is_dir() {
                anyhow::bail!("cannot watch {}: not a folder", p.display());
            }
        }
        w.rearm();
        for (p, _) in &w.targets {
            tracing::info!(path = %p.display(), "watching rules");
        }
        let parents: Vec<PathBuf> = w
            .targets
            .iter()
            .filter_map(|(p, _)| p.parent().map(Path::to_path_buf))
            .collect();
        for parent in parents {
            if let Err(e) = w
                .watcher
                .watch(&parent, notify::RecursiveMode::NonRecursive)
            {
                tracing::warn!(path = %parent.display(), error = %e, "cannot watch the folder holding the rules; a rule folder deleted and made anew will need a SIGHUP");
            }
        }
        Ok(Some(w))
    }

    /// Watches every rule folder again: one deleted and made anew lost its watch with the old
    /// folder. Called before each reload reads the files, so a change made during the reload
    /// triggers another.
    pub fn rearm(&mut self) {
        use notify::Watcher;
        for (p, mode) in &self.targets {
            let _ = self.watcher.unwatch(p);
            match self.watcher.watch(p, *mode) {
                Ok(()) => {
                    if let Some(i) = self.missing.iter().position(|m| m == p) {
                        self.missing.remove(i);
                        tracing::info!(path = %p.display(), "watching rules again");
                    }
                }
                Err(e) if !self.missing.contains(p) => {
                    tracing::warn!(path = %p.display(), error = %e, "cannot watch the rules; watching for the folder to come back");
                    self.missing.push(p.clone());
                }
                Err(_) => {}
            }
        }
        self.watch_expect_folders();
    }

    /// Watches the folders of the `expect` files outside the rule folders (`file =
    /// "../hosts.txt"`), and of the targets of rule files that are links, as the rules last
    /// read them: again after each read of the rules, so a rule file a reload brought in has
    /// its list watched at once.
    pub fn watch_expect_folders(&mut self) {
        use notify::Watcher;
        // (Compared by their real paths: an expect file's folder is canonical, a rule folder
        // may be reached through a link, and one inode watched twice is one watch.)
        let covered: Vec<(PathBuf, notify::RecursiveMode)> = self
            .targets
            .iter()
            .map(|(t, m)| (identity(t), *m))
            .collect();
        let mut wanted: Vec<PathBuf> = crate::rulefiles::expect_files()
            .iter()
            .map(|f| folder_of(f))
            .filter(|d| {
                let d = identity(d);
                !covered.iter().any(|(t, m)| {
                    d == *t || (*m == notify::RecursiveMode::Recursive && d.starts_with(t))
                })
            })
            .collect();
        wanted.sort();
        wanted.dedup();
        for d in &self.expect_folders {
            if !wanted.contains(d) {
                let _ = self.watcher.unwatch(d);
            }
        }
        for d in &wanted {
            let _ = self.watcher.unwatch(d);
            if let Err(e) = self.watcher.watch(d, notify::RecursiveMode::NonRecursive) {
                tracing::warn!(path = %d.display(), error = %e, "cannot watch the folder of an expect file; a change to it will need a SIGHUP");
            }
        }
        self.expect_folders = wanted;
    }
}

/// What the reloader drives.
pub struct Reloader {
    /// Where rules come from.
    pub source: RuleSource,
    /// The ingest side's routing plan.
    pub plan_tx: watch::Sender<Arc<RoutePlan>>,
    /// The shards.
    pub shards: Vec<Addr<Shard>>,
    /// The alert sink, which resolves the kept alerts of retired rules that no engine held.
    pub sink: Option<Addr<super::sink::AlertSink>>,
    /// The number of the last reload (0: none yet), which the shards mark their alerts with.
    pub generation: u64,
    /// Reload counters.
    pub counters: Arc<SinkCounters>,
    /// Quiet time after a change before reading the files (editors write in several steps).
    pub debounce: StdDuration,
    /// The watch on the rule folders, armed again before each reload.
    pub watcher: Option<RuleWatcher>,
    /// Where the watch sends its triggers, for a watch started later (weak: the reloader
    /// runs until every sender is gone).
    pub trigger: mpsc::WeakSender<Trigger>,
    /// Why the last reload failed, until one succeeds (for /stats).
    pub last_error: LastReloadError,
    /// The configuration file the agent started with, and its text then: a reload applies
    /// rules only, so a change to it is said (it needs a restart).
    pub config: Option<(std::path::PathBuf, String)>,
}

/// The dotted keys whose values differ between two TOML documents (`syslog.udp`,
/// `output.webhook`): what changed in a configuration file, in key order.
pub fn changed_keys(before: &str, after: &str) -> Vec<String> {
    fn walk(prefix: &str, a: Option<&toml::Value>, b: Option<&toml::Value>, out: &mut Vec<String>) {
        let empty = toml::Value::Table(toml::Table::new());
        // (A table only one side has: its keys, each said.)
        let (a, b) = match (a, b) {
            (None, Some(t @ toml::Value::Table(_))) => (Some(&empty), Some(t)),
            (Some(t @ toml::Value::Table(_)), None) => (Some(t), Some(&empty)),
            other => other,
        };
        match (a, b) {
            (Some(toml::Value::Table(x)), Some(toml::Value::Table(y))) => {
                let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
                for k in keys {
                    let name = if prefix.is_empty() {
                        k.clone()
                    } else {
                        format!("{prefix}.{k}")
                    };
                    walk(&name, x.get(k), y.get(k), out);
                }
            }
            (x, y) if x != y => out.push(prefix.to_string()),
            _ => {}
        }
    }
    let parse = |t: &str| t.parse::<toml::Table>().map(toml::Value::Table).ok();
    let mut out = Vec::new();
    match (parse(before), parse(after)) {
        (Some(a), Some(b)) => walk("", Some(&a), Some(&b), &mut out),
        // (Unreadable now: said as a whole.)
        _ if before != after => out.push("(the whole file)".to_string()),
        _ => {}
    }
    out
}

/// Why the last reload was refused (`None` once one succeeds): `/stats` shows it, so an
/// operator sees why the rules they edited are not running without reading the log.
pub type LastReloadError = Arc<std::sync::Mutex<Option<ReloadError>>>;

/// A refused reload.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReloadError {
    /// When (RFC 3339, wall clock).
    pub time: String,
    /// The errors, `file:line:column: message` (the first few), or why the rules could not
    /// be read.
    pub errors: Vec<String>,
}

/// The longest a reload waits for the rule files to be quiet after their first change.
const MAX_QUIET_WAIT: StdDuration = StdDuration::from_secs(5);

/// The most errors a refused reload lists in /stats (the log has them all).
const MAX_RELOAD_ERRORS: usize = 5;

impl Reloader {
    /// Runs until every trigger sender is gone.
    pub async fn run(mut self, mut rx: mpsc::Receiver<Trigger>) {
        while let Some(why) = rx.recv().await {
            // Read the files once they have been quiet for `debounce` (an editor or a
            // deployment writes in several steps), but no later than `MAX_QUIET_WAIT` after
            // the first change, so a file rewritten without pause still reloads.
            // An empty rule file is taken for one being written (truncated, its text not in
            // yet: a writer paused between the two would otherwise remove all its rules, and
            // their state, until the next reload) and waited for too, up to the same cap.
            let first = tokio::time::Instant::now();
            loop {
                tokio::time::sleep(self.debounce).await;
                let mut more = false;
                while rx.try_recv().is_ok() {
                    more = true;
                }
                if first.elapsed() >= MAX_QUIET_WAIT {
                    break;
                }
                if !more && !self.source.has_empty_file() {
                    break;
                }
            }
            self.reload(why).await;
        }
    }

    async fn reload(&mut self, why: Trigger) {
        tracing::info!(trigger = ?why, "reloading rules");
        if let Some((path, then)) = &self.config {
            let now = std::fs::read_to_string(path).unwrap_or_default();
            let changed = changed_keys(then, &now);
            if !changed.is_empty() {
                tracing::warn!(
                    config = %path.display(),
                    changed = %changed.join(", "),
                    "the configuration file changed since start: a reload applies the rules only; restart to apply the rest (systemctl restart cepheus)"
                );
                // Said now, not at the next restart: the file as it is would not start.
                if let Err(e) = super::config::Config::load(path) {
                    tracing::error!(
                        config = %path.display(),
                        "the configuration file as it is now would not start the agent (a restart would fail): {e:#}"
                    );
                }
            }
        }
        // systemd (`Type=notify-reload` wants the clock with it): reloading, then ready again
        // whatever the outcome (a refused reload keeps the old rules running).
        let mut reloading = vec![sd_notify::NotifyState::Reloading];
        reloading.extend(sd_notify::NotifyState::monotonic_usec_now().ok());
        let _ = sd_notify::notify(&reloading);
        self.reload_rules().await;
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    }

    async fn reload_rules(&mut self) {
        // Running the built-in rules because there was no `rules/` folder: one made since is
        // what this reload reads (and watches from now on).
        if self.source == RuleSource::Builtin {
            let now = RuleSource::from_paths(&[]);
            if let (false, Some(tx)) = (now == RuleSource::Builtin, self.trigger.upgrade()) {
                tracing::info!(
                    "a rules/ folder exists now: reading it instead of the built-in rules"
                );
                self.watcher = match RuleWatcher::start(&now, tx) {
                    Ok(w) => w,
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot watch rules/; a change to it will need a SIGHUP");
                        None
                    }
                };
                self.source = now;
            }
        }
        if let Some(w) = self.watcher.as_mut() {
            w.rearm();
        }
        let refused = |errors: Vec<String>| {
            let time = crate::flow::live::wall_clock().to_rfc3339();
            if let Ok(mut last) = self.last_error.lock() {
                *last = Some(ReloadError { time, errors });
            }
        };
        // Compiled on a blocking thread: thousands of rules take seconds, during which the
        // API, the TCP accept loop and the watchdog's probes (on this thread) must go on.
        let source = self.source.clone();
        // (The rules' meanings, for the sink, made there too.)
        let compiled = tokio::task::spawn_blocking(move || {
            source.compile().map(|c| {
                let meanings = c.rules.as_ref().map(super::sink::meanings_of);
                (c, meanings)
            })
        })
        .await
        .unwrap_or_else(|e| Err(anyhow::anyhow!("the rule compiler stopped: {e}")));
        // The expect files this read found (a rule file just added may name one elsewhere).
        if let Some(w) = self.watcher.as_mut() {
            w.watch_expect_folders();
        }
        let (rules, meanings) = match compiled {
            Ok((Compiled { rules: Some(r), .. }, Some(m))) => (r, m),
            Ok((c, _)) => {
                bump(&self.counters.reloads_failed, 1);
                let errors: Vec<String> = c
                    .diagnostics
                    .iter()
                    .filter(|d| d.severity == Level::Error)
                    .map(|d| {
                        format!(
                            "{}:{}:{}: {}",
                            d.path.display(),
                            d.line,
                            d.column,
                            d.message
                        )
                    })
                    .collect();
                // The first one in the line itself: a log reader (journalctl -p err) sees
                // where to look without the rendered block above it.
                tracing::error!(
                    errors = errors.len(),
                    first = errors.first().map_or("", String::as_str),
                    "the rules have errors (all above); the old rules keep running until the agent restarts, which it will not do with these rules: fix them before then"
                );
                refused(errors.into_iter().take(MAX_RELOAD_ERRORS).collect());
                return;
            }
            Err(e) => {
                bump(&self.counters.reloads_failed, 1);
                tracing::error!(error = %format!("{e:#}"), "cannot read the rules; the old rules keep running until the agent restarts, which it will not do while they cannot be read: fix this before then");
                refused(vec![format!("{e:#}")]);
                return;
            }
        };
        if let Ok(mut last) = self.last_error.lock() {
            *last = None;
        }
        let shards = self.shards.len();
        let plan = RoutePlan::new(&rules, shards);
        // Each shard sends what its old rules made, then resolves the alerts its engine held
        // of the rules it retires, and marks what its new rules make with this reload's
        // number; the sink then resolves the retired rules' alerts that no engine held (a
        // match's), and not those the new rules made on a shard that reloaded first.
        self.generation += 1;
        // The sink knows the new rules' meanings before any shard runs them (it keeps each
        // firing with its rule's meaning).
        if let Some(sink) = &self.sink {
            let _ = sink
                .send(super::sink::Meanings(self.generation, meanings))
                .await;
        }
        let mut retired = Vec::new();
        for (i, s) in self.shards.iter().enumerate() {
            match s.send(Reload(plan.rules().clone(), self.generation)).await {
                Ok(r) => retired.extend(r),
                Err(e) => {
                    tracing::error!(shard = i, error = %e, "shard did not take the new rules")
                }
            }
        }
        retired.sort_by(|a: &(String, _), b| a.0.cmp(&b.0));
        retired.dedup_by(|a, b| a.0 == b.0);
        // Debug builds only (tests): a crash between the shards' saves of the new rules'
        // state and the resolve of the old rules' match alerts.
        #[cfg(debug_assertions)]
        if std::env::var_os("CEPHEUS_FAULT_ABORT_BEFORE_RETIRE").is_some() {
            // (Time for the shards' saves to be kept.)
            tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            tracing::error!("fault injected by CEPHEUS_FAULT_ABORT_BEFORE_RETIRE: aborting");
            std::process::abort();
        }
        // What changed, for the log: an operator reading it at 3 a.m. learns which rules a
        // reload added, changed or removed (and so whose alerts it resolved), not a count.
        let named = |reason: cepheus_core::alert::Reason| -> String {
            (retired.iter())
                .filter(|(_, r)| *r == reason)
                .map(|(n, _)| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let changed = named(cepheus_core::alert::Reason::RuleChanged);
        let removed = named(cepheus_core::alert::Reason::RuleRemoved);
        let (added, edited) = {
            let before = self.plan_tx.borrow();
            let old: std::collections::HashMap<&str, &cepheus_core::rules::ir::Rule> =
                (before.rules().rules.iter())
                    .map(|r| (r.name.as_str(), &**r))
                    .collect();
            let added = (rules.rules.iter())
                .map(|r| r.name.as_str())
                .filter(|n| !old.contains_key(n))
                .collect::<Vec<_>>()
                .join(", ");
            // Edited without a change of meaning (severity, message, description, the hosts
            // an `expect` lists): its state and alerts go on, the next alerts as edited. (A
            // rule not retired has its meaning but for its `expect` list: compared as is, no
            // canonical form made again.)
            fn looks(r: &cepheus_core::rules::ir::Rule) -> impl PartialEq + '_ {
                (r.severity, &r.message, &r.description, &r.expect)
            }
            let edited = (rules.rules.iter())
                .filter(|r| !retired.iter().any(|(n, _)| *n == r.name))
                .filter(|r| {
                    old.get(r.name.as_str())
                        .is_some_and(|o| looks(o) != looks(r))
                })
                .map(|r| r.name.as_str())
                .collect::<Vec<_>>()
                .join(", ");
            (added, edited)
        };
        // (Sent with no rule too: the sink forgets what it noted of this reload.)
        if let Some(sink) = &self.sink {
            sink.do_send(super::sink::Retire {
                rules: retired,
                time: crate::flow::live::wall_clock(),
                reload: Some(self.generation),
            });
        }
        let _ = self.plan_tx.send(Arc::new(plan));
        bump(&self.counters.reloads, 1);
        tracing::info!(
            rules = rules.rules.len(),
            added = %added,
            changed = %changed,
            edited = %edited,
            removed = %removed,
            lists = %crate::rulefiles::lists_summary(&rules),
            "rules reloaded"
        );
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn changed_keys_name_each_changed_value() {
        let before =
            "[syslog]\nudp = [\"127.0.0.1:5514\"]\ntcp = []\n[api]\nlisten = \"127.0.0.1:9514\"\n";
        let after = "[syslog]\nudp = [\"127.0.0.1:5514\", \"0.0.0.0:514\"]\ntcp = []\n[api]\nlisten = \"127.0.0.1:9514\"\n[output]\nwebhook = \"http://x\"\nfile = \"a\"\n";
        assert_eq!(
            super::changed_keys(before, after),
            ["output.file", "output.webhook", "syslog.udp"]
        );
        assert!(super::changed_keys(before, before).is_empty());
        // (Comments and layout change nothing.)
        assert!(super::changed_keys(before, &format!("# hi\n{before}")).is_empty());
        assert_eq!(super::changed_keys(before, "[oops"), ["(the whole file)"]);
    }
}
