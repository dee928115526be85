//! cepheus-tui: the terminal dashboard (`cepheus tui`), a client of the agent's API.
//!
//! Not built yet: the dashboard issue fills this crate in. It exists now so the workspace
//! layout of DESIGN.md is real.
