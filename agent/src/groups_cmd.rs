//! `cepheus groups forget RULE KEY`: retires one group of a running agent by hand (DESIGN.md,
//! "Groups"), through its API (`POST /groups/forget`). The agent's address and token come
//! from the same configuration file `cepheus run` reads.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::api_client::{Answer, Client};

/// `cepheus groups ...`.
#[derive(clap::Subcommand, Debug)]
pub enum GroupsCommand {
    /// Retire a group of a running agent: its open alert is resolved with reason `forgotten`,
    /// and its state dropped (for every rule of the same meaning, which share it). Exit 0 when
    /// it was retired, 1 when the agent holds no such group, 2 when the agent cannot be
    /// reached.
    Forget(ForgetArgs),
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
    /// The agent's configuration file (for `api.listen` and `api.token_file`). Default:
    /// /etc/cepheus/cepheus.toml when readable, else the built-in defaults (API on
    /// 127.0.0.1:9514).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Runs `cepheus groups ...`.
pub fn run(cmd: GroupsCommand) -> ExitCode {
    match cmd {
        GroupsCommand::Forget(args) => match forget(&args) {
            Ok(None) => {
                println!("forgot group `{}` of rule `{}`", args.key, args.rule);
                ExitCode::SUCCESS
            }
            Ok(Some(answer)) => {
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
                    (_, Some(g)) if !g.is_empty() => eprintln!(
                        "error: rule `{}` holds no group `{}` now: its key is {} (values in this order, comma-separated, as in `expect`), e.g. copy the `group` object of one of its alerts",
                        args.rule,
                        args.key,
                        g.join(", ")
                    ),
                    (_, Some(_)) => eprintln!(
                        "error: rule `{}` has no group_by: its one group's key is empty (`cepheus groups forget {} \"\"`), and it holds none now",
                        args.rule, args.rule
                    ),
                    _ => eprintln!(
                        "error: the agent holds no group `{}` of rule `{}` (check the rule name, and the key's values in group_by order, comma-separated)",
                        args.key, args.rule
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

/// Sends the request: `None` when the agent retired the group, else its answer (404).
fn forget(args: &ForgetArgs) -> anyhow::Result<Option<serde_json::Value>> {
    let client = Client::new(args.config.as_ref())?;
    let body = serde_json::json!({ "rule": args.rule, "key": args.key });
    match client.post_json("/groups/forget", body)? {
        Answer::Ok(_) => Ok(None),
        Answer::NotFound(text) => Ok(Some(
            serde_json::from_str(&text).unwrap_or(serde_json::Value::Null),
        )),
    }
}
