//! `salt-run cache.grains TGT`, `cache.pillar [TGT]`, `cache.mine [TGT]` (each with
//! `tgt_type`, default glob): the minion data cache as the applied state holds it (the
//! grains each minion reported, the pillar last compiled for it, its mine), for the
//! accepted minions the target matches (`crate::jobs::expected_minions`, nodegroups
//! expanded first, as a publish does).
//!
//! Shapes as Salt's: `{minion: grains}` and `{minion: pillar}` list every matched minion,
//! `{}` for one with nothing cached; `{minion: {function: data}}` lists the minions that
//! have mine data, the data as the minion sent it (with Salt 3008's ACL wrapper when it
//! sent one). `cache.pillar` and `cache.mine` without a target take every minion.

use serde_json::{json, Map, Value as J};

use super::runner_args::RunnerArgs;
use super::{AdminView, Plan};
use crate::error::{Error, Result};
use crate::wire::payload;

/// Which cache a `cache.*` request reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bank {
    Grains,
    Pillar,
    Mine,
}

/// A `cache.*` request.
#[derive(Debug, Clone, PartialEq)]
pub struct CacheCmd {
    pub bank: Bank,
    pub tgt: J,
    pub tgt_type: String,
}

impl CacheCmd {
    pub fn parse(fun: &str, req: &J) -> Result<CacheCmd> {
        let bank = match fun {
            "cache.grains" => Bank::Grains,
            "cache.pillar" => Bank::Pillar,
            "cache.mine" => Bank::Mine,
            other => return Err(Error::refused(format!("'{other}' is not available."))),
        };
        // `cache.grains` requires its target; the others default to every minion.
        let tgt_default = if bank == Bank::Grains { None } else { Some(J::Null) };
        let b = RunnerArgs::from_req(req).bind(fun, &[("tgt", tgt_default), ("tgt_type", Some(json!("glob")))], true)?;
        let tgt = match b.get("tgt") {
            J::Null => json!("*"),
            J::String(s) => J::String(s.clone()),
            J::Array(a) => J::Array(a.clone()),
            other => J::String(other.to_string()),
        };
        Ok(CacheCmd { bank, tgt, tgt_type: b.text("tgt_type").unwrap_or_else(|| "glob".into()) })
    }

    pub fn answer(self, view: &dyn AdminView) -> Result<Plan> {
        let sm = view.state();
        let (tgt, tgt_type) = match &self.tgt {
            J::String(t) => {
                let (t, ty) = crate::nodegroups::resolve(t, &self.tgt_type, &view.config().nodegroups)?;
                (J::String(t), ty)
            }
            other => (other.clone(), self.tgt_type.clone()),
        };
        let (mut minions, _) = crate::jobs::expected_minions(sm, &tgt, &tgt_type)?;
        minions.sort();
        let decode = |b: &[u8]| payload::decode(b).map(|v| payload::to_json(&v)).unwrap_or(J::Null);
        let mut out = Map::new();
        for id in minions {
            match self.bank {
                Bank::Grains => {
                    out.insert(id.clone(), sm.grains(&id)?.map(|g| decode(&g)).unwrap_or_else(|| json!({})));
                }
                Bank::Pillar => {
                    out.insert(id.clone(), sm.pillar(&id)?.map(|p| decode(&p)).unwrap_or_else(|| json!({})));
                }
                Bank::Mine => {
                    let funs = sm.mine(&id)?;
                    if !funs.is_empty() {
                        out.insert(id.clone(), J::Object(funs.into_iter().map(|(f, d)| (f, decode(&d))).collect()));
                    }
                }
            }
        }
        Ok(Plan::answer(json!({ "return": out })))
    }
}
