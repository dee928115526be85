//! `cepheus alerts`: the alerts of a running agent, as its store has them, through its API
//! (`GET /alerts`): the ones firing now, or the latest changes. When no agent answers, the
//! listing is read from the store itself (said on stderr): what it held when the agent
//! stopped.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use cepheus_core::rules::ir::Severity;

use crate::api_client::{Answer, Client, Unreachable};
use crate::run::api::Listing;

/// Arguments of `cepheus alerts`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "When no agent answers, the listing is read from its store (`store.path`), as the agent left it (said on stderr); `ack` needs the running agent.\n\nExit status: 0 when the agent or its store answered (even with no alert), 1 when `ack` names no firing alert, 2 when neither can be read."
)]
pub struct AlertsArgs {
    /// `ack ID`: acknowledge an alert.
    #[command(subcommand)]
    pub command: Option<AlertsCommand>,
    /// The last N alert changes (firing, resolved, retracted), oldest first, instead of the
    /// alerts firing now (at most 20,000).
    #[arg(long, value_name = "N", value_parser = at_least_one)]
    pub recent: Option<usize>,
    /// Only the alerts of this rule (with --recent: among the last 20,000 changes).
    #[arg(long, value_name = "NAME")]
    pub rule: Option<String>,
    /// Only the alerts at least this severe: critical, high, medium, low or info.
    #[arg(long, value_name = "LEVEL", value_parser = severity)]
    pub severity: Option<Severity>,
    /// Print the alert objects as JSON lines (the shape of `replay` and the store) instead of
    /// a table.
    #[arg(long)]
    pub json: bool,
    /// The agent's configuration file (for `api.socket`, `api.listen`, `api.token_file` and
    /// `store.path`). Default:
    /// /etc/cepheus/cepheus.toml when readable, else the built-in defaults (API on
    /// 127.0.0.1:9514). Before or after `ack`.
    #[arg(long, value_name = "FILE", global = true)]
    pub config: Option<PathBuf>,
}

/// `--recent N`: a number of changes, 1 or more.
fn at_least_one(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(0) => {
            Err("0 lists nothing: give the number of latest changes to list (1 or more)".into())
        }
        Ok(n) => Ok(n),
        Err(e) => Err(e.to_string()),
    }
}

/// `--severity LEVEL`: a rule file's spelling.
fn severity(s: &str) -> Result<Severity, String> {
    Severity::parse(s).ok_or_else(|| "give one of critical, high, medium, low, info".into())
}

impl AlertsArgs {
    /// The listing its flags ask for (of the API, or of the store itself).
    fn listing(&self) -> Listing {
        Listing {
            recent: self.recent,
            rule: self.rule.clone(),
            severity: self.severity,
        }
    }
}

/// `--by NAME`: a name, not blank (a blank one would be recorded as nobody).
fn non_blank(s: &str) -> Result<String, String> {
    match s.trim() {
        "" => Err("a blank name records nobody: give who acknowledges (default: the user running the command)".into()),
        t => Ok(t.to_string()),
    }
}

/// An alert's id as the agent writes it: 16 hexadecimal digits.
fn alert_id(s: &str) -> Result<String, String> {
    let t = s.trim();
    if t.len() == 16 && t.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(t.to_ascii_lowercase())
    } else {
        Err(format!(
            "`{t}` is no alert id: an id is 16 hexadecimal digits (the `id` of `cepheus alerts --json`)"
        ))
    }
}

/// `cepheus alerts ...`.
#[derive(clap::Subcommand, Debug)]
pub enum AlertsCommand {
    /// Acknowledge a firing alert: it stays firing and still resolves; listings show who
    /// acknowledged it and when (`ack`), and so does its resolve.
    Ack {
        /// The alert's id (16 hex digits, the ID column of `cepheus alerts`).
        #[arg(value_parser = alert_id)]
        id: String,
        /// Who acknowledges it. Default: the user running the command.
        #[arg(long, value_name = "NAME", value_parser = non_blank)]
        by: Option<String>,
    },
}

/// What to say when fewer alerts are listed than are firing: a listing holds the newest
/// 20,000 firing alerts at most, and 64 MiB of JSON (a listing cut at 20,000 names that
/// bound; a shorter one names both, since alerts may also have resolved between the count
/// and the listing).
fn cut_note(firing: u64, listed: usize) -> Option<String> {
    use crate::run::api::{MAX_FIRING, MAX_LISTING_BYTES};
    if firing <= listed as u64 {
        return None;
    }
    let bound = if listed >= MAX_FIRING {
        format!("a listing holds at most {MAX_FIRING}")
    } else {
        format!(
            "a listing holds at most {MAX_FIRING} alerts and {} MiB of JSON",
            MAX_LISTING_BYTES >> 20
        )
    };
    Some(format!(
        "note: {firing} alerts are firing; listed are {listed}, the most severe then the newest ({bound}; --rule and --severity narrow it)"
    ))
}

/// Runs `cepheus alerts`.
pub fn run(args: AlertsArgs) -> ExitCode {
    if let Some(AlertsCommand::Ack { id, by }) = &args.command {
        if args.recent.is_some() || args.json || args.listing().filtered() {
            eprintln!(
                "error: --recent, --rule, --severity and --json shape a listing; `ack` lists nothing"
            );
            return ExitCode::from(2);
        }
        return ack(id, by.as_deref(), args.config.as_ref());
    }
    match fetch(&args) {
        Ok((mut list, firing)) => {
            let mut out = std::io::stdout().lock();
            let written = if args.json {
                list.iter().try_for_each(|a| writeln!(out, "{a}"))
            } else {
                // (A table on a terminal: what remote senders chose is made printable; the
                // JSON lines escape it already.)
                list.iter_mut().for_each(cepheus_tui::ui::printable);
                write_table(&mut out, &list, args.recent.is_some())
            };
            // A closed pipe (`| head`) is no error of ours.
            if let Err(e) = written.and_then(|()| out.flush())
                && e.kind() != std::io::ErrorKind::BrokenPipe
            {
                eprintln!("error: {e}");
                return ExitCode::from(2);
            }
            if let Some(n) = args.recent.filter(|&n| n > crate::run::api::MAX_RECENT) {
                eprintln!(
                    "note: --recent {n}: a listing holds the last {} changes at most",
                    crate::run::api::MAX_RECENT
                );
            }
            if let Some(note) = firing.and_then(|n| cut_note(n, list.len())) {
                eprintln!("{note}");
            }
            // Filtered, the total is not known: a listing as full as one can be is said.
            let filtered = args.listing().filtered();
            let bytes = || list.iter().map(|a| a.to_string().len() + 1).sum::<usize>();
            if filtered
                && args.recent.is_none()
                && (list.len() >= crate::run::api::MAX_FIRING
                    || bytes() + (1 << 16) >= crate::run::api::MAX_LISTING_BYTES)
            {
                eprintln!(
                    "note: listed are {}, the most severe then the newest; more may match (a listing holds at most {} alerts and {} MiB of JSON)",
                    list.len(),
                    crate::run::api::MAX_FIRING,
                    crate::run::api::MAX_LISTING_BYTES >> 20
                );
            }
            if list.is_empty() && !args.json {
                if let Some(why) = args.rule.as_deref().and_then(|r| no_such_rule(&args, r)) {
                    eprintln!("{why}");
                }
                match args.recent {
                    None if filtered => {
                        eprintln!("no such alert is firing")
                    }
                    None => eprintln!(
                        "no alert is firing (`cepheus alerts --recent 20` lists the latest changes)"
                    ),
                    Some(_) if filtered => {
                        eprintln!("no such alert change among the last 20,000")
                    }
                    Some(_) => eprintln!("the store holds no alert change"),
                }
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// What to say when the running agent has no rule `name` (a typo in `--rule` lists nothing,
/// as a rule that is quiet does): `None` when it has, or no agent answers.
fn no_such_rule(args: &AlertsArgs, name: &str) -> Option<String> {
    let client = Client::new(args.config.as_ref()).ok()?;
    let Ok(Answer::Ok(stats)) = client.get("/stats") else {
        return None;
    };
    let stats: serde_json::Value = serde_json::from_str(&stats).ok()?;
    let mut names: Vec<&str> = (stats["rules"].as_array()?.iter())
        .filter_map(|r| r["rule"].as_str())
        .collect();
    if names.contains(&name) {
        return None;
    }
    names.sort_unstable();
    const SHOWN: usize = 20;
    let mut list = names[..names.len().min(SHOWN)].join(", ");
    if names.len() > SHOWN {
        list.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    Some(format!(
        "note: the agent runs no rule named `{name}` (its rules: {list})"
    ))
}

/// `cepheus alerts ack`.
fn ack(id: &str, by: Option<&str>, config: Option<&PathBuf>) -> ExitCode {
    let by = by
        .map(String::from)
        .unwrap_or_else(crate::api_client::current_user);
    let sent = Client::new(config)
        .and_then(|c| c.post_json("/alerts/ack", serde_json::json!({ "id": id, "by": by })));
    match sent {
        Ok(Answer::Ok(text)) => {
            let said: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            match (
                said["before"]["by"].as_str(),
                said["before"]["time"].as_str(),
            ) {
                (Some(who), Some(when)) => println!(
                    "acknowledged alert {id} (by {by} now; it was acknowledged by {who} at {when})"
                ),
                _ => println!("acknowledged alert {id}"),
            }
            ExitCode::SUCCESS
        }
        Ok(Answer::NotFound(text)) => {
            let said: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            match said["error"].as_str() {
                Some(e) => eprintln!("error: {e}"),
                None => eprintln!(
                    "error: the agent has no alerts to acknowledge (an agent older than its store?)"
                ),
            }
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// The listing, and for the firing alerts how many fire in all (the store's count, when
/// known).
fn fetch(args: &AlertsArgs) -> anyhow::Result<(Vec<serde_json::Value>, Option<u64>)> {
    let client = Client::new(args.config.as_ref())?;
    let mut query = Vec::new();
    if let Some(n) = args.recent {
        query.push(format!("recent={n}"));
    }
    if let Some(r) = &args.rule {
        query.push(format!("rule={}", crate::groups_cmd::query_escape(r)));
    }
    if let Some(s) = args.severity {
        query.push(format!("severity={}", s.name()));
    }
    let path = if query.is_empty() {
        "/alerts".to_string()
    } else {
        format!("/alerts?{}", query.join("&"))
    };
    let listing = args.listing();
    // No agent answers: the store itself, as the agent left it.
    let from_store_instead = |e: anyhow::Error| match e.downcast_ref::<Unreachable>() {
        Some(_) => {
            from_store(client.store(), &listing).map_err(|why| anyhow::anyhow!("{e}; {why}"))
        }
        None => Err(e),
    };
    // The count first: alerts that fire between the two reads are not taken for a cut.
    let firing = match args.recent {
        None if !listing.filtered() => match client.get("/stats") {
            Ok(Answer::Ok(stats)) => serde_json::from_str::<serde_json::Value>(&stats)
                .ok()
                .and_then(|v| v["store"]["firing"].as_u64()),
            Err(e) if e.downcast_ref::<Unreachable>().is_some() => return from_store_instead(e),
            _ => None,
        },
        _ => None,
    };
    let answer = match client.get(&path) {
        Ok(a) => a,
        Err(e) => return from_store_instead(e),
    };
    match answer {
        Answer::Ok(text) => Ok((serde_json::from_str(&text)?, firing)),
        Answer::NotFound(text) => anyhow::bail!(
            "the agent has no alerts to give: {} (an agent older than its store?)",
            text.trim()
        ),
    }
}

/// The listing read from the store at `dir` itself, when no agent answers: what the store
/// held when the agent stopped. `Err`: why it cannot be read (the caller says it with the
/// reason the agent could not be reached).
fn from_store(
    dir: &Path,
    listing: &Listing,
) -> Result<(Vec<serde_json::Value>, Option<u64>), String> {
    // A store opened by another user than the agent's may gain files the agent cannot write
    // (root's, say): only its owner reads it here. (Asked first: a folder this user cannot
    // look into holds a store all the same.)
    {
        use std::os::unix::fs::MetadataExt;
        let meta = match std::fs::metadata(dir) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(format!("and there is no store at {}", dir.display()));
            }
            Err(e) => return Err(format!("and its store at {}: {e}", dir.display())),
        };
        if meta.uid() != rustix::process::geteuid().as_raw() {
            return Err(format!(
                "and its store at {} belongs to another user (uid {}): read it as that user, e.g. `sudo -u '#{}' cepheus alerts`",
                dir.display(),
                meta.uid(),
                meta.uid()
            ));
        }
    }
    // Never make a store where there is none (sled would create one).
    match std::fs::metadata(dir.join("conf")) {
        Ok(m) if m.is_file() => {}
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            return Err(format!("and its store at {}: {e}", dir.display()));
        }
        _ => return Err(format!("and there is no store at {}", dir.display())),
    }
    // Another `cepheus alerts` may be reading it for a moment (two operators at once).
    let store = cepheus_store::Store::open_waiting(
        dir,
        u64::MAX,
        std::time::Duration::from_secs(10),
        || eprintln!("note: the store at {} is in use by another process: waiting up to 10 s for it", dir.display()),
    )
    .map_err(|e| {
        if e.not_writable() {
            format!(
                "and {e}: the store's files are opened for writing even to be read; make the folder writable (`chmod -R u+w {d}`), or copy it (`cp -a {d} /tmp/cepheus-store-copy`) and name the copy in a config's store.path",
                d = dir.display()
            )
        } else {
            format!("and {e}")
        }
    })?;
    let list = crate::run::api::alert_listing(&store, listing).map_err(|e| format!("and {e}"))?;
    eprintln!(
        "note: no agent answers; read from its store at {}, as it was when the agent stopped",
        dir.display()
    );
    let firing = (listing.recent.is_none() && !listing.filtered()).then(|| store.counts().1);
    Ok((
        list.iter()
            .filter_map(|a| serde_json::from_str(&a.json).ok())
            .collect(),
        firing,
    ))
}

/// One line per alert: id, time, (state,) severity, rule, group, message (with its reason
/// and who acknowledged it); columns aligned.
fn write_table(
    out: &mut impl Write,
    list: &[serde_json::Value],
    with_state: bool,
) -> std::io::Result<()> {
    let text = |v: &serde_json::Value, k: &str| v[k].as_str().unwrap_or("").to_string();
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|a| {
            let group = cepheus_tui::ui::group(a);
            let mut row = vec![text(a, "id"), text(a, "time")];
            if with_state {
                row.push(text(a, "state"));
            }
            row.extend([text(a, "severity"), text(a, "rule"), group]);
            let mut message = text(a, "message");
            if let Some(r) = a["reason"].as_str() {
                message.push_str(&format!(" ({r})"));
            }
            if let Some(by) = a["ack"]["by"].as_str() {
                message.push_str(&format!(" [acked by {by}]"));
            }
            if let Some(id) = a["silenced"]["id"].as_str() {
                message.push_str(&format!(" [silenced by {id}]"));
            }
            if let Some(rule) = a["inhibited"]["rule"].as_str() {
                message.push_str(&format!(" [inhibited by {rule}]"));
            }
            row.push(message);
            row
        })
        .collect();
    let mut header = vec!["ID", "TIME"];
    if with_state {
        header.push("STATE");
    }
    header.extend(["SEVERITY", "RULE", "GROUP", "MESSAGE"]);
    write_columns(out, &header, &rows)
}

/// Writes `rows` under `header` in columns two spaces apart (the last one unpadded);
/// nothing when there is no row. The tables of `cepheus alerts` and `cepheus groups list`.
/// A column is padded to at most [`MAX_PAD`] characters: a longer cell is written whole
/// (a key is copied from here to `groups forget`) and shifts the rest of its own row only,
/// so one 500-character host name does not widen every line.
pub(crate) fn write_columns(
    out: &mut impl Write,
    header: &[&str],
    rows: &[Vec<String>],
) -> std::io::Result<()> {
    if rows.is_empty() {
        return Ok(());
    }
    // (Padded by the cells a text takes on a terminal, not its characters: CJK and emoji
    // take two, combining accents none.)
    use unicode_width::UnicodeWidthStr;
    let mut widths: Vec<usize> = header.iter().map(|h| h.width()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.width().min(MAX_PAD));
        }
    }
    let last = header.len() - 1;
    let mut line = |cells: &mut dyn Iterator<Item = &str>| -> std::io::Result<()> {
        for (i, c) in cells.enumerate() {
            if i == last {
                writeln!(out, "{c}")?;
            } else {
                let pad = widths[i].saturating_sub(c.width());
                write!(out, "{c}{:pad$}  ", "")?;
            }
        }
        Ok(())
    };
    line(&mut header.iter().copied())?;
    for r in rows {
        line(&mut r.iter().map(String::as_str))?;
    }
    Ok(())
}

/// The widest a table's column is padded to.
const MAX_PAD: usize = 40;

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// The note on a cut listing names the bound that cut it: the count, or the bytes (an
    /// audit found 15,754 large alerts "cut at 20,000").
    #[test]
    fn a_cut_listing_names_what_cut_it() {
        assert_eq!(cut_note(100, 100), None);
        assert_eq!(
            cut_note(25_000, 20_000).unwrap(),
            "note: 25000 alerts are firing; listed are 20000, the most severe then the newest (a listing holds at most 20000; --rule and --severity narrow it)"
        );
        assert_eq!(
            cut_note(25_000, 15_754).unwrap(),
            "note: 25000 alerts are firing; listed are 15754, the most severe then the newest (a listing holds at most 20000 alerts and 64 MiB of JSON; --rule and --severity narrow it)"
        );
    }

    /// A cell wider than the padding cap is written whole and shifts its own row only.
    #[test]
    fn one_long_cell_does_not_widen_every_row() {
        let long = "h".repeat(500);
        let rows = vec![
            vec![long.clone(), "yes".to_string()],
            vec!["web1".to_string(), "no".to_string()],
        ];
        let mut out = Vec::new();
        write_columns(&mut out, &["GROUP", "FIRING"], &rows).unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], format!("{long}  yes"));
        assert_eq!(lines[2], format!("{:<40}  no", "web1"));
        assert_eq!(lines[0], format!("{:<40}  FIRING", "GROUP"));
    }

    /// Found by an audit: wide (CJK, emoji) and combining characters shifted the columns
    /// after them; the columns line up in terminal cells.
    #[test]
    fn wide_and_combining_characters_keep_the_columns_aligned() {
        use unicode_width::UnicodeWidthStr;
        let rows: Vec<Vec<String>> = [
            "plainhost",
            "日本語ホスト名",
            "emoji🔥🔥host",
            "combi\u{301}ned",
        ]
        .iter()
        .map(|h| vec![h.to_string(), "no".to_string()])
        .collect();
        let mut out = Vec::new();
        write_columns(&mut out, &["GROUP", "FIRING"], &rows).unwrap();
        let text = String::from_utf8(out).unwrap();
        let at: Vec<usize> = text
            .lines()
            .map(|l| {
                let cut = l.rfind("  ").unwrap();
                l[..cut + 2].width()
            })
            .collect();
        assert!(at.iter().all(|&w| w == at[0]), "{at:?}\n{text}");
        assert_eq!(at[0], "日本語ホスト名".width() + 2);
    }

    #[test]
    fn the_table_aligns_columns_and_names_the_reason() {
        let list: Vec<serde_json::Value> = vec![
            serde_json::json!({"id": "00000000000000a1", "time": "2026-12-03T05:00:00Z", "state": "firing", "severity": "critical", "rule": "hb", "group": {"host": "web1"}, "message": "no heartbeat from web1", "reason": "outage", "ack": {"by": "bob", "time": "2026-12-03T05:00:02Z"}}),
            serde_json::json!({"id": "00000000000000b2", "time": "2026-12-03T05:00:01Z", "state": "resolved", "severity": "high", "rule": "ssh-bruteforce", "group": {"src": "10.0.0.1", "port": 22}, "message": "m"}),
        ];
        let mut out = Vec::new();
        write_table(&mut out, &list, true).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert_eq!(
            text,
            "ID                TIME                  STATE     SEVERITY  RULE            GROUP                 MESSAGE\n\
             00000000000000a1  2026-12-03T05:00:00Z  firing    critical  hb              host=web1             no heartbeat from web1 (outage) [acked by bob]\n\
             00000000000000b2  2026-12-03T05:00:01Z  resolved  high      ssh-bruteforce  port=22,src=10.0.0.1  m\n"
        );
        let mut out = Vec::new();
        write_table(&mut out, &[], false).unwrap();
        assert!(out.is_empty());
    }
}
