//! Per-minion session keys (spec §3.5): the key that encrypts a minion's requests and the
//! replies to them. Kept in memory and in `cachedir/sessions/<id>` (base64 key string,
//! mode 0600) so they survive a restart. A key older than `publish_session` seconds is
//! no longer handed out: the minion then gets `"bad load"` once, signs in again and is
//! given a new one.
//!
//! Keys are made only at a successful sign-in (`req::auth`, as an effect applied after
//! the sign-in's records are committed), never for an id that has not authenticated.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::wire::crypto::Crypticle;

pub struct Sessions {
    dir: PathBuf,
    max_age: Duration,
    keys: Mutex<HashMap<String, (Crypticle, SystemTime)>>,
}

impl Sessions {
    pub fn new(dir: PathBuf, max_age: Duration) -> Self {
        if let Err(e) = std::fs::create_dir_all(&dir) {
            tracing::error!(dir = %dir.display(), "cannot create the sessions directory: {e}");
        }
        Sessions { dir, max_age, keys: Mutex::new(HashMap::new()) }
    }

    /// The session key of a (validated) minion id, if it has one younger than
    /// `publish_session` (from memory, or from the file a previous run left).
    pub fn fresh(&self, id: &str) -> Option<Crypticle> {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((c, born)) = keys.get(id) {
            return (born.elapsed().unwrap_or_default() < self.max_age).then(|| c.clone());
        }
        let path = self.dir.join(id);
        let born = std::fs::metadata(&path).ok()?.modified().ok()?;
        if born.elapsed().unwrap_or_default() >= self.max_age {
            return None;
        }
        let c = Crypticle::from_key_string(&std::fs::read_to_string(&path).ok()?).ok()?;
        keys.insert(id.to_string(), (c.clone(), born));
        Some(c)
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
        self.keys.lock().unwrap_or_else(|p| p.into_inner()).insert(id.to_string(), (key.clone(), SystemTime::now()));
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
}
