//! The end-to-end tests: the real binaries (`salt-master`, `salt`, `salt-key`, `salt-run`,
//! `halite-ctl`, `halite-swarm`), unmodified salt-minion 3008.5 processes and Salt's own
//! `salt-key`, real sockets on loopback addresses of each test's own, real files, real
//! crashes. One test binary (builds are the slow part), one module per subject, one
//! property per test: a failing test's name says what broke.
//!
//! Needs the workspace's binaries built first (`cargo build --workspace --bins`) and the
//! reference venv (`HALITE_SALT_VENV`, from `scripts/setup-reference.sh`); `tools/README.md`
//! lists the subjects.

mod support;

// Offline: the tools over files, no master running.
mod compaction;
mod keys;
mod recovery;

// One master, and a cluster: the black-box attack suite.
mod attacks;

// One master.
mod batch;
mod config_check;
mod file_recv;
mod formats;
mod full_disk;
mod files_pillar;
mod git_pillar;
mod gitfs;
mod gitfs_more;
mod hostile;
mod locks;
mod mine;
mod orchestrate;
mod package;
mod publisher_acl;
mod reactor;
mod reactor_more;
mod roots_view;
mod minion;
mod runners;
mod schedule;
mod saltapi;
mod saltapi_auth;
mod saltapi_clients;
mod saltapi_orchestrate;
mod saltapi_pepper;
mod stalled;
mod storm;
mod targeting;
mod targeting_more;
mod wire;

// Several masters.
mod claims;
mod cluster;
mod cluster_events;
mod cluster_join;
mod cluster_shared;
mod cluster_topologies;
mod faults;
mod founding;
mod health;
mod multimaster;
mod nemesis;
mod orchestrate_cluster;
mod partition;
mod salt_docs_isolated;
mod salt_docs_shared;
mod signed_key;
mod swarm;
