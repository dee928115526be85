//! `cepheus silence add|list|expire`: mute, for a while, the notifications (webhook, syslog
//! forward) of a rule's or a group's alerts on a running agent, through its API (`GET
//! /silences`, `POST /silences/add`, `POST /silences/expire`; see `run::silence`).

use std::path::PathBuf;
use std::process::ExitCode;

use crate::api_client::{Answer, Client};

/// `cepheus silence ...`.
#[derive(clap::Subcommand, Debug)]
pub enum SilenceCommand {
    /// Mute the alerts of a rule, a group, severities (or several of these) that begin firing from now (or `--from`)
    /// until the silence ends: they are kept, listed and written to stdout and the output
    /// file with `silenced`, but the webhook and syslog outputs send neither them nor their
    /// ends. Those still firing when the silence ends are sent then. Prints the silence's id.
    /// Exit 0 when made, 2 when refused or the agent cannot be reached.
    Add(AddArgs),
    /// List the agent's silences: pending, active, and those ended in the last 7 days.
    List(ListArgs),
    /// End a silence now: the alerts it muted that still fire are sent. Exit 0 when ended, 1
    /// when the agent has no such silence, 2 when it cannot be reached.
    Expire(ExpireArgs),
}

/// Arguments of `cepheus silence add`.
#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("end").required(true).args(["duration", "until"])))]
pub struct AddArgs {
    /// Only this rule's alerts (by name). With none of --rule, --group and --severity
    /// nothing is muted, and the silence is refused.
    #[arg(long)]
    pub rule: Option<String>,
    /// Only the alerts of this severity (`critical`, `high`, `medium`, `low`, `info`); repeat
    /// it for several (`--severity low --severity info`).
    #[arg(long, value_name = "SEVERITY", value_parser = severity)]
    pub severity: Vec<String>,
    /// Only the alerts whose group has this value: `FIELD=VALUE` (`host=web-1`); repeat it
    /// for several fields, all of which must match.
    #[arg(long, value_name = "FIELD=VALUE", value_parser = matcher)]
    pub group: Vec<(String, String)>,
    /// How long it lasts (`2h`, `30m`, `1d`).
    #[arg(long = "for", value_name = "DURATION")]
    pub duration: Option<String>,
    /// When it ends (RFC 3339: `2026-12-06T23:00:00Z`).
    #[arg(long, value_name = "TIME")]
    pub until: Option<String>,
    /// When it begins (RFC 3339). Default: now.
    #[arg(long, value_name = "TIME")]
    pub from: Option<String>,
    /// Why (shown by `silence list`).
    #[arg(long, default_value = "")]
    pub comment: String,
    /// Who silences. Default: the user running the command.
    #[arg(long, value_name = "NAME")]
    pub by: Option<String>,
    /// The agent's configuration file (for `api.socket`, `api.listen` and `api.token_file`).
    /// Default: /etc/cepheus/cepheus.toml when readable, else the built-in defaults (API on
    /// 127.0.0.1:9514).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Arguments of `cepheus silence list`.
#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// Print the agent's answer as JSON (`GET /silences`) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// See `silence add --config`.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Arguments of `cepheus silence expire`.
#[derive(clap::Args, Debug)]
pub struct ExpireArgs {
    /// The silence's id (16 hex digits, the ID column of `silence list`).
    pub id: String,
    /// See `silence add --config`.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// `FIELD=VALUE`.
fn matcher(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((f, v)) if !f.trim().is_empty() => Ok((f.trim().to_string(), v.to_string())),
        _ => Err(format!(
            "`{s}` is no FIELD=VALUE (a group_by field and its value: host=web-1)"
        )),
    }
}

/// A severity's name as rules and alerts spell it.
fn severity(s: &str) -> Result<String, String> {
    let s = s.trim().to_ascii_lowercase();
    match cepheus_core::rules::ir::Severity::parse(&s) {
        Some(_) => Ok(s),
        None => Err(format!(
            "`{s}` is no severity (critical, high, medium, low or info)"
        )),
    }
}

/// Runs `cepheus silence ...`.
pub fn run(cmd: SilenceCommand) -> ExitCode {
    match cmd {
        SilenceCommand::Add(args) => add(&args),
        SilenceCommand::List(args) => list(&args),
        SilenceCommand::Expire(args) => expire(&args),
    }
}

fn add(args: &AddArgs) -> ExitCode {
    // (Every field given must match: one given twice matches nothing sensible.)
    if let Some((f, _)) = args.group.iter().enumerate().find_map(|(i, (f, _))| {
        args.group[..i]
            .iter()
            .any(|(g, _)| g == f)
            .then_some((f, i))
    }) {
        eprintln!(
            "error: --group names `{f}` twice: a silence mutes the alerts whose group has every value given (make one silence per value)"
        );
        return ExitCode::from(2);
    }
    let group: serde_json::Map<String, serde_json::Value> = args
        .group
        .iter()
        .map(|(f, v)| (f.clone(), serde_json::Value::String(v.clone())))
        .collect();
    let by = args
        .by
        .clone()
        .unwrap_or_else(crate::api_client::current_user);
    let mut body = serde_json::json!({ "group": group, "by": by, "comment": args.comment });
    if let Some(r) = &args.rule {
        body["rule"] = r.as_str().into();
    }
    if !args.severity.is_empty() {
        body["severity"] = args.severity.clone().into();
    }
    if let Some(d) = &args.duration {
        body["for"] = d.as_str().into();
    }
    if let Some(t) = &args.until {
        body["ends_at"] = t.as_str().into();
    }
    if let Some(t) = &args.from {
        body["starts_at"] = t.as_str().into();
    }
    let sent = Client::new(args.config.as_ref()).and_then(|c| c.post_json("/silences/add", body));
    match sent {
        Ok(Answer::Ok(text)) => {
            let s: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            if s["existing"] == true {
                println!(
                    "silence {} already mutes these alerts, until {}",
                    s["id"].as_str().unwrap_or("?"),
                    to_second(s["ends_at"].as_str().unwrap_or("?"))
                );
                return ExitCode::SUCCESS;
            }
            println!(
                "silence {} {} until {}",
                s["id"].as_str().unwrap_or("?"),
                if s["state"] == "pending" {
                    format!(
                        "pending (from {})",
                        to_second(s["starts_at"].as_str().unwrap_or("?"))
                    )
                } else {
                    "active".to_string()
                },
                to_second(s["ends_at"].as_str().unwrap_or("?"))
            );
            ExitCode::SUCCESS
        }
        Ok(Answer::NotFound(text)) => {
            eprintln!("error: {}", text.trim());
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn list(args: &ListArgs) -> ExitCode {
    let answer = Client::new(args.config.as_ref()).and_then(|c| c.get("/silences"));
    let text = match answer {
        Ok(Answer::Ok(text)) => text,
        Ok(Answer::NotFound(text)) => {
            eprintln!("error: {}", text.trim());
            return ExitCode::from(2);
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let mut doc: serde_json::Value = match serde_json::from_str(&text) {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: the agent's answer is not JSON: {e}");
            return ExitCode::from(2);
        }
    };
    if args.json {
        println!("{doc}");
        return ExitCode::SUCCESS;
    }
    // (What an operator typed is made printable on a terminal.)
    cepheus_tui::ui::printable(&mut doc);
    let mut out = std::io::stdout().lock();
    let _ = write_silences(&mut out, &doc);
    ExitCode::SUCCESS
}

/// The table of `silence list`.
fn write_silences(out: &mut impl std::io::Write, doc: &serde_json::Value) -> std::io::Result<()> {
    let list = doc.as_array().cloned().unwrap_or_default();
    let text = |v: &serde_json::Value| v.as_str().unwrap_or("").to_string();
    let rows: Vec<Vec<String>> = list
        .iter()
        .map(|s| {
            let group: Vec<String> = s["group"]
                .as_object()
                .map(|o| {
                    o.iter()
                        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                        .collect()
                })
                .unwrap_or_default();
            vec![
                text(&s["id"]),
                text(&s["state"]),
                s["rule"].as_str().unwrap_or("*").to_string(),
                if group.is_empty() {
                    "*".to_string()
                } else {
                    group.join(",")
                },
                match s["severity"].as_array() {
                    Some(v) if !v.is_empty() => {
                        let names: Vec<&str> = v.iter().filter_map(|s| s.as_str()).collect();
                        names.join(",")
                    }
                    _ => "*".to_string(),
                },
                to_second(&text(&s["starts_at"])),
                to_second(&text(&s["ends_at"])),
                text(&s["by"]),
                text(&s["comment"]),
            ]
        })
        .collect();
    let header = [
        "ID", "STATE", "RULE", "GROUP", "SEVERITY", "FROM", "UNTIL", "BY", "COMMENT",
    ];
    crate::alerts_cmd::write_columns(out, &header, &rows)?;
    writeln!(out, "{} silence(s)", rows.len())
}

/// An RFC 3339 time without its fraction of a second (`2026-12-06T15:06:43Z`).
fn to_second(t: &str) -> String {
    match (t.find('.'), t.strip_suffix('Z')) {
        (Some(dot), Some(_)) => format!("{}Z", &t[..dot]),
        _ => t.to_string(),
    }
}

fn expire(args: &ExpireArgs) -> ExitCode {
    let body = serde_json::json!({ "id": args.id });
    let sent =
        Client::new(args.config.as_ref()).and_then(|c| c.post_json("/silences/expire", body));
    match sent {
        Ok(Answer::Ok(_)) => {
            println!("silence {} expired", args.id.trim());
            ExitCode::SUCCESS
        }
        Ok(Answer::NotFound(text)) => {
            let said: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            match said["error"].as_str() {
                Some(e) => eprintln!("error: {e}"),
                None => eprintln!("error: {}", text.trim()),
            }
            ExitCode::from(1)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn the_list_is_a_table_with_stars_for_any() {
        let doc = serde_json::json!([
            {"id": "00000000000000a1", "state": "active", "group": {"host": "web-1"},
             "starts_at": "2026-12-06T14:00:00.123456789Z", "ends_at": "2026-12-06T16:00:00Z",
             "by": "ops", "comment": "maintenance", "created_at": "2026-12-06T14:00:00Z"},
            {"id": "00000000000000a2", "state": "expired", "rule": "hb",
             "severity": ["high", "critical"],
             "starts_at": "2026-12-06T10:00:00Z", "ends_at": "2026-12-06T11:00:00Z",
             "by": "bob", "comment": "", "created_at": "2026-12-06T10:00:00Z"}
        ]);
        let mut out = Vec::new();
        write_silences(&mut out, &doc).unwrap();
        let table = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines[0].starts_with("ID "), "{table}");
        assert!(
            lines[1].contains("00000000000000a1  active   *     host=web-1  *  "),
            "{table}"
        );
        assert!(
            lines[2].contains("expired  hb    *           high,critical  "),
            "{table}"
        );
        assert_eq!(lines[3], "2 silence(s)");
        assert!(lines[1].contains("  2026-12-06T14:00:00Z  "), "{table}");
    }

    #[test]
    fn a_severity_is_one_rules_spell() {
        assert_eq!(severity("Low"), Ok("low".into()));
        assert_eq!(severity("critical"), Ok("critical".into()));
        assert!(severity("urgent").is_err());
    }

    #[test]
    fn a_matcher_is_field_equals_value() {
        assert_eq!(matcher("host=web-1"), Ok(("host".into(), "web-1".into())));
        assert_eq!(matcher("msg=a=b"), Ok(("msg".into(), "a=b".into())));
        assert!(matcher("web-1").is_err());
        assert!(matcher("=x").is_err());
    }
}
