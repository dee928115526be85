//! `cepheus tui`: the terminal dashboard (`cepheus-tui`) over the running agent's API.

use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::api_client::{Answer, Client};

/// Arguments of `cepheus tui`.
#[derive(clap::Args, Debug)]
#[command(
    after_help = "Keys: up/down (k/j) select, g/G first/last, enter the selected alert's details (up/down scroll them), / filter, esc close or clear (quit when nothing is open or filtered), tab (f, r) the firing alerts or the latest changes, a acknowledge, s silence the selected alert's rule and group for an hour, ? help, q quit.\nExit status: 0 after q (or esc), 2 when the agent cannot be reached at start or the terminal fails."
)]
pub struct TuiArgs {
    /// The agent's configuration file (for `api.socket`, `api.listen` and `api.token_file`).
    /// Default: /etc/cepheus/cepheus.toml when readable, else the built-in defaults.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// The agent's API as the dashboard's source, with a thread that follows its alert stream
/// and raises `changed` at each change.
struct Api(Client, Arc<AtomicBool>);

/// Follows `GET /alerts/stream` for as long as the process lives, raising `changed` at each
/// alert event; reconnects every 2 s when the stream breaks (the agent restarted).
fn follow(client: Client, changed: Arc<AtomicBool>) {
    loop {
        if let Ok(stream) = client.stream("/alerts/stream") {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                if line.starts_with("event: alert") || line.starts_with("event: lagged") {
                    changed.store(true, Ordering::Relaxed);
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_secs(2));
    }
}

impl Api {
    fn get_json(&self, path: &str) -> Result<serde_json::Value, String> {
        match self.0.get(path).map_err(|e| format!("{e:#}"))? {
            Answer::Ok(text) => serde_json::from_str(&text).map_err(|e| e.to_string()),
            Answer::NotFound(text) => Err(text.trim().to_string()),
        }
    }

    fn get_list(&self, path: &str) -> Result<Vec<serde_json::Value>, String> {
        match self.get_json(path)? {
            serde_json::Value::Array(a) => Ok(a),
            other => Err(format!("expected a list, got {other}")),
        }
    }
}

impl cepheus_tui::Source for Api {
    fn firing(&mut self) -> Result<Vec<serde_json::Value>, String> {
        self.get_list("/alerts")
    }

    fn recent(&mut self, n: usize) -> Result<Vec<serde_json::Value>, String> {
        self.get_list(&format!("/alerts?recent={n}"))
    }

    fn stats(&mut self) -> Result<serde_json::Value, String> {
        self.get_json("/stats")
    }

    fn silence(
        &mut self,
        rule: &str,
        group: &serde_json::Value,
        by: &str,
    ) -> Result<String, String> {
        let mut body = serde_json::json!({
            "rule": rule, "for": cepheus_tui::SILENCE_FOR, "by": by,
            "comment": "from the dashboard",
        });
        // (A rule without group_by has an empty group: the rule alone is silenced.)
        if group.as_object().is_some_and(|g| !g.is_empty()) {
            body["group"] = group.clone();
        }
        match self
            .0
            .post_json("/silences/add", body)
            .map_err(|e| format!("{e:#}"))?
        {
            Answer::Ok(text) => {
                let said: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
                let id = said["id"].as_str().unwrap_or("?").to_string();
                // (The same key pressed again: the silence there stands.)
                Ok(if said["existing"] == true {
                    format!("{id}, made before")
                } else {
                    id
                })
            }
            Answer::NotFound(text) => Err(text.trim().to_string()),
        }
    }

    fn ack(&mut self, id: &str, by: &str) -> Result<Option<String>, String> {
        let body = serde_json::json!({ "id": id, "by": by });
        match self
            .0
            .post_json("/alerts/ack", body)
            .map_err(|e| format!("{e:#}"))?
        {
            Answer::Ok(text) => {
                let said: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
                Ok(
                    match (
                        said["before"]["by"].as_str(),
                        said["before"]["time"].as_str(),
                    ) {
                        (Some(who), Some(when)) => Some(format!("{who} at {when}")),
                        _ => None,
                    },
                )
            }
            Answer::NotFound(text) => Err(serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["error"].as_str().map(String::from))
                .unwrap_or_else(|| text.trim().to_string())),
        }
    }

    fn name(&self) -> String {
        self.0.target()
    }

    fn changed(&mut self) -> bool {
        self.1.swap(false, Ordering::Relaxed)
    }
}

/// Runs `cepheus tui`.
pub fn run(args: TuiArgs) -> ExitCode {
    let client = match Client::new(args.config.as_ref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e:#}");
            return ExitCode::from(2);
        }
    };
    let changed = Arc::new(AtomicBool::new(false));
    // (A second client for the stream's thread; a failure to make one leaves the screen on
    // its once-a-second refresh.)
    if let Ok(c) = Client::new(args.config.as_ref()) {
        let flag = changed.clone();
        let _ = std::thread::Builder::new()
            .name("alert-stream".into())
            .spawn(move || follow(c, flag));
    }
    let mut api = Api(client, changed);
    // Said before the screen is taken: an agent that is not there, or a token refused.
    if let Err(e) = cepheus_tui::Source::stats(&mut api) {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let user = crate::api_client::current_user();
    match cepheus_tui::run(Box::new(api), user) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: the terminal: {e}");
            ExitCode::from(2)
        }
    }
}
