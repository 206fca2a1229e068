//! The Halite master: Salt's master configuration, wire format and crypto, the request
//! commands and admin verbs (functions of a request and a read-only view), and the
//! `salt-master` daemon that carries their outcomes out.
//!
//! The rooms, top to bottom (each only imports from the rooms below it):
//!
//! | module | owns |
//! |---|---|
//! | [`daemon`] | the only place with sockets, tasks and proposals: boot, request loop, publish loop, admin loop, maintenance |
//! | [`admin`] | the admin verbs (`salt`, `salt-key`, `salt-run`) → plans; the admin socket client |
//! | [`req`] | the minion commands (`_auth`, `_return`, `_pillar`, the file server, ...) → outcomes |
//! | [`view`] | what a command may read: the [`view::View`] trait, its disk sources, an in-memory view for tests |
//! | [`pillar`], [`jobs`], [`mine`], [`batch`], [`reactor`], [`orchestrate`] | pillar compilation, jids and expected minions, the mine, master-driven batch runs, the reactor, orchestration |
//! | [`targeting`] | Salt's targeting: [`glob`], [`matcher`], [`nodegroups`], [`range`] |
//! | [`auth`] | who may do what: [`acl`] (`external_auth`), [`publisher_acl`] |
//! | [`keyfiles`] | key files: [`masterkeys`] (the master key pair), [`memberkey`] (a member's own key, its peers'), [`pki`] (the mmap migration) |
//! | [`start`], [`store`] | opening the storage and node a config describes (the cluster plan and the join handshake's Salt side over `halite_replication::{cluster, join}`) |
//!
//! The modules of [`targeting`], [`auth`] and [`keyfiles`] are also named at the crate's
//! root (`crate::matcher`, `crate::acl`, ...).
//! | [`wire`] | msgpack payloads, crypto, the request and publish envelopes |
//! | [`events`], [`config`], [`config_keys`], [`error`] | events, Salt's config files (and what Halite does with each option), the error type |

pub mod alloc;
pub mod auth;
pub mod admin;
pub mod batch;
pub mod config;
pub mod config_keys;
pub mod daemon;
pub mod error;
pub mod events;
pub mod gitfs;
pub mod jobs;
pub mod keyfiles;
pub mod metrics;
pub mod orchestrate;
pub mod mine;
pub mod pillar;
pub mod pycompat;
pub mod reactor;
pub mod req;
pub mod schedule;
pub mod start;
pub mod store;
pub mod targeting;
pub mod template;
pub mod view;
pub mod wire;

pub use auth::{acl, publisher_acl};
pub use keyfiles::{masterkeys, memberkey, pki};
pub use targeting::{glob, matcher, nodegroups, range};

pub use config::MasterConfig;
pub use error::{Error, Result};
