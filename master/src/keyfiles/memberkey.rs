//! A cluster member's own identity: its member key pair, and the keys it knows its
//! founding peers by (`halite_replication::transport::identity` explains the handshake
//! that uses them).
//!
//! - `<pki_dir>/member.pem`: this member's private key (Ed25519, PKCS#8 PEM, mode 0600),
//!   made at the first start in cluster mode (or by `halite-ctl member-key`) and never
//!   replicated. It is not Salt's `master.pem`: in a cluster the key view and the import
//!   of a Salt tree treat `master.pem` as the master key pair of the bank, and a member's
//!   identity must stay its own.
//! - `<cluster_pki_dir>/peers/<name>.pub`: each member's public key (SubjectPublicKeyInfo
//!   PEM), named as Salt names them (the member's `interface`, as `cluster_peers` lists
//!   it). A member writes its own at start, and refuses to start if the file holds
//!   another key (Salt's rule: remove it to continue).
//!
//! **Founders.** At start a member pins each founding peer's raft id to the key its file
//! holds, if it holds one ([`pin_founders`]): a founder is then admitted only under that
//! key until the log's key book holds one. A founder with no file is admitted under the
//! key of its first handshake that proves `cluster_secret` (as Salt trusts a holder of
//! the secret), held in memory until its own `member_key` record binds it in the log.
//! So founders form a cluster from Salt's documented configuration alone, whatever their
//! topology and start order. **`halite_cluster_pin_founders: True`** hardens this: a
//! member about to found a cluster waits until it holds every founder's key
//! (`start.rs`), and a founder nothing is pinned for is refused: with a shared
//! `cluster_pki_dir` each founder's own file appears as it starts; with isolated ones the
//! operator provisions the files (`halite-ctl member-key` prints a member's key,
//! `halite-ctl peer-key NAME FILE` installs a founder's, [`install_peer_key`]), and no id
//! is ever bound by whoever completes a handshake first.
//!
//! Which key speaks for a raft id is decided by the log, not by these files: the key
//! book of the applied state (a joiner's key comes with the membership change that adds
//! it, each founder records its own; `halite_replication::transport::identity`). The
//! files pin a founding peer only while the book holds no key for it, and
//! `peers/<name>.pub` is kept as a view of the book: whenever the applied book changes,
//! the file of each peer this member can name (its `cluster_peers`) is written if it is
//! absent or holds another key. Nothing a handshake showed is ever written to a file.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use halite_replication::transport::identity::{public_from_pem, public_to_pem, MemberKey, PeerKeys};
use halite_replication::{ClusterPlan, Credentials, NodeError};

use crate::config::MasterConfig;

/// Largest key file read (a PEM key is a few hundred bytes).
const MAX_KEY_FILE: u64 = 64 << 10;

fn refused(what: impl std::fmt::Display) -> NodeError {
    NodeError::Refused(what.to_string())
}

/// Reads a key file of at most [`MAX_KEY_FILE`] bytes (`None`: absent).
fn read_small(path: &Path) -> Result<Option<Vec<u8>>, NodeError> {
    match std::fs::metadata(path) {
        Ok(m) if m.len() > MAX_KEY_FILE => Err(refused(format!("{}: {} bytes, not a key file (over {MAX_KEY_FILE})", path.display(), m.len()))),
        Ok(_) => std::fs::read(path).map(Some).map_err(|e| refused(format!("reading {}: {e}", path.display()))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(refused(format!("reading {}: {e}", path.display()))),
    }
}

/// Writes `bytes` to `path` through a temporary file created with `mode` (never wider
/// first), synced, then renamed into place.
fn write_new(path: &Path, bytes: &[u8], mode: u32) -> Result<(), NodeError> {
    let io = |e: std::io::Error| refused(format!("writing {}: {e}", path.display()));
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(mode).open(&tmp).map_err(io)?;
    f.write_all(bytes).and_then(|_| f.sync_all()).map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)
}

/// Where this member's private key is.
pub fn key_path(cfg: &MasterConfig) -> PathBuf {
    cfg.pki_dir.join("member.pem")
}

/// Where member `name`'s public key is.
pub fn peer_path(cfg: &MasterConfig, name: &str) -> PathBuf {
    cfg.keys_dir().join("peers").join(format!("{name}.pub"))
}

/// This member's key pair: read from [`key_path`], or made and written there.
pub fn member_key(cfg: &MasterConfig) -> Result<MemberKey, NodeError> {
    let path = key_path(cfg);
    if let Some(pem) = read_small(&path)? {
        return MemberKey::from_pem(&pem).map_err(|e| refused(format!("{}: {e}", path.display())));
    }
    let key = MemberKey::generate().map_err(refused)?;
    write_new(&path, &key.to_pem().map_err(refused)?, 0o600)?;
    tracing::info!(path = %path.display(), "made this member's key pair");
    Ok(key)
}

/// Writes this member's own `peers/<name>.pub` if absent; refuses if it holds another key.
fn publish_own(cfg: &MasterConfig, key: &MemberKey) -> Result<(), NodeError> {
    let own = peer_path(cfg, &cfg.interface);
    match read_small(&own)? {
        Some(pem) => match public_from_pem(&pem) {
            Ok(k) if k == key.public() => Ok(()),
            _ => Err(refused(format!("{} does not hold this member's public key (the one of {}): remove it to continue", own.display(), key_path(cfg).display()))),
        },
        None => write_new(&own, &key.public_pem().map_err(refused)?, 0o644),
    }
}

/// This member's public key PEM, its key pair made and its own `peers/<name>.pub`
/// written if need be (`halite-ctl member-key`: what an operator copies to the other
/// founders of a cluster on isolated filesystems).
pub fn own_public_pem(cfg: &MasterConfig) -> Result<Vec<u8>, NodeError> {
    let key = member_key(cfg)?;
    publish_own(cfg, &key)?;
    key.public_pem().map_err(refused)
}

/// Installs `pem` (a member public key PEM) as member `name`'s `peers/<name>.pub`
/// (`halite-ctl peer-key`). The same key again changes nothing; a file holding another
/// key is kept and this is refused (remove it to continue, as Salt says).
pub fn install_peer_key(cfg: &MasterConfig, name: &str, pem: &[u8]) -> Result<PathBuf, NodeError> {
    if name.is_empty() || name.contains(['/', '\\', '\0']) || name.starts_with('.') {
        return Err(refused(format!("{name:?} is not a member name")));
    }
    let public = public_from_pem(pem).map_err(refused)?;
    let path = peer_path(cfg, name);
    if let Some(held) = read_small(&path)? {
        return match public_from_pem(&held) {
            Ok(k) if k == public => Ok(path),
            _ => Err(refused(format!("{} holds another key: remove it to continue", path.display()))),
        };
    }
    write_new(&path, &public_to_pem(&public).map_err(refused)?, 0o644)?;
    Ok(path)
}

/// Pins each founding peer of `plan` to the key its `peers/<name>.pub` holds (read
/// again at every call) and returns the names of the founders nothing is pinned for.
pub fn pin_founders(cfg: &MasterConfig, plan: &ClusterPlan, peers: &PeerKeys) -> Vec<String> {
    let mut missing = Vec::new();
    for (id, name) in &plan.names {
        if *id == plan.me {
            continue;
        }
        let path = peer_path(cfg, name);
        match read_small(&path) {
            Ok(Some(pem)) => match public_from_pem(&pem) {
                Ok(k) => peers.pin(*id, k),
                Err(e) => tracing::warn!(path = %path.display(), "not a member public key, not used: {e}"),
            },
            Ok(None) => {}
            Err(e) => tracing::warn!("{e}"),
        }
        if !peers.is_pinned(*id) {
            missing.push(name.clone());
        }
    }
    missing
}

/// Where the members of a cluster without `cluster_secret` keep the secret they seal
/// their traffic with: in `cluster_pki_dir`, beside the cluster key pair.
pub fn kept_secret_path(cfg: &MasterConfig) -> PathBuf {
    cfg.keys_dir().join("cluster_pool.secret")
}

/// The secret of a cluster configured without `cluster_secret` (Salt's shared-filesystem
/// example has none; Salt then lets any peer in). Members on a shared `cluster_pki_dir`
/// share a random secret kept there ([`kept_secret_path`], mode 0600): the first member
/// to start makes it (made whole aside, then linked into place, so two members starting
/// at once agree on one), the others read it. So only a host that can read the shared
/// `cluster_pki_dir` can speak to the members. A member on an isolated filesystem uses the
/// file if its `cluster_pki_dir` holds it (copied from the shared one in Salt's shared →
/// isolated procedure) and otherwise refuses to start, saying so.
pub fn kept_secret(cfg: &MasterConfig) -> Result<String, NodeError> {
    let path = kept_secret_path(cfg);
    let read = |bytes: Vec<u8>| -> Result<String, NodeError> {
        let text = String::from_utf8(bytes).map_err(|_| refused(format!("{}: not a secret (not text)", path.display())))?;
        let text = text.trim();
        if text.len() < 32 {
            return Err(refused(format!("{}: not a secret (shorter than 32 characters): remove it or set cluster_secret", path.display())));
        }
        Ok(text.to_string())
    };
    if let Some(bytes) = read_small(&path)? {
        return read(bytes);
    }
    if !cfg.shared_filesystem() {
        return Err(refused(format!(
            "cluster_id is set but cluster_secret is not, and {} does not exist: set the same cluster_secret on every member (Salt's dynamic join needs it too), or copy that file from a member's cluster_pki_dir",
            path.display()
        )));
    }
    // The secret, and a name of this writer's own to make it whole under.
    let mut raw = [0u8; 40];
    openssl::rand::rand_bytes(&mut raw).map_err(|e| refused(format!("making a cluster secret: {e}")))?;
    let (raw, mine) = raw.split_at(32);
    let tmp = path.with_extension(format!("secret.{}", hex::encode(mine)));
    let io = |e: std::io::Error| refused(format!("writing {}: {e}", tmp.display()));
    std::fs::create_dir_all(cfg.keys_dir()).map_err(io)?;
    let _ = std::fs::remove_file(&tmp);
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).mode(0o600).open(&tmp).map_err(io)?;
    f.write_all(hex::encode(raw).as_bytes()).and_then(|_| f.sync_all()).map_err(io)?;
    // Linking fails if another member made the file first: its secret is the one.
    let linked = std::fs::hard_link(&tmp, &path);
    let _ = std::fs::remove_file(&tmp);
    match linked {
        Ok(()) => tracing::warn!(path = %path.display(), "cluster_secret is not set: the members on this shared cluster_pki_dir seal their traffic with a secret kept there (made now); set cluster_secret on every member to choose one"),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(refused(format!("writing {}: {e}", path.display()))),
    }
    read(read_small(&path)?.ok_or_else(|| refused(format!("{} vanished while it was read", path.display())))?)
}

/// The credentials this member's transport proves itself with: `cluster_secret`'s key,
/// its member key, and its founding peers' keys from the peers directory
/// ([`pin_founders`]). Writes its own `peers/<name>.pub` (refusing to start if the file
/// holds another key).
pub fn credentials(cfg: &MasterConfig, plan: &ClusterPlan) -> Result<Credentials, NodeError> {
    let key = member_key(cfg)?;
    publish_own(cfg, &key)?;
    let peers = Arc::new(PeerKeys::default());
    if cfg.halite_cluster_pin_founders {
        peers.require_pins();
    }
    pin_founders(cfg, plan, &peers);
    // The peers directory as a view of the applied key book.
    let (names, dir, me) = (plan.names.clone(), cfg.keys_dir().join("peers"), plan.me);
    peers.on_book_changed(Arc::new(move |book| {
        for (id, public) in book {
            let Some(name) = names.get(id).filter(|_| *id != me) else { continue };
            let path = dir.join(format!("{name}.pub"));
            let held = read_small(&path).ok().flatten().and_then(|pem| public_from_pem(&pem).ok());
            if held.as_ref() == Some(public) {
                continue;
            }
            match public_to_pem(public).map_err(refused).and_then(|pem| write_new(&path, &pem, 0o644)) {
                Ok(()) => tracing::info!(member = %name, path = %path.display(), "peer member key written from the log's key book"),
                Err(e) => tracing::warn!(member = %name, "peer member key not written: {e}"),
            }
        }
    }));
    Ok(Credentials::new(plan.key.clone(), key, peers))
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;

    fn config(dir: &Path) -> MasterConfig {
        let d = dir.display();
        let text = format!(
            "id: 127.0.0.1\ninterface: 127.0.0.1\ncluster_id: t\ncluster_secret: s\ncluster_peers: [127.0.0.2]\n\
             pki_dir: {d}/pki\ncluster_pki_dir: {d}/cpki\nhalite_data_dir: {d}/data\ncachedir: {d}/cache\n"
        );
        std::fs::write(dir.join("master"), text).unwrap();
        MasterConfig::load(dir).unwrap()
    }

    #[test]
    fn a_member_keeps_its_key_publishes_it_pins_its_peers_files_and_refuses_another_own_file() {
        let d = tempfile::tempdir().unwrap();
        let cfg = config(d.path());
        let plan = crate::start::cluster_plan(&cfg).unwrap().unwrap();
        // The peer's public key is in the peers dir before this member first starts.
        let peer = MemberKey::generate().unwrap();
        std::fs::create_dir_all(cfg.keys_dir().join("peers")).unwrap();
        std::fs::write(peer_path(&cfg, "127.0.0.2"), peer.public_pem().unwrap()).unwrap();

        let first = credentials(&cfg, &plan).unwrap();
        assert_eq!(std::fs::metadata(key_path(&cfg)).unwrap().permissions().mode() & 0o777, 0o600);
        let own = public_from_pem(&std::fs::read(peer_path(&cfg, "127.0.0.1")).unwrap()).unwrap();
        assert_eq!(own, first.member.public(), "its own peers file holds its public key");
        assert_eq!(first.peers.bound(halite_replication::member_id("127.0.0.2")), Some(peer.public()), "the peer is pinned from its file");
        // Started again: the same key.
        assert_eq!(credentials(&cfg, &plan).unwrap().member.public(), first.member.public());
        // Its own peers file holding another key: it refuses to start.
        std::fs::write(peer_path(&cfg, "127.0.0.1"), peer.public_pem().unwrap()).unwrap();
        let refused = credentials(&cfg, &plan).err().map(|e| e.to_string()).unwrap_or_default();
        assert!(refused.contains("remove it to continue"), "{refused}");
    }

    #[test]
    fn founders_are_pinned_only_from_provisioned_files_and_a_file_is_never_replaced() {
        let d = tempfile::tempdir().unwrap();
        let cfg = config(d.path());
        let plan = crate::start::cluster_plan(&cfg).unwrap().unwrap();
        let creds = credentials(&cfg, &plan).unwrap();
        let peer_id = halite_replication::member_id("127.0.0.2");
        // Nothing provisioned for the peer: it is missing, nothing is pinned for it.
        assert_eq!(pin_founders(&cfg, &plan, &creds.peers), vec!["127.0.0.2".to_string()]);
        assert_eq!(creds.peers.bound(peer_id), None);
        // `halite-ctl peer-key`: installed, then pinned; the same key again is fine.
        let peer = MemberKey::generate().unwrap();
        install_peer_key(&cfg, "127.0.0.2", &peer.public_pem().unwrap()).unwrap();
        install_peer_key(&cfg, "127.0.0.2", &peer.public_pem().unwrap()).unwrap();
        assert!(pin_founders(&cfg, &plan, &creds.peers).is_empty());
        assert_eq!(creds.peers.bound(peer_id), Some(peer.public()));
        // Another key over it, a name that is a path, a file that is no key: refused.
        let other = MemberKey::generate().unwrap();
        for (name, pem) in [("127.0.0.2", other.public_pem().unwrap()), ("../x", peer.public_pem().unwrap()), ("127.0.0.3", b"not a key".to_vec())] {
            assert!(install_peer_key(&cfg, name, &pem).is_err(), "{name}");
        }
        assert_eq!(public_from_pem(&std::fs::read(peer_path(&cfg, "127.0.0.2")).unwrap()).unwrap(), peer.public());
        // `halite-ctl member-key`: this member's own public key, the one it proves.
        assert_eq!(public_from_pem(&own_public_pem(&cfg).unwrap()).unwrap(), creds.member.public());
    }

    #[test]
    fn members_without_cluster_secret_share_the_one_kept_in_their_shared_cluster_pki_dir() {
        let d = tempfile::tempdir().unwrap();
        let cfg_at = |name: &str, pki: &str, extra: &str| {
            let dir = d.path().join(name);
            std::fs::create_dir_all(&dir).unwrap();
            let text = format!("id: {name}\ninterface: {name}\ncluster_id: t\ncluster_peers: [127.0.0.9]\ncluster_pki_dir: {}/{pki}\n{extra}", d.path().display());
            std::fs::write(dir.join("master"), text).unwrap();
            MasterConfig::load(&dir).unwrap()
        };
        let (a, b) = (cfg_at("127.0.0.1", "shared", ""), cfg_at("127.0.0.2", "shared", ""));
        // Two members starting at once on the shared directory agree on one secret.
        let (sa, sb) = std::thread::scope(|s| {
            let ta = s.spawn(|| kept_secret(&a).unwrap());
            let tb = s.spawn(|| kept_secret(&b).unwrap());
            (ta.join().unwrap(), tb.join().unwrap())
        });
        assert_eq!(sa, sb);
        assert!(sa.len() >= 32);
        assert_eq!(std::fs::metadata(kept_secret_path(&a)).unwrap().permissions().mode() & 0o777, 0o600);
        assert!(crate::start::cluster_plan(&a).unwrap().is_some(), "a plan without cluster_secret");
        // An isolated member with no file refuses, naming what to do; with the file copied
        // from the shared directory (Salt's shared → isolated procedure) it uses it.
        let iso = cfg_at("127.0.0.3", "own", "cluster_isolated_filesystem: True\n");
        let e = kept_secret(&iso).unwrap_err().to_string();
        assert!(e.contains("set the same cluster_secret on every member"), "{e}");
        std::fs::create_dir_all(iso.keys_dir()).unwrap();
        std::fs::copy(kept_secret_path(&a), kept_secret_path(&iso)).unwrap();
        assert_eq!(kept_secret(&iso).unwrap(), sa);
        // A file that is no secret is refused rather than used.
        std::fs::write(kept_secret_path(&iso), "short").unwrap();
        assert!(kept_secret(&iso).is_err());
    }

    #[test]
    fn the_peers_directory_follows_the_applied_key_book() {
        let d = tempfile::tempdir().unwrap();
        let cfg = config(d.path());
        let plan = crate::start::cluster_plan(&cfg).unwrap().unwrap();
        let creds = credentials(&cfg, &plan).unwrap();
        let peer_id = halite_replication::member_id("127.0.0.2");
        // A stale file for the peer: the book's key replaces it. An id the plan does not
        // name (a later joiner's) gets no file; this member's own file stays its own.
        let stale = MemberKey::generate().unwrap();
        std::fs::write(peer_path(&cfg, "127.0.0.2"), stale.public_pem().unwrap()).unwrap();
        let peer = MemberKey::generate().unwrap();
        let book = [(peer_id, peer.public()), (99, [7; 32]), (plan.me, [8; 32])].into();
        creds.peers.set_applied(book, [plan.me, peer_id, 99].into(), true);
        assert_eq!(public_from_pem(&std::fs::read(peer_path(&cfg, "127.0.0.2")).unwrap()).unwrap(), peer.public());
        assert_eq!(public_from_pem(&std::fs::read(peer_path(&cfg, "127.0.0.1")).unwrap()).unwrap(), creds.member.public());
        assert_eq!(std::fs::read_dir(cfg.keys_dir().join("peers")).unwrap().count(), 2);
    }
}
