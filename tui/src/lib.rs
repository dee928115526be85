//! cepheus-tui: the terminal dashboard (`cepheus tui`), a client of the running agent.
//!
//! It never runs rules: it shows what the agent's store and counters say, refreshed every
//! second and as soon as the source says alerts changed, and sends acknowledgements back. Where the data comes from is a [`Source`] (the
//! agent's API, implemented in `cepheus-agent`), so this crate holds no HTTP and its screens
//! are tested on ratatui's `TestBackend`. `app.rs` holds the state and its updates, `ui.rs`
//! draws it (a pure function of the state), `run.rs` is the terminal loop.

pub mod app;
pub mod run;
pub mod ui;

pub use app::App;
pub use run::run;

/// Where the dashboard reads alerts and counters, and sends acknowledgements.
/// How long `s` silences the selected alert's rule and group (`cepheus silence` takes any).
pub const SILENCE_FOR: &str = "1h";

/// Where the dashboard reads from.
pub trait Source {
    /// The alerts firing now (alert objects, oldest first).
    fn firing(&mut self) -> Result<Vec<serde_json::Value>, String>;
    /// The last `n` alert changes (oldest first).
    fn recent(&mut self, n: usize) -> Result<Vec<serde_json::Value>, String>;
    /// The agent's `/stats` document.
    fn stats(&mut self) -> Result<serde_json::Value, String>;
    /// Acknowledges the firing alert `id` as `by`; `Some` says whose acknowledgement it
    /// replaced (`bob at 2026-12-05T10:00:00Z`).
    fn ack(&mut self, id: &str, by: &str) -> Result<Option<String>, String>;
    /// Silences the alerts of rule `rule` and group `group` (the alert's object) for
    /// [`SILENCE_FOR`], as `by`; answers the silence's id.
    fn silence(
        &mut self,
        rule: &str,
        group: &serde_json::Value,
        by: &str,
    ) -> Result<String, String>;
    /// Where the agent is, for the title.
    fn name(&self) -> String;
    /// Whether alerts changed since the last call (a live source, such as the agent's alert
    /// stream, tells at once; the screen is then read again before the next second).
    fn changed(&mut self) -> bool {
        false
    }
}
