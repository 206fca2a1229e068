//! Per-minion session keys (spec §3.5): the key that encrypts a minion's requests and the
//! replies to them. Kept in memory and in `cachedir/sessions/<id>` (base64 key string,
//! mode 0600) so they survive a restart, and replaced once older than `publish_session`
//! seconds; a minion then gets `"bad load"` once, re-authenticates and learns the new key.

use std::collections::HashMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use crate::crypto::Crypticle;

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

    /// The session key of a (validated) minion id, loading or creating it.
    pub fn get(&self, id: &str) -> Crypticle {
        let mut keys = self.keys.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((c, born)) = keys.get(id) {
            if born.elapsed().unwrap_or_default() < self.max_age {
                return c.clone();
            }
        }
        let path = self.dir.join(id);
        let from_disk = std::fs::metadata(&path).ok().and_then(|m| {
            let born = m.modified().ok()?;
            if born.elapsed().unwrap_or_default() >= self.max_age {
                return None;
            }
            let s = std::fs::read_to_string(&path).ok()?;
            Crypticle::from_key_string(&s).ok().map(|c| (c, born))
        });
        let (c, born) = match from_disk {
            Some(x) => x,
            None => {
                let c = Crypticle::generate();
                let tmp = self.dir.join(format!(".{id}.tmp"));
                let written = std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(true)
                    .mode(0o600)
                    .open(&tmp)
                    .and_then(|mut f| f.write_all(c.key_string().as_bytes()))
                    .and_then(|_| std::fs::rename(&tmp, &path));
                if let Err(e) = written {
                    tracing::error!(id, "cannot persist the session key: {e}");
                }
                (c, SystemTime::now())
            }
        };
        keys.insert(id.to_string(), (c.clone(), born));
        c
    }
}
