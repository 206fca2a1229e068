//! Halite's operator tools: `salt-key`, `salt-run` and the recovery tool `halite-ctl`.
//! Each binary in `src/bin/` is a thin command-line layer over these modules.

pub mod common;
pub mod ctl;
pub mod keys;
pub mod output;
pub mod pki;
