//! The state of salt-api's tokens (`crate::eauth_token`, kind 18): applying creates,
//! revokes and their expiry, and reading one token back.

use rocksdb::{Direction, IteratorMode, WriteBatch};

use super::apply::Overlay;
use super::{from_msgpack, to_msgpack, StateMachine, CF_META};
use crate::eauth_token::{token_key, EauthToken, TokenOp, TOKEN_PREFIX};
use crate::error::Result;

impl StateMachine {
    /// The token whose hash is `hash`, if one was created and not revoked or dropped
    /// (whether it has expired is for the reader to decide against its clock).
    pub fn eauth_token(&self, hash: &str) -> Result<Option<EauthToken>> {
        let db = self.db()?;
        let found = match db.get_pinned_cf(db.cf(CF_META)?, token_key(hash))? {
            Some(v) => Some(from_msgpack("eauth_token", &v)?),
            None => None,
        };
        Ok(found)
    }

    /// A create is kept unless the hash is held already (here or earlier in the batch);
    /// a revoke deletes.
    pub(super) fn apply_eauth_token(&self, t: &EauthToken, b: &mut WriteBatch, ov: &mut Overlay) -> Result<()> {
        let db = self.db()?;
        let key = token_key(&t.hash);
        match t.op {
            TokenOp::Create => {
                let held = match ov.tokens.get(&key) {
                    Some(h) => *h,
                    None => db.get_pinned_cf(db.cf(CF_META)?, &key)?.is_some(),
                };
                if !held {
                    b.put_cf(db.cf(CF_META)?, &key, to_msgpack(t)?);
                    ov.tokens.insert(key, true);
                }
            }
            TokenOp::Revoke => {
                b.delete_cf(db.cf(CF_META)?, &key);
                ov.tokens.insert(key, false);
            }
        }
        Ok(())
    }

    /// Drops the applied tokens that had expired at `now_ns` (a `jobs_expired` record's
    /// time).
    pub(super) fn expire_eauth_tokens(&self, now_ns: u64, b: &mut WriteBatch) -> Result<()> {
        let db = self.db()?;
        let cf = db.cf(CF_META)?;
        for item in db.iterator_cf(cf, IteratorMode::From(TOKEN_PREFIX, Direction::Forward)) {
            let (k, v) = item?;
            if !k.starts_with(TOKEN_PREFIX) {
                break;
            }
            // A value that does not decode is dropped too: nothing could use it.
            let expired = from_msgpack::<EauthToken>("eauth_token", &v).map(|t| t.expire_ns < now_ns).unwrap_or(true);
            if expired {
                b.delete_cf(cf, &k);
            }
        }
        Ok(())
    }
}
