//! Halite's operator tools: `salt`, `salt-key`, `salt-run`, the recovery tool `halite-ctl`
//! the load generator `halite-swarm` and the REST endpoint `salt-api` ([`api`]).
//! Each binary in `src/bin/` is a thin command-line layer over these modules;
//! [`orchestrate`] drives an orchestration for `salt-run` and salt-api alike.

pub mod api;
pub mod batch;
pub mod common;
pub mod follow;
pub mod highstate;
pub mod ctl;
pub mod keys;
pub mod nested;
pub mod offline;
pub mod orchestrate;
pub mod output;
pub mod pki;
pub mod pprint;
pub mod printer;
pub mod pyvalue;
pub mod snapshots;
pub mod subset;
pub mod summary;
pub mod table;
pub mod swarm;
