//! `cepheus groups list RULE`: the groups a running agent holds for a rule (`GET /groups`),
//! and `cepheus groups forget RULE KEY`: retires one by hand (DESIGN.md, "Groups"), through
//! its API (`POST /groups/forget`). The agent's address and token come from the same
//! configuration file `cepheus run` reads.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::api_client::{Answer, Client};

/// `cepheus groups ...`.
#[derive(clap::Subcommand, Debug)]
pub enum GroupsCommand {
    /// Retire a group of a running agent: its open alert is resolved with reason `forgotten`,
    /// and its state dropped (for every rule of the same meaning, which share it); so are the
    /// alerts of that key still firing that no engine holds (a match's, which fires once). Exit 0 when
    /// it was retired, 1 when the agent holds no such group, 2 when the agent cannot be
    /// reached.
    Forget(ForgetArgs),
    /// List the groups a running agent holds for a rule, in key order: each key as `groups
    /// forget` takes it, whether an alert of it fires, whether it is expected, and its last
    /// event (or when it began to be watched). Exit 0, 1 when the agent runs no such rule, 2
    /// when it cannot be reached.
    List(ListArgs),
}

/// Arguments of `cepheus groups list`.
#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// The rule's name.
    pub rule: String,
    /// The most groups to list (the agent lists at most 10,000).
    #[arg(long, default_value_t = 1000)]
    pub limit: usize,
    /// Print the agent's answer as JSON (`GET /groups`) instead of a table.
    #[arg(long)]
    pub json: bool,
    /// The agent's configuration file (for `api.socket`, `api.listen`, `api.token_file` and
    /// `store.path`). Default:
    /// /etc/cepheus/cepheus.toml when readable, else the built-in defaults (API on
    /// 127.0.0.1:9514).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Arguments of `cepheus groups forget`.
#[derive(clap::Args, Debug)]
pub struct ForgetArgs {
    /// The rule's name.
    pub rule: String,
    /// The group: its `group_by` values in order, comma-separated (as in `expect`), or the
    /// alert's `group` object as JSON (`'{"host":"web,1","app":"nginx"}'`) when a value
    /// holds a comma.
    pub key: String,
    /// The agent's configuration file (for `api.socket`, `api.listen`, `api.token_file` and
    /// `store.path`). Default:
    /// /etc/cepheus/cepheus.toml when readable, else the built-in defaults (API on
    /// 127.0.0.1:9514).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Runs `cepheus groups ...`.
pub fn run(cmd: GroupsCommand) -> ExitCode {
    match cmd {
        GroupsCommand::List(args) => list(&args),
        GroupsCommand::Forget(args) => match forget(&args) {
            Ok(Forgot::Done { expected }) => {
                println!(
                    "forgot group `{}` of rule `{}`",
                    printable(&args.key),
                    printable(&args.rule)
                );
                if expected {
                    println!(
                        "note: the rule watches this group from the start (it is in `expect`, or the one group of a rule without group_by), so nothing watches it now (no alert if it falls silent) until the rules are next reloaded or the agent restarts"
                    );
                }
                ExitCode::SUCCESS
            }
            Ok(Forgot::NotFound(answer)) => {
                // The agent says whether it knows the rule, and its group_by (an older agent
                // says neither).
                let group_by: Option<Vec<String>> = answer
                    .get("group_by")
                    .and_then(|g| serde_json::from_value(g.clone()).ok());
                let known = answer
                    .get("rule_known")
                    .and_then(serde_json::Value::as_bool);
                match (known, group_by) {
                    (Some(false), _) => eprintln!(
                        "error: the agent runs no rule named `{}` (its API's /stats lists the rules it runs)",
                        args.rule
                    ),
                    (_, Some(g)) if !g.is_empty() => match key_shape_problem(&g, &args.key) {
                        Some(why) => eprintln!(
                            "error: `{}` is not a key of rule `{}`: {why}; its key is {} (values in this order, comma-separated, as in `expect`, or the `group` object of one of its alerts)",
                            printable(&args.key),
                            args.rule,
                            g.join(", ")
                        ),
                        None => eprintln!(
                            "error: rule `{}` holds no group `{}` now: its key is {} (values in this order, comma-separated, as in `expect`), e.g. copy the `group` object of one of its alerts; `cepheus groups list {}` lists the groups it holds",
                            args.rule,
                            printable(&args.key),
                            g.join(", "),
                            args.rule
                        ),
                    },
                    (_, Some(_)) => eprintln!(
                        "error: rule `{}` has no group_by: its one group's key is empty (`cepheus groups forget {} \"\"`), and it holds none now",
                        args.rule, args.rule
                    ),
                    _ => eprintln!(
                        "error: the agent holds no group `{}` of rule `{}` (check the rule name, and the key's values in group_by order, comma-separated)",
                        printable(&args.key),
                        args.rule
                    ),
                }
                ExitCode::from(1)
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(2)
            }
        },
    }
}

/// `cepheus groups list`.
fn list(args: &ListArgs) -> ExitCode {
    let answer = Client::new(args.config.as_ref()).and_then(|c| {
        c.get(&format!(
            "/groups?rule={}&limit={}",
            query_escape(&args.rule),
            args.limit
        ))
    });
    let doc = match answer {
        Ok(Answer::Ok(text)) => match serde_json::from_str::<serde_json::Value>(&text) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("error: the agent's answer is not JSON: {e}");
                return ExitCode::from(2);
            }
        },
        Ok(Answer::NotFound(_)) => {
            eprintln!(
                "error: the agent runs no rule named `{}` (its API's /stats lists the rules it runs)",
                args.rule
            );
            return ExitCode::from(1);
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    if args.json {
        println!("{doc}");
        return ExitCode::SUCCESS;
    }
    let mut out = std::io::stdout().lock();
    let _ = write_groups(&mut out, &doc);
    ExitCode::SUCCESS
}

/// `s` with the characters a terminal would act on written as escapes
/// ([`cepheus_tui::ui::printable`]).
fn printable(s: &str) -> String {
    let mut v = serde_json::Value::String(s.to_string());
    cepheus_tui::ui::printable(&mut v);
    v.as_str().unwrap_or_default().to_string()
}

/// Why `key` cannot be a key of a rule grouping by `group_by` (more than one name), if it
/// cannot: a `group` object with other fields, or another number of values.
fn key_shape_problem(group_by: &[String], key: &str) -> Option<String> {
    match serde_json::from_str::<serde_json::Value>(key.trim()) {
        Ok(serde_json::Value::Object(obj)) => {
            let unknown: Vec<&str> = obj
                .keys()
                .filter(|k| !group_by.contains(k))
                .map(String::as_str)
                .collect();
            let missing: Vec<&str> = group_by
                .iter()
                .filter(|g| !obj.contains_key(*g))
                .map(String::as_str)
                .collect();
            match (unknown.as_slice(), missing.as_slice()) {
                ([], []) => None,
                ([], m) => Some(format!("it lacks {}", m.join(", "))),
                (u, _) => Some(format!(
                    "it names {}, which the key does not have",
                    u.iter()
                        .map(|k| printable(k))
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
            }
        }
        _ if group_by.len() > 1 => {
            let n = key.split(',').count();
            (n != group_by.len()).then(|| {
                format!(
                    "{n} value{} given, the key has {}",
                    if n == 1 { "" } else { "s" },
                    group_by.len()
                )
            })
        }
        _ => None,
    }
}

/// A query value with every byte but `A-Za-z0-9-_.~` percent-encoded.
pub(crate) fn query_escape(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The key of a listed group as `groups forget` takes it: its values in `group_by` order,
/// comma-separated, or the group object as JSON when a value holds a comma or a character a
/// terminal must not be given (written as a JSON `\u` escape, so the text shown is the key
/// `groups forget` takes, copied as it is).
fn key_text(group_by: &[String], group: &serde_json::Value) -> String {
    let values: Vec<String> = group_by
        .iter()
        .map(|g| match &group[g] {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .collect();
    let escaped = |v: &String| v.chars().any(cepheus_tui::ui::needs_escape);
    if values.iter().any(|v| v.contains(',') || escaped(v)) {
        let mut out = String::new();
        for c in group.to_string().chars() {
            if cepheus_tui::ui::needs_escape(c) {
                for unit in c.encode_utf16(&mut [0; 2]) {
                    out.push_str(&format!("\\u{unit:04x}"));
                }
            } else {
                out.push(c);
            }
        }
        out
    } else {
        values.join(",")
    }
}

/// The table of `groups list`, and a last line counting what was listed.
fn write_groups(out: &mut impl std::io::Write, doc: &serde_json::Value) -> std::io::Result<()> {
    // (A table on a terminal: what remote senders chose, a host name, is made printable;
    // the JSON escapes it already. A key is written as `groups forget` takes it.)
    let raw = doc;
    let mut doc = doc.clone();
    cepheus_tui::ui::printable(&mut doc);
    let doc = &doc;
    let group_by: Vec<String> = doc["group_by"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    let groups = doc["groups"].as_array().cloned().unwrap_or_default();
    let raw_groups = raw["groups"].as_array().cloned().unwrap_or_default();
    let yes = |v: &serde_json::Value| {
        if v.as_bool() == Some(true) {
            "yes"
        } else {
            "no"
        }
    };
    let rows: Vec<Vec<String>> = groups
        .iter()
        .zip(&raw_groups)
        .map(|(g, raw)| {
            vec![
                key_text(&group_by, &raw["group"]),
                yes(&g["firing"]).to_string(),
                yes(&g["expected"]).to_string(),
                g["active_at"].as_str().unwrap_or("").to_string(),
            ]
        })
        .collect();
    let key_head = if group_by.is_empty() {
        "GROUP".to_string()
    } else {
        format!("GROUP ({})", group_by.join(","))
    };
    let header = [key_head.as_str(), "FIRING", "EXPECTED", "ACTIVE AT"];
    crate::alerts_cmd::write_columns(out, &header, &rows)?;
    let total = doc["total"].as_u64().unwrap_or(0);
    writeln!(
        out,
        "{} of {total} group(s) of rule `{}`",
        rows.len(),
        doc["rule"].as_str().unwrap_or("")
    )
}

/// Sends the request: `None` when the agent retired the group, else its answer (404).
/// What `groups forget` got from the agent.
enum Forgot {
    /// Retired; `expected`: a group the rule watches from the start (its `expect` list, or
    /// the one group of a rule without `group_by`).
    Done { expected: bool },
    /// Nothing retired: the API's 404 document.
    NotFound(serde_json::Value),
}

fn forget(args: &ForgetArgs) -> anyhow::Result<Forgot> {
    let client = Client::new(args.config.as_ref())?;
    let body = serde_json::json!({ "rule": args.rule, "key": args.key });
    match client.post_json("/groups/forget", body)? {
        Answer::Ok(text) => {
            let doc: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
            Ok(Forgot::Done {
                expected: doc["expected"].as_bool().unwrap_or(false),
            })
        }
        Answer::NotFound(text) => Ok(Forgot::NotFound(
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host name a syslog sender chose, with a terminal's escape sequences (erase the line,
    /// set the title), is listed written out, not acted on.
    #[test]
    fn a_listed_group_cannot_drive_the_terminal() {
        let doc = serde_json::json!({
            "rule": "r", "group_by": ["host"], "total": 1,
            "groups": [{"group": {"host": "zz\u{1b}[2K\u{1b}]0;pwned\u{7}"}, "firing": true,
                        "expected": false, "active_at": "2026-12-05T00:00:00Z"}]
        });
        let mut out = Vec::new();
        write_groups(&mut out, &doc).unwrap_or_else(|e| panic!("{e}"));
        let text = String::from_utf8_lossy(&out);
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{text:?}"
        );
        // Written as the JSON key `groups forget` takes, its escapes JSON's.
        assert!(
            text.contains(r#"{"host":"zz\u001b[2K\u001b]0;pwned\u0007"}"#),
            "{text}"
        );
        assert_eq!(printable("a\u{1b}b"), "a\\u{1b}b");
        // Found by an audit: a key with a bidi override or a zero-width character was listed
        // as `bidi\u{202e}evil`, which `groups forget` does not take.
        let group = serde_json::json!({"host": "bidi\u{202e}evil\u{200b}\u{e0041}"});
        let shown = key_text(&["host".to_string()], &group);
        assert_eq!(shown, r#"{"host":"bidi\u202eevil\u200b\udb40\udc41"}"#);
        let back: serde_json::Value = serde_json::from_str(&shown).unwrap_or_default();
        assert_eq!(back, group, "the key shown reads back as the key");
    }

    /// A key of the wrong shape is said as such: another number of values, a `group` object
    /// with a misspelt or a missing field.
    #[test]
    fn a_key_of_the_wrong_shape_says_what_is_wrong() {
        let two = ["host".to_string(), "app".to_string()];
        let one = ["host".to_string()];
        assert_eq!(
            key_shape_problem(&two, "web-1").as_deref(),
            Some("1 value given, the key has 2")
        );
        assert_eq!(
            key_shape_problem(&two, "a,b,c").as_deref(),
            Some("3 values given, the key has 2")
        );
        assert_eq!(key_shape_problem(&two, "web-1, sshd"), None);
        assert_eq!(
            key_shape_problem(&one, r#"{"hots":"x"}"#).as_deref(),
            Some("it names hots, which the key does not have")
        );
        assert_eq!(
            key_shape_problem(&two, r#"{"host":"x"}"#).as_deref(),
            Some("it lacks app")
        );
        // One name: a comma is part of the value.
        assert_eq!(key_shape_problem(&one, "web,1"), None);
    }
}
