//! Every master option Halite knows, by what Halite does with it. The unit tests check
//! that each option of `testdata/salt-3008.5/master_opts.json` is in exactly one list.

use super::{Check, Ctx};
use serde_json::Value as J;

/// Options Halite reads and acts on (its own `halite_*` ones included).
pub const HONOURED: &[&str] = &[
    "auth.pam.service", "auto_accept", "autoreject_file", "autosign_file", "autosign_grains_dir", "cachedir",
    "cluster_election_max", "cluster_election_min", "cluster_id", "cluster_isolated_filesystem", "cluster_max_log_size",
    "cluster_peers", "cluster_pki_dir", "cluster_pool_port", "cluster_pub_fingerprint", "cluster_secret", "default_include",
    "ext_job_cache", "ext_pillar_first", "external_auth", "file_recv", "file_recv_max_size", "file_roots", "gitfs_base", "gitfs_disable_saltenv_mapping", "gitfs_fallback", "gitfs_mountpoint", "gitfs_ref_types", "gitfs_refspecs",
    "gitfs_root", "gitfs_saltenv", "gitfs_saltenv_blacklist", "gitfs_saltenv_whitelist", "gitfs_update_interval", "git_pillar_base", "git_pillar_branch", "git_pillar_env", "git_pillar_includes", "git_pillar_root",
    "git_pillar_update_interval", "id", "include", "interface", "ipv6", "job_cache_store_endtime", "keep_jobs",
    "keep_jobs_seconds", "keys.cache_driver", "log_file", "log_level", "loop_interval", "master_pubkey_signature", "master_sign_key_name", "master_sign_pubkey", "master_use_pubkey_signature",
    "max_minions", "max_open_files",
    "mine_get", "minion_data_cache", "mmap_cache_max_segment_bytes", "mmap_key_id_size", "mmap_key_max_segment_bytes",
    "mmap_key_size", "mmap_key_slot_size", "netapi_enable_clients", "nodegroups", "open_mode", "output_indent", "pidfile",
    "pillar_merge_lists", "pillar_roots", "pki_dir", "pub_hwm", "publish_port", "publish_session", "publisher_acl", "publisher_acl_blacklist",
    "range_server", "reactor", "request_channel_timeout", "request_server_ttl", "rest_cherrypy", "ret_port", "root_dir",
    "rotate_aes_key", "schedule", "sock_dir", "state_output", "state_output_diff", "state_verbose", "tcp_keepalive", "tcp_keepalive_cnt",
    "tcp_keepalive_idle", "tcp_keepalive_intvl", "timeout", "token_expire", "token_expire_user_override", "zmq_backlog",
    "halite_cluster_dial", "halite_cluster_pin_founders", "halite_data_dir", "halite_health_port", "halite_log_max_bytes", "halite_max_inflight_bytes", "halite_min_free_bytes",
    "halite_max_pending_keys", "halite_max_request_bytes", "halite_new_publish_key_at_start", "halite_pam_confdir",
    "halite_pub_fanout_capacity", "halite_request_fifo",
];

/// Options accepted with no effect by design, each group with the reason.
pub const NO_EFFECT: &[(&str, &[&str])] = &[
    (
        "Halite answers requests on threads of one process; there is no pool of worker processes nor IPC between them (its bound on requests in flight is halite_max_inflight_bytes)",
        &["ipc_mode", "ipc_write_buffer", "master_async_mworker", "master_mworker_max_inflight", "sock_pool_size", "worker_pools", "worker_pools_enabled", "worker_threads"],
    ),
    (
        "Halite is one process: set its priority with nice or the service manager",
        &[
            "event_publisher_niceness", "event_return_niceness", "fileserver_update_niceness", "maintenance_niceness", "mworker_niceness",
            "mworker_queue_niceness", "pub_server_niceness", "reactor_niceness", "req_server_niceness",
        ],
    ),
    (
        "Halite writes its own log line format; per-module levels are set with the HALITE_LOG environment variable (a tracing filter)",
        &["log_datefmt", "log_datefmt_logfile", "log_fmt_console", "log_fmt_jid", "log_fmt_logfile", "log_fmt_minion_id", "log_granular_levels"],
    ),
    (
        "read by salt-ssh, which Halite does not replace (Salt's salt-ssh can use the same config)",
        &[
            "regen_thin", "ssh_config_file", "ssh_identities_only", "ssh_keepalive", "ssh_keepalive_count_max", "ssh_keepalive_interval",
            "ssh_list_nodegroups", "ssh_log_file", "ssh_passwd", "ssh_port", "ssh_priv_passwd", "ssh_scan_ports", "ssh_scan_timeout", "ssh_sudo",
            "ssh_sudo_user", "ssh_timeout", "ssh_use_home_key", "ssh_user", "thin_exclude_saltexts", "thin_extra_mods", "thin_saltext_allowlist",
            "thin_saltext_blocklist",
        ],
    ),
    ("Salt sets it to the file it read; salt-master -c names the directory", &["conf_file"]),
    (
        "Halite's members speak its own sealed peer transport (\"What the peer transport guarantees\"), not Salt's",
        &["cluster_encryption_algorithm"],
    ),
    ("salt-key keeps no log file: every key change is a record in Halite's log (halite-ctl dump)", &["key_logfile"]),
    ("Halite creates the directories it needs at start; it does not check their owners", &["verify_env"]),
];

/// Options Halite does not implement, by the feature they belong to. Halite behaves as
/// Salt does with the option's default value (or the value its [`CHECKS`] entry
/// accepts); any other value is named in a warning at start.
pub const NOT_IMPLEMENTED: &[(&str, &[&str])] = &[
    (
        "file servers other than roots and gitfs (hgfs, svnfs, minionfs, s3fs), gitfs remotes other than local repositories (credentials), and the fileserver's own options",
        &[
            "fileserver_backend", "file_buffer_size", "file_ignore_glob", "file_ignore_regex", "fileserver_followsymlinks", "fileserver_ignoresymlinks",
            "fileserver_interval", "fileserver_verify_config", "gitfs_depth", "gitfs_global_lock", "gitfs_insecure_auth",
            "gitfs_passphrase", "gitfs_password", "gitfs_privkey", "gitfs_proxy", "gitfs_pubkey", "gitfs_remotes", "gitfs_ssl_verify",
            "gitfs_user",
            "hgfs_base", "hgfs_branch_method",
            "hgfs_mountpoint", "hgfs_remotes", "hgfs_root", "hgfs_saltenv_blacklist", "hgfs_saltenv_whitelist", "hgfs_update_interval",
            "master_roots", "minionfs_blacklist", "minionfs_env", "minionfs_mountpoint", "minionfs_update_interval", "minionfs_whitelist",
            "roots_update_interval", "s3fs_update_interval", "svnfs_branches", "svnfs_mountpoint", "svnfs_remotes", "svnfs_root",
            "svnfs_saltenv_blacklist", "svnfs_saltenv_whitelist", "svnfs_tags", "svnfs_trunk", "svnfs_update_interval",
        ],
    ),
    (
        "external pillars other than git (local repositories), cmd_yaml and cmd_json, git_pillar's remote credentials and fetch options, the aggregate merging strategy, pillar encryption and caching, and the other pillar options",
        &[
            "decrypt_pillar", "decrypt_pillar_default", "decrypt_pillar_delimiter", "decrypt_pillar_renderers", "ext_pillar",
            "git_pillar_depth", "git_pillar_disable_saltenv_mapping", "git_pillar_fallback",
            "git_pillar_global_lock", "git_pillar_insecure_auth", "git_pillar_passphrase", "git_pillar_password",
            "git_pillar_privkey", "git_pillar_proxy", "git_pillar_pubkey", "git_pillar_ref_types", "git_pillar_refspecs",
            "git_pillar_ssl_verify", "git_pillar_user", "git_pillar_verify_config", "gpg_cache", "gpg_cache_backend",
            "gpg_cache_ttl", "gpg_decrypt_must_succeed", "on_demand_ext_pillar", "pass_dir", "pass_gnupghome", "pass_strict_fetch",
            "pass_variable_prefix", "pillar.cache_driver", "pillar_cache", "pillar_cache_backend", "pillar_cache_ttl",
            "pillar_includes_override_sls", "pillar_mask_output", "pillar_opts", "pillar_safe_render_error",
            "pillar_source_merging_strategy", "pillar_version", "pillarenv",
        ],
    ),
    (
        "transports other than ZeroMQ, TLS, and ZeroMQ's filtering and monitor",
        &[
            "disable_aes_with_tls", "ssl", "tcp_master_pub_port", "tcp_master_publish_pull", "tcp_master_pull_port", "tcp_master_workers", "transport",
            "zmq_filtering", "zmq_monitor",
        ],
    ),
    (
        "pluggable stores (job cache and minion data cache drivers, event returners, eauth token stores): Halite keeps these in its log",
        &[
            "archive_jobs", "cache", "eauth_tokens", "eauth_tokens.cache_driver", "eauth_tokens.cluster_id", "event_return", "event_return_blacklist",
            "event_return_queue", "event_return_whitelist", "job_cache", "key_cache", "master_job_cache", "memcache_debug", "memcache_expire_seconds",
            "memcache_full_cleanup", "memcache_max_items", "minion_data_cache_events", "preserve_minion_cache", "runner_returns",
        ],
    ),
    (
        "salt-ssh minions targeted by salt",
        &["detect_remote_minions", "enable_ssh_minions", "remote_minions_port"],
    ),
    (
        "syndics (order_masters, syndic_master)",
        &[
            "order_masters", "syndic_event_forward_timeout", "syndic_failover", "syndic_forward_all_events", "syndic_jid_forward_cache_hwm",
            "syndic_log_file", "syndic_master", "syndic_pidfile", "syndic_wait",
        ],
    ),
    ("peer communication (publish.publish and publish.runner from minions)", &["peer", "peer_run"]),
    (
        "Python extensions on the master (custom modules, renderers, engines, master_tops, Thorium, queues)",
        &[
            "clean_dynamic_modules", "cython_enable", "engines", "extension_modules", "extmod_blacklist", "extmod_whitelist", "features",
            "master_tops", "master_tops_first", "min_extra_mods", "module_dirs", "optimization_order", "outputter_dirs", "queue_dirs",
            "renderer_blacklist", "renderer_whitelist", "runner_dirs", "search", "sqlite_queue_dir", "thorium_interval",
            "thorium_roots", "thorium_top", "thoriumenv", "utils_dirs", "winrepo_branch", "winrepo_cachefile", "winrepo_depth", "winrepo_dir",
            "winrepo_dir_ng", "winrepo_fallback", "winrepo_insecure_auth", "winrepo_passphrase", "winrepo_password", "winrepo_privkey",
            "winrepo_proxy", "winrepo_pubkey", "winrepo_refspecs", "winrepo_remotes", "winrepo_remotes_ng", "winrepo_ssl_verify", "winrepo_user",
        ],
    ),
    (
        "state and top file options: Halite hands minions Salt's defaults (renderer jinja|yaml, top.sls, merge)",
        &[
            "default_top", "env_order", "failhard", "jinja_env", "jinja_lstrip_blocks", "jinja_sls_env", "jinja_trim_blocks", "lock_saltenv",
            "renderer", "saltenv", "state_aggregate", "state_auto_order", "state_events", "state_max_parallel", "state_top", "state_top_saltenv",
            "test", "top_file_merging_strategy",
        ],
    ),
    (
        "authentication and signing options other than Halite's (key revocation by minions, signed minion messages, key sizes and algorithms, passphrases of the master's keys, auth modes, ACL variants)",
        &[
            "allow_minion_key_revoke", "auth_events", "auth_events_pend_autosign_grains", "auth_mode", "client_acl_verify",
            "cluster_key_pass", "django_auth_path", "django_auth_settings", "drop_messages_signature_fail", "eauth_acl_module", "fips_mode",
            "keep_acl_in_token", "key_pass", "keysize", "minimum_auth_version", "netapi_allow_raw_shell", "permissive_acl", "permissive_pki_access",
            "ping_on_rotate",
            "publish_signing_algorithm", "request_server_aes_session", "require_minion_sign_messages", "sign_pub_messages", "signing_key_pass", "sudo_acl",
            "use_os_truststore", "user",
        ],
    ),
    (
        "Salt's cluster voter management (Halite's cluster: docs/operations.md \"Running a cluster\")",
        &[
            "cluster_auto_replace_voters", "cluster_demote_cooldown", "cluster_join_timeout", "cluster_max_voters", "cluster_min_voters",
            "cluster_mode", "cluster_voter_health_check_interval", "cluster_voter_timeout",
        ],
    ),
    (
        "other master and CLI behaviour (timeouts, event and HTTP limits, hashing, logging to a file of its own level, statistics, telemetry)",
        &[
            "cache_sreqs", "cli_summary", "con_cache", "discovery", "dummy_pub", "enable_gpu_grains", "enforce_mine_cache", "event_match_type",
            "file_client", "gather_job_timeout", "hash_type", "http_connect_timeout", "http_max_body", "http_request_timeout", "local",
            "log_level_logfile", "log_rotate_backup_count", "log_rotate_max_bytes", "maintenance_interval", "master_stats", "master_stats_event_iter",
            "max_event_size", "metrics", "pub_server_write_queue_size", "publish_drain_timeout", "publish_timeout", "reactor_refresh_interval",
            "reactor_worker_hwm", "reactor_worker_threads", "salt_cp_chunk_size", "serial", "show_jid", "show_timeout", "state_output_profile",
            "tracing", "unique_jid",
        ],
    ),
];

/// Not-implemented options whose accepted values are not Salt's default: the option,
/// the values Halite behaves as (for the documentation), and the check.
pub const CHECKS: &[(&str, &str, Check)] = &[
    ("fileserver_backend", "a list of `roots` and `gitfs` (`git`), in any order", fileserver_backend),
    (
        "gitfs_remotes",
        "local repositories (`file://` URLs or absolute paths) with the per-remote options `name`, `base`, `root`, `mountpoint`, `saltenv`, `saltenv_whitelist`, `saltenv_blacklist`, `ref_types`, `disable_saltenv_mapping`",
        gitfs_remotes,
    ),
    (
        "ext_pillar",
        "`git` (local repositories, per-remote `name`, `root`, `env`, `mountpoint`, `base`), `cmd_yaml` and `cmd_json`",
        ext_pillar,
    ),
    ("pillar_source_merging_strategy", "`smart`, `recurse`, `overwrite`, `list` or `none`", merging_strategy),
    ("user", "the user Halite runs as", user),
    ("allow_minion_key_revoke", "`False` (a minion's `saltutil.revoke_auth` is not acted on)", behaves_as_false),
    ("minion_data_cache_events", "`False` (no event when a minion's cached data is refreshed)", behaves_as_false),
    ("pillar_safe_render_error", "`False` (a pillar rendering error is sent to the minion in full)", behaves_as_false),
    ("log_level_logfile", "unset or `log_level`", log_level_logfile),
    ("preserve_minion_cache", "no value: a deleted minion's cached pillar and pushed files go with its key, its grains and mine stay", never),
    ("runner_returns", "no value: orchestrations and salt-api's asynchronous runs are kept as jobs, other runner calls are not", never),
    ("max_event_size", "no value: Halite does not trim large events", never),
    ("enforce_mine_cache", "`True`, or any value while `minion_data_cache` is on (Halite keeps the mine either way)", enforce_mine_cache),
];

/// Halite keeps the mine even with `minion_data_cache: False`, which Salt does only with
/// `enforce_mine_cache: True`.
fn enforce_mine_cache(v: &J, ctx: &Ctx) -> Option<String> {
    (!ctx.minion_data_cache && !super::same(v, &J::Bool(true))).then(|| format!("set to {v} with minion_data_cache off; Halite keeps the mine (as True)"))
}

/// Halite behaves as none of the option's values (what it does is in the table's text).
fn never(_: &J, _: &Ctx) -> Option<String> {
    Some(String::new())
}

/// Halite serves `file_roots` and gitfs: `roots` and `gitfs` (in Salt's spellings: a
/// list or a comma-separated string, `git` for `gitfs`; entries that only remove other
/// backends) is what it does.
fn fileserver_backend(v: &J, _: &Ctx) -> Option<String> {
    let names: Vec<String> = match v {
        J::String(s) => s.split(',').map(|s| s.trim().to_string()).collect(),
        J::Array(a) => a.iter().map(|e| e.as_str().map(str::to_string).unwrap_or_else(|| e.to_string())).collect(),
        _ => return Some("not a list of backends".into()),
    };
    let known = |n: &str| matches!(n, "roots" | "gitfs" | "git");
    if names.iter().all(|n| n.is_empty()) {
        return Some("lists no backend: Salt would serve no files".into());
    }
    if names.iter().all(|n| n.starts_with('-')) {
        return (names.iter().any(|n| n == "-roots") && names.iter().any(|n| n == "-gitfs" || n == "-git")).then(|| "removes roots and gitfs: Salt would serve other backends".into());
    }
    let other: Vec<&str> = names.iter().map(String::as_str).filter(|n| !known(n)).collect();
    (!other.is_empty()).then(|| format!("names backends Halite does not implement: {}", other.join(", ")))
}

/// gitfs reads local repositories with the per-remote options `crate::gitfs::config`
/// implements; anything else is named.
fn gitfs_remotes(v: &J, _: &Ctx) -> Option<String> {
    let mut raw = serde_yaml::Mapping::new();
    raw.insert("gitfs_remotes".into(), serde_yaml::to_value(v).unwrap_or(serde_yaml::Value::Null));
    let c = crate::gitfs::GitfsConfig::from_raw(&raw);
    (!c.warnings.is_empty()).then(|| c.warnings.join("; "))
}

/// The external pillars `crate::pillar::ext` implements; anything else is named.
fn ext_pillar(v: &J, _: &Ctx) -> Option<String> {
    if !v.is_array() && !v.is_null() {
        return Some(format!("set to {v}: not a list of external pillars (Salt calls it malformed)"));
    }
    let mut raw = serde_yaml::Mapping::new();
    raw.insert("ext_pillar".into(), serde_yaml::to_value(v).unwrap_or(serde_yaml::Value::Null));
    let c = crate::pillar::ext::ExtPillarConfig::from_raw(&raw);
    (!c.warnings.is_empty()).then(|| c.warnings.join("; "))
}

/// The merging strategies `crate::pillar::merge` implements.
fn merging_strategy(v: &J, _: &Ctx) -> Option<String> {
    let mut raw = serde_yaml::Mapping::new();
    raw.insert("pillar_source_merging_strategy".into(), serde_yaml::to_value(v).unwrap_or(serde_yaml::Value::Null));
    let mut w = Vec::new();
    crate::pillar::merge::MergeOpts::from_raw(&raw, &mut w);
    (!w.is_empty()).then(|| w.join("; "))
}

/// Halite does not change user: the value must be the user it runs as.
fn user(v: &J, ctx: &Ctx) -> Option<String> {
    match (v.as_str(), &ctx.user) {
        (Some(u), Some(me)) if u == me => None,
        (Some(u), Some(me)) => Some(format!("Halite does not switch user: it runs as {me}, not {u}; start it as {u}")),
        _ => Some("Halite does not switch user: start it as that user".into()),
    }
}

/// Halite behaves as `False`, whatever Salt's default.
fn behaves_as_false(v: &J, _: &Ctx) -> Option<String> {
    (!super::same(v, &J::Bool(false))).then(|| format!("set to {v}; Halite behaves as False"))
}

/// The log file is written at `log_level`: unset or the same level is what Halite does.
fn log_level_logfile(v: &J, ctx: &Ctx) -> Option<String> {
    match v {
        J::Null => None,
        J::String(s) if Some(s.as_str()) == ctx.log_level.as_deref() => None,
        _ => Some("the log file is written at log_level".into()),
    }
}
