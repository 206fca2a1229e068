//! Per-minion session keys (spec §3.5): the key that encrypts a minion's requests and the
//! replies to them. Kept in memory and in `cachedir/sessions/<id>` (base64 key string,
//! mode 0600) so they survive a restart. A key older than `publish_session` seconds is
//! no longer handed out: the minion then gets `"bad load"` once, signs in again and is
//! given a new one.
//!
//! Keys are made only at a successful sign-in (`req::auth`, as an effect applied after
//! the sign-in's records are committed), never for an id that has not authenticated: a
//! lookup for an unknown id reads at most one file and makes nothing.
//!
//! The memory kept is bounded too: at most [`MAX_IN_MEMORY`] keys (a deleted minion's
//! key would otherwise stay for ever). A lookup drops an expired key; an install at the
//! bound drops the expired ones, then the oldest (its file stays, so a minion whose key
//! was dropped from memory is read back from disk on its next request).

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::wire::crypto::Crypticle;

/// Most session keys kept in memory (far above any fleet a master serves).
pub const MAX_IN_MEMORY: usize = 1 << 20;

pub struct Sessions {
    dir: PathBuf,
    max_age: Duration,
    cap: usize,
    keys: Mutex<HashMap<String, (Crypticle, SystemTime)>>,
}

impl Sessions {
    pub fn new(dir: PathBuf, max_age: Duration) -> Self {
        if let Err(e) = std::fs::create_dir_all(&dir) {
            tracing::error!(dir = %dir.display(), "cannot create the sessions directory: {e}");
        }
        Sessions { dir, max_age, cap: MAX_IN_MEMORY, keys: Mutex::new(HashMap::new()) }
    }

    /// The same with at most `cap` keys in memory.
    pub fn with_cap(mut self, cap: usize) -> Self {
        self.cap = cap.max(1);
        self
    }

    /// Keys held in memory.
    pub fn in_memory(&self) -> usize {
        self.keys.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// The session key of a (validated) minion id, if it has one younger than
    /// `publish_session` (from memory, or from the file a previous run left).
    pub fn fresh(&self, id: &str) -> Option<Crypticle> {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((c, born)) = keys.get(id) {
            if born.elapsed().unwrap_or_default() < self.max_age {
                return Some(c.clone());
            }
            keys.remove(id);
            return None;
        }
        let path = self.dir.join(id);
        let born = std::fs::metadata(&path).ok()?.modified().ok()?;
        if born.elapsed().unwrap_or_default() >= self.max_age {
            return None;
        }
        let c = Crypticle::from_key_string(&std::fs::read_to_string(&path).ok()?).ok()?;
        self.make_room(&mut keys);
        keys.insert(id.to_string(), (c.clone(), born));
        Some(c)
    }

    /// Brings the keys in memory below the cap (see the module docs).
    fn make_room(&self, keys: &mut HashMap<String, (Crypticle, SystemTime)>) {
        if keys.len() < self.cap {
            return;
        }
        keys.retain(|_, (_, born)| born.elapsed().unwrap_or_default() < self.max_age);
        while keys.len() >= self.cap {
            let Some(oldest) = keys.iter().min_by_key(|(_, (_, born))| *born).map(|(id, _)| id.clone()) else { break };
            keys.remove(&oldest);
        }
    }

    /// Installs a minion's new session key (memory and file).
    pub fn install(&self, id: &str, key: &Crypticle) {
        let tmp = self.dir.join(format!(".{id}.tmp"));
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .and_then(|mut f| f.write_all(key.key_string().as_bytes()))
            .and_then(|_| std::fs::rename(&tmp, self.dir.join(id)));
        if let Err(e) = written {
            tracing::error!(id, "cannot persist the session key: {e}");
        }
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if !keys.contains_key(id) {
            self.make_room(&mut keys);
        }
        keys.insert(id.to_string(), (key.clone(), SystemTime::now()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_kept_across_restarts_and_expire() {
        let d = tempfile::tempdir().unwrap();
        let s = Sessions::new(d.path().join("sessions"), Duration::from_secs(60));
        assert!(s.fresh("m1").is_none(), "nothing is made on a lookup");
        assert!(!d.path().join("sessions/m1").exists());
        let k = Crypticle::generate();
        s.install("m1", &k);
        assert_eq!(s.fresh("m1").unwrap().key_string(), k.key_string());
        let again = Sessions::new(d.path().join("sessions"), Duration::from_secs(60));
        assert_eq!(again.fresh("m1").unwrap().key_string(), k.key_string(), "read back after a restart");
        let expired = Sessions::new(d.path().join("sessions"), Duration::from_secs(0));
        assert!(expired.fresh("m1").is_none());
    }

    /// 10,000 ids that never signed in ask for their key: nothing is made for them, in
    /// memory or on disk.
    #[test]
    fn lookups_for_ids_that_never_signed_in_make_nothing() {
        let d = tempfile::tempdir().unwrap();
        let s = Sessions::new(d.path().join("sessions"), Duration::from_secs(60));
        for i in 0..10_000 {
            assert!(s.fresh(&format!("stranger-{i}")).is_none());
        }
        assert_eq!(s.in_memory(), 0);
        assert_eq!(std::fs::read_dir(d.path().join("sessions")).unwrap().count(), 0);
    }

    /// The keys in memory stay under the cap; a key dropped from memory is read back
    /// from its file; an expired one is dropped by the lookup that finds it expired.
    #[test]
    fn keys_in_memory_are_capped_and_expired_ones_dropped() {
        let d = tempfile::tempdir().unwrap();
        let s = Sessions::new(d.path().join("sessions"), Duration::from_secs(60)).with_cap(3);
        let keys: Vec<Crypticle> = (0..5).map(|_| Crypticle::generate()).collect();
        for (i, k) in keys.iter().enumerate() {
            s.install(&format!("m{i}"), k);
            assert!(s.in_memory() <= 3);
        }
        for (i, k) in keys.iter().enumerate() {
            assert_eq!(s.fresh(&format!("m{i}")).unwrap().key_string(), k.key_string(), "m{i} is still served");
            assert!(s.in_memory() <= 3);
        }
        let short = Sessions::new(d.path().join("short"), Duration::from_millis(1));
        short.install("m1", &keys[0]);
        assert_eq!(short.in_memory(), 1);
        std::thread::sleep(Duration::from_millis(5));
        assert!(short.fresh("m1").is_none());
        assert_eq!(short.in_memory(), 0, "the expired key is dropped");
    }
}
