//! Halite's operator tools: `salt`, `salt-key`, `salt-run`, the recovery tool `halite-ctl`
//! and the load generator `halite-swarm` (salt-api is the `halite-api` crate, which
//! uses [`orchestrate`], [`batch`], [`subset`] and [`common`] from here).
//! Each binary in `src/bin/` is a thin command-line layer over these modules;
//! [`orchestrate`] drives an orchestration for `salt-run` and salt-api alike;
//! [`outputters`] print as Salt's outputters do.

pub mod args;
pub mod batch;
pub mod common;
pub mod follow;
pub mod ctl;
pub mod keys;
pub mod offline;
pub mod orchestrate;
pub mod outputters;
pub mod pki;
pub mod snapshots;
pub mod subset;
pub mod swarm;

/// The outputters are also named at the crate's root (`halite_tools::nested`, ...).
pub use outputters::{highstate, nested, output, pprint, printer, pyvalue, summary, table};
