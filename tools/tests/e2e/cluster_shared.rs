//! A cluster on a shared filesystem (Salt's model: one `cluster_pki_dir` and one roots
//! tree mounted on every member) moving to local directories one member at a time, by
//! restarting it with new paths: its views are rebuilt from its own state machine, and a
//! real salt-minion 3008.5 is served by it afterwards. The runners read the shared roots
//! on disk on a shared member, the log's roots records on an isolated one.
//!
//! Both members and the "shared mount" live under one temp dir, which is also their
//! `root_dir`: the shared paths are the same on both members and every path a member
//! does not set resolves inside the temp dir, never on the host.

use std::path::{Path, PathBuf};

use serde_json::json;

use crate::support::*;

const TOP: &str = "base:\n  '*': []\n";

/// Rewrites `env`'s config as a member of the `move` cluster whose keys and file roots
/// are `pki` and `roots`.
fn write_conf(env: &Env, root_dir: &Path, peer: &str, pool: u16, pki: &Path, roots: &Path, isolated: bool) {
    let r = env.root.display();
    std::fs::write(
        env.root.join("conf/master"),
        format!(
            "root_dir: {}\npki_dir: {r}/pki\ncachedir: {r}/cache\nsock_dir: {r}/sock\nhalite_data_dir: {r}/data\nlog_file: {r}/log\npidfile: {r}/master.pid\n\
             interface: {ip}\nid: {ip}\nret_port: {}\npublish_port: {}\nauto_accept: True\ncluster_id: move\ncluster_secret: s3cret\n\
             cluster_pool_port: {pool}\ncluster_isolated_filesystem: {isolated}\ncluster_pki_dir: {}\nfile_roots:\n  base:\n    - {}\n\
             pillar_roots:\n  base:\n    - {r}/srv/pillar\ncluster_peers:\n  - {peer}\n",
            root_dir.display(),
            env.ret,
            env.publish,
            pki.display(),
            roots.display(),
            ip = env.ip,
        ),
    )
    .expect("write config");
}

/// Members a and b on the shared mount, with two keys (simulated minions signed in to a)
/// and a roots file synced.
struct Shared {
    c: Cluster,
    pool: u16,
    dir: tempfile::TempDir,
}

impl Shared {
    fn root_dir(&self) -> &Path {
        self.dir.path()
    }

    fn shared_pki(&self) -> PathBuf {
        self.dir.path().join("shared/pki")
    }

    fn local_pki(&self) -> PathBuf {
        self.c.envs[1].root.join("local-pki")
    }

    fn local_roots(&self) -> PathBuf {
        self.c.envs[1].root.join("local-roots")
    }
}

fn shared() -> Shared {
    let dir = tempfile::tempdir().expect("tempdir");
    let ips = loopback(2);
    let pool = port_free_on(&[&ips[0], &ips[1]]);
    let (spki, sroots) = (dir.path().join("shared/pki"), dir.path().join("shared/roots"));
    std::fs::create_dir_all(&sroots).expect("shared roots");
    let a = Env::master_in(dir.path(), &ips[0], "localfs_key", "");
    let b = Env::master_in(dir.path(), &ips[1], "localfs_key", "");
    write_conf(&a, dir.path(), &ips[1], pool, &spki, &sroots, false);
    write_conf(&b, dir.path(), &ips[0], pool, &spki, &sroots, false);
    let c = Cluster::start(vec![a, b]);
    let a = &c.envs[0];
    run_ok(
        std::process::Command::new(SWARM).args(["--master", &a.ip, "--port", &a.ret.to_string(), "--count", "2", "--jobs", "0"]).arg("--key-dir").arg(a.root.join("keys")),
        TOOL_TIMEOUT,
    );
    std::fs::write(sroots.join("top.sls"), TOP).expect("top.sls");
    a.ok(SALT_RUN, &["cluster.sync_roots", "roots=file"]);
    Shared { c, pool, dir }
}

/// [`shared`], then member b moved to local directories: stopped, repointed, started.
/// Nothing is copied.
fn moved() -> Shared {
    let mut s = shared();
    s.c.stop(1);
    std::fs::create_dir_all(s.local_roots()).expect("local roots");
    write_conf(&s.c.envs[1], s.root_dir(), &s.c.envs[0].ip, s.pool, &s.local_pki(), &s.local_roots(), true);
    s.c.restart(1);
    s
}

#[test]
fn a_shared_filesystem_cluster_writes_its_keys_to_the_shared_pki_dir() {
    let s = shared();
    wait_for("the keys on the shared mount", 30, || s.shared_pki().join("minions/swarm-0").exists() && s.shared_pki().join("minions/swarm-1").exists());
}

#[test]
fn a_member_moved_to_local_directories_rebuilds_its_key_view() {
    let s = moved();
    assert_eq!(s.c.envs[1].listing()["minions"], json!(["swarm-0", "swarm-1"]));
    assert!(s.local_pki().join("minions/swarm-0").exists() && s.local_pki().join("minions/swarm-1").exists(), "the local key view was rebuilt");
}

#[test]
fn a_member_moved_to_local_directories_rewrites_its_roots() {
    let s = moved();
    assert_eq!(std::fs::read_to_string(s.local_roots().join("top.sls")).expect("local top.sls"), TOP, "the local roots were rewritten");
}

#[test]
fn after_the_move_key_changes_reach_the_shared_mount_and_the_local_view() {
    let s = moved();
    // The shared mount through a, b's local view through b.
    s.c.envs[0].ok(SALT_KEY, &["-d", "swarm-1", "-y"]);
    wait_for("the delete in b's local view", 30, || !s.local_pki().join("minions/swarm-1").exists());
    wait_for("the delete on the shared mount", 30, || !s.shared_pki().join("minions/swarm-1").exists());
}

#[test]
fn a_real_minion_is_served_by_a_member_after_its_move() {
    let s = moved();
    let b = &s.c.envs[1];
    let _minion = start_minion(&b.root, "real-1", &format!("master: {}\nmaster_port: {}\n", b.ip, b.ret));
    wait_minion_ready(&b.root, "real-1", 1, 90);
    wait_ping(b, "real-1", 90);
    assert!(s.local_pki().join("minions/real-1").exists(), "its key in b's local view");
    wait_for("its key on the shared mount, through a", 30, || s.shared_pki().join("minions/real-1").exists());
}

/// On a shared filesystem every member's runners read the shared roots as they are on
/// disk: a file written there without `cluster.sync_roots` is listed by
/// `fileserver.file_list` and orchestrated (`state.orchestrate`) through either member.
#[test]
fn shared_members_list_and_orchestrate_the_shared_roots_on_disk() {
    let s = shared();
    let orch = s.dir.path().join("shared/roots/orch");
    std::fs::create_dir_all(&orch).expect("orch dir");
    std::fs::write(orch.join("listed.sls"), "list:\n  salt.runner:\n    - name: fileserver.file_list\n").expect("listed.sls");
    for env in &s.c.envs {
        assert_eq!(env.runner(&["fileserver.file_list"]), json!(["orch/listed.sls", "top.sls"]), "{}", env.ip);
        let o = env.run_for(SALT_RUN, &["state.orchestrate", "orch.listed", "--out", "json"], std::time::Duration::from_secs(120));
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert_eq!(o.status.code(), Some(0), "{}: {out}", env.ip);
        let v = json(&out);
        let step = v["data"].as_object().and_then(|d| d.values().next()).map(|s| s["salt_|-list_|-fileserver.file_list_|-runner"].clone()).expect("the step");
        assert_eq!(step["result"], json!(true), "{}: {v}", env.ip);
    }
}

/// A member on its own directories (isolated) reads the log's roots records: a file only
/// in its directory, never synced, is not listed, nor orchestrated.
#[test]
fn an_isolated_member_lists_the_logs_roots_not_its_directory() {
    let s = moved();
    std::fs::create_dir_all(s.local_roots().join("orch")).expect("orch dir");
    std::fs::write(s.local_roots().join("orch/local.sls"), "list:\n  salt.runner:\n    - name: fileserver.file_list\n").expect("local.sls");
    let b = &s.c.envs[1];
    assert_eq!(b.runner(&["fileserver.file_list"]), json!(["top.sls"]));
    let o = b.run_for(SALT_RUN, &["state.orchestrate", "orch.local", "--out", "json"], std::time::Duration::from_secs(120));
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert_eq!(o.status.code(), Some(1), "{out}");
    assert!(out.contains("No matching sls found for 'orch.local' in env 'base'"), "{out}");
}
