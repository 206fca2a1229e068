//! The Halite master: Salt's master configuration, payloads and crypto, the request
//! handlers, job publishing, the admin socket and the `salt-master` daemon.
//!
//! | module       | owns |
//! |--------------|------|
//! | [`config`]   | Salt's config files, defaults and `root_dir` rule |
//! | [`crypto`]   | RSA (OpenSSL), X9.31, the Crypticle |
//! | [`payload`]  | msgpack as Python minions write it |
//! | [`cluster`]  | the cluster key pair and AES key every member shares |
//! | [`auth`]     | the `_auth` decision (I/O-free) |
//! | [`handlers`] | request decoding, checks, dispatch, reply encryption (I/O-free) |
//! | [`fileserver`] | the `roots` file server over `file_roots` |
//! | [`jobs`]     | jids, expected minions, publish envelopes |
//! | [`matcher`]  | Salt's target matchers (glob, list, pcre, grain, pillar, compound) |
//! | [`pillar`]   | pillar compilation from `pillar_roots` (Jinja + YAML, top matching, merge) |
//! | [`keyops`]   | salt-key selection and key records |
//! | [`masterkeys`], [`sessions`] | the master key pair, per-minion session keys |
//! | [`pki`]      | `pki.status`, `pki.migrate_to_mmap` (offline and online) |
//! | [`replay`]   | nonces of applied requests (replays answered, not re-applied) |
//! | [`runners`]  | `jobs.*` and `cluster.members` results |
//! | [`events`]   | the master event bus |
//! | [`admin`]    | the local admin socket protocol |
//! | [`listen`]   | TCP listeners with Salt's keepalive and backlog |
//! | [`server`]   | the daemon: sockets and wiring |
//! | [`sync_roots`] | `cluster.sync_roots`: roots directories → records |
//! | [`store`]    | opening the storage a config describes; the cluster plan from `cluster_id` / `interface` / `cluster_peers` and the join handshake's Salt side (`cluster.pub`'s fingerprint, `cluster_pub_fingerprint`) over `halite_replication::{cluster, join}` |

pub mod admin;
pub mod auth;
pub mod cluster;
pub mod config;
pub mod crypto;
pub mod events;
pub mod fileserver;
pub mod glob;
pub mod handlers;
pub mod jobs;
pub mod keyops;
pub mod listen;
pub mod masterkeys;
pub mod matcher;
pub mod payload;
pub mod pillar;
pub mod pki;
pub mod replay;
pub mod runners;
pub mod server;
pub mod sessions;
pub mod store;
pub mod sync_roots;

pub use config::MasterConfig;
