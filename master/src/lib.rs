//! The Halite master. This crate owns the Salt master configuration and, with the
//! single-master work, the Salt payload and crypto, the ZeroMQ servers, the request
//! handlers and the `salt-master` daemon. Today it provides what the offline tools need:
//! [`config`] (Salt's config files, defaults and `root_dir` rule), [`glob`] (fnmatch), and
//! [`store`] (opening the log, state machine and views a config describes).

pub mod config;
pub mod glob;
pub mod store;

pub use config::MasterConfig;
