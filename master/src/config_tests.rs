//! Tests of reading the master configuration (defaults, includes, every option's checks).

use super::*;

/// Salt's election window, 750–1500 ms unless set; a window that cannot work is refused.
#[test]
fn election_window() {
    let d = tempfile::tempdir().unwrap();
    assert_eq!(MasterConfig::load(d.path()).unwrap().cluster_election_ms, (750, 1500));
    std::fs::write(d.path().join("master"), "cluster_election_min: 1000\ncluster_election_max: 3000\n").unwrap();
    assert_eq!(MasterConfig::load(d.path()).unwrap().cluster_election_ms, (1000, 3000));
    std::fs::write(d.path().join("master"), "cluster_election_min: 1000\ncluster_election_max: 1000\n").unwrap();
    assert!(MasterConfig::load(d.path()).unwrap_err().to_string().contains("cluster_election_max"));
    std::fs::write(d.path().join("master"), "cluster_election_min: 50\n").unwrap();
    assert!(MasterConfig::load(d.path()).unwrap_err().to_string().contains("cluster_election_min"));
}

/// `cluster_max_log_size` is Salt's (None there: never); Halite's defaults compact.
#[test]
fn compaction_limits() {
    use halite_storage::compaction::{DEFAULT_MAX_BYTES, DEFAULT_MAX_ENTRIES};
    let d = tempfile::tempdir().unwrap();
    let c = MasterConfig::load(d.path()).unwrap();
    assert_eq!((c.compaction.max_entries, c.compaction.max_bytes), (Some(DEFAULT_MAX_ENTRIES), Some(DEFAULT_MAX_BYTES)));
    std::fs::write(d.path().join("master"), "cluster_max_log_size: null\nhalite_log_max_bytes: 0\n").unwrap();
    let c = MasterConfig::load(d.path()).unwrap();
    assert_eq!((c.compaction.max_entries, c.compaction.max_bytes), (None, None));
    std::fs::write(d.path().join("master"), "cluster_max_log_size: 5000\nhalite_log_max_bytes: '1048576'\n").unwrap();
    let c = MasterConfig::load(d.path()).unwrap();
    assert_eq!((c.compaction.max_entries, c.compaction.max_bytes), (Some(5000), Some(1 << 20)));
    std::fs::write(d.path().join("master"), "cluster_max_log_size: lots\n").unwrap();
    assert!(MasterConfig::load(d.path()).unwrap_err().to_string().contains("cluster_max_log_size"));
}

/// `halite_cluster_dial`: member name → `host:port`, strings only.
#[test]
fn cluster_dial_routes() {
    let d = tempfile::tempdir().unwrap();
    assert!(MasterConfig::load(d.path()).unwrap().halite_cluster_dial.is_empty());
    std::fs::write(d.path().join("master"), "halite_cluster_dial:\n  10.0.0.2: 192.168.7.2:4520\n").unwrap();
    let c = MasterConfig::load(d.path()).unwrap();
    assert_eq!(c.halite_cluster_dial.into_iter().collect::<Vec<_>>(), vec![("10.0.0.2".to_string(), "192.168.7.2:4520".to_string())]);
    std::fs::write(d.path().join("master"), "halite_cluster_dial: [10.0.0.2]\n").unwrap();
    assert!(MasterConfig::load(d.path()).unwrap_err().to_string().contains("halite_cluster_dial"));
}

/// The in-flight budget: 256 MiB by default, never below one largest request.
#[test]
fn inflight_budget() {
    let d = tempfile::tempdir().unwrap();
    assert_eq!(MasterConfig::load(d.path()).unwrap().halite_max_inflight_bytes, 256 << 20);
    std::fs::write(d.path().join("master"), "halite_max_inflight_bytes: 1000000000\n").unwrap();
    assert_eq!(MasterConfig::load(d.path()).unwrap().halite_max_inflight_bytes, 1_000_000_000);
    std::fs::write(d.path().join("master"), "halite_max_request_bytes: 1048576\nhalite_max_inflight_bytes: 1024\n").unwrap();
    assert_eq!(MasterConfig::load(d.path()).unwrap().halite_max_inflight_bytes, (1 << 20) + (64 << 10));
    std::fs::write(d.path().join("master"), "halite_max_inflight_bytes: -1\n").unwrap();
    assert!(MasterConfig::load(d.path()).unwrap_err().to_string().contains("halite_max_inflight_bytes"));
}

#[test]
fn defaults_includes_root_dir_and_errors() {
    let d = tempfile::tempdir().unwrap();
    let c = MasterConfig::load(d.path()).unwrap();
    assert_eq!(c.pki_dir, PathBuf::from("/etc/salt/pki/master"));
    assert_eq!(c.key_driver, KeyDriver::Localfs);
    assert_eq!(c.file_roots["base"][0], PathBuf::from("/srv/salt"));

    std::fs::write(d.path().join("master"), "root_dir: /tmp/hr\nunknown_option: 3\nret_port: 14506\n").unwrap();
    std::fs::create_dir(d.path().join("master.d")).unwrap();
    std::fs::write(d.path().join("master.d/10-keys.conf"), "keys.cache_driver: mmap_key\nmmap_key_size: 64\n").unwrap();
    std::fs::write(d.path().join("master.d/20-roots.conf"), "file_roots:\n  base: [/tmp/hr/srv/salt]\n  dev: relative/dir\n").unwrap();
    let c = MasterConfig::load(d.path()).unwrap();
    assert_eq!(c.pki_dir, PathBuf::from("/tmp/hr/etc/salt/pki/master"));
    assert_eq!(c.ret_port, 14506);
    assert_eq!(c.key_driver, KeyDriver::Mmap(Geometry { size: 64, ..Geometry::default() }));
    assert_eq!(c.file_roots["base"][0], PathBuf::from("/tmp/hr/srv/salt"));
    assert!(c.raw.contains_key("unknown_option"));

    std::fs::write(d.path().join("master.d/30-bad.conf"), "publish_port: seventy\n").unwrap();
    let e = MasterConfig::load(d.path()).unwrap_err().to_string();
    assert!(e.contains("publish_port") && e.contains("30-bad.conf"), "{e}");
    std::fs::write(d.path().join("master.d/30-bad.conf"), "keys.cache_driver: redis\n").unwrap();
    let e = MasterConfig::load(d.path()).unwrap_err().to_string();
    assert!(e.contains("keys.cache_driver") && e.contains("30-bad.conf"), "{e}");
    std::fs::write(d.path().join("master.d/30-bad.conf"), "file_roots: {'..': [/x]}\n").unwrap();
    assert!(MasterConfig::load(d.path()).is_err());
}

/// The admin verbs read the roots from the log on an isolated-filesystem member only: a
/// lone master (whatever `cluster_isolated_filesystem` says) and a shared-filesystem
/// member read the disk minions are served from.
#[test]
fn roots_from_the_log_on_an_isolated_member_only() {
    let mut c = MasterConfig::under(std::path::Path::new("/nonexistent/halite-config-test"));
    for (cluster, isolated, from_log) in [(false, false, false), (false, true, false), (true, false, false), (true, true, true)] {
        c.cluster_id = cluster.then(|| "c".to_string());
        c.cluster_isolated_filesystem = isolated;
        assert_eq!(c.roots_from_log(), from_log, "cluster {cluster}, isolated {isolated}");
    }
}
