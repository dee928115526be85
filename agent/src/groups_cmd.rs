//! `cepheus groups forget RULE KEY`: retires one group of a running agent by hand (DESIGN.md,
//! "Groups"), through its API (`POST /groups/forget`). The agent's address and token come
//! from the same configuration file `cepheus run` reads.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use crate::run::config::Config;

/// `cepheus groups ...`.
#[derive(clap::Subcommand, Debug)]
pub enum GroupsCommand {
    /// Retire a group of a running agent: its open alert is resolved with reason `forgotten`,
    /// and its state dropped. Exit 0 when it was retired, 1 when the agent holds no such
    /// group, 2 when the agent cannot be reached.
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
    /// built-in defaults (API on 127.0.0.1:9514).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// Runs `cepheus groups ...`.
pub fn run(cmd: GroupsCommand) -> ExitCode {
    match cmd {
        GroupsCommand::Forget(args) => match forget(&args) {
            Ok(true) => {
                println!("forgot group `{}` of rule `{}`", args.key, args.rule);
                ExitCode::SUCCESS
            }
            Ok(false) => {
                eprintln!(
                    "error: the agent holds no group `{}` of rule `{}` (check the rule name, and the key's values in group_by order, comma-separated)",
                    args.key, args.rule
                );
                ExitCode::from(1)
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(2)
            }
        },
    }
}

/// Sends the request; whether the agent retired the group.
fn forget(args: &ForgetArgs) -> anyhow::Result<bool> {
    let cfg = match &args.config {
        Some(p) => Config::load(p).map_err(|e| anyhow::anyhow!("{e}"))?,
        None => Config::default(),
    };
    let url = format!("http://{}/groups/forget", cfg.api.listen);
    let mut req = ureq::post(&url).timeout(Duration::from_secs(10));
    if let Some(token) = cfg.api.token()? {
        req = req.set("Authorization", &format!("Bearer {token}"));
    }
    let body = serde_json::json!({ "rule": args.rule, "key": args.key });
    match req.send_json(body) {
        Ok(_) => Ok(true),
        Err(ureq::Error::Status(404, _)) => Ok(false),
        Err(ureq::Error::Status(code, resp)) => {
            let text = resp.into_string().unwrap_or_default();
            anyhow::bail!(
                "the agent at {} answered {code}: {}",
                cfg.api.listen,
                text.trim()
            )
        }
        Err(e) => Err(anyhow::anyhow!(
            "cannot reach the agent's API at {} (is `cepheus run` running with this configuration?): {e}",
            cfg.api.listen
        )),
    }
}
