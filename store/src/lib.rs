//! cepheus-store: persistence of alerts and engine checkpoints.
//!
//! Not built yet: the store issue fills this crate in (sled 0.34 behind an API that does not
//! leak sled types). It exists now so the workspace layout of DESIGN.md is real.
