//! `_pillar`: records the minion's grains (a `grains_report` record) and, when it
//! changed, the compiled pillar (a `pillar_cache` record, for pillar targeting), and
//! answers with its pillar, compiled from `pillar_roots` and the external pillars
//! (`crate::pillar`: git_pillar from the applied tree, commands run through the view's
//! `ext_run`, whose output thus enters the log with the cached pillar), privately encrypted
//! (as Salt's `_pillar` with `enc_algo`): a fresh AES key, RSA-encrypted to the minion, seals the signed pillar, so no
//! other minion sharing a session key (a cluster's) can read it. With
//! `minion_data_cache: False` neither record is written.

use rmpv::Value;

use halite_storage::format::{GrainsReport, PillarCache, Record, MAX_GRAINS_LEN, MAX_PILLAR_CACHE_LEN};

use super::{Answer, Ctx};
use crate::error::Result;
use crate::events::event;
use crate::view::View;
use crate::wire::crypto::PICKLE;
use crate::wire::payload::{self, bin, encode, get, map};

/// A `_pillar` request.
pub struct Pillar {
    grains: Value,
    /// The minion's `saltenv` and `pillarenv`, when set and valid saltenv names.
    saltenv: Option<String>,
    pillarenv: Option<String>,
}

impl Pillar {
    pub fn parse(inner: &Value) -> Self {
        let env = |k: &str| get(inner, k).and_then(Value::as_str).filter(|e| halite_storage::id::validate_saltenv(e).is_ok()).map(str::to_string);
        Pillar { grains: get(inner, "grains").cloned().unwrap_or(Value::Map(vec![])), saltenv: env("saltenv"), pillarenv: env("pillarenv") }
    }

    pub fn answer(self, ctx: &Ctx, view: &dyn View) -> Result<Answer> {
        let grains = encode(&self.grains);
        let mut grains_json = payload::to_json(&self.grains);
        if let Some(m) = grains_json.as_object_mut() {
            m.insert("id".into(), serde_json::Value::String(ctx.id.to_string()));
        }
        let src = crate::pillar::Sources { roots: view.roots(), git: view.git_pillar_roots(), run: view.ext_run() };
        let m = crate::pillar::Minion { id: ctx.id, grains: &grains_json, saltenv: self.saltenv.as_deref(), pillarenv: self.pillarenv.as_deref() };
        let pillar = payload::from_json(&crate::pillar::compile(view.config(), &src, &m));
        // `minion_data_cache: False`: neither grains nor pillar are kept (Salt's option).
        let mut records = Vec::new();
        if view.config().minion_data_cache {
            if grains.len() > MAX_GRAINS_LEN {
                crate::metrics::refuse(crate::metrics::Port::Request, ctx.id, "grains_too_large", &format_args!("grains of {} bytes, more than {MAX_GRAINS_LEN}: used for this pillar, not recorded", grains.len()));
            } else {
                records.push(Record::GrainsReport(GrainsReport { id: ctx.id.to_string(), grains, time_ns: view.now_ns() }));
            }
            // The pillar cache (Salt's minion data cache) for pillar targeting: a new
            // record only when the pillar changed; one too large to keep is left out (the
            // master then does not target this minion by pillar).
            let cached = encode(&pillar);
            if cached.len() > MAX_PILLAR_CACHE_LEN {
                crate::metrics::refuse(crate::metrics::Port::Request, ctx.id, "pillar_too_large", &format_args!("pillar of {} bytes, more than {MAX_PILLAR_CACHE_LEN}: not cached for pillar targeting", cached.len()));
            } else if view.cached_pillar(ctx.id).as_deref() != Some(&cached[..]) {
                records.push(Record::PillarCache(PillarCache { id: ctx.id.to_string(), pillar: cached, time_ns: view.now_ns() }));
            }
        }
        let k = view.fresh_key();
        let enc_k = ctx.minion_pub(view)?.encrypt_oaep(k.key_string().as_bytes(), ctx.enc)?;
        let data = encode(&map([("key", bin(enc_k.clone())), ("pillar", pillar), ("nonce", Value::from(ctx.nonce))]));
        let sig = view.master_keys().private.sign(&data, ctx.sig)?;
        let mut plain = PICKLE.to_vec();
        plain.extend_from_slice(&encode(&map([("data", bin(data)), ("sig", bin(sig))])));
        let blob = k.encrypt(&plain)?;
        Ok(Answer {
            value: map([("key", bin(enc_k)), ("pillar", bin(blob))]),
            private: true,
            records,
            events: vec![event(format!("minion/refresh/{}", ctx.id), serde_json::json!({ "Minion data cache refresh": ctx.id }))],
        })
    }
}
