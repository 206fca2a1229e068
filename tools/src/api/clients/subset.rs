//! `local_subset`: Salt's `cmd_subset`. The target is asked for `sys.list_functions`
//! (as the caller: the rules must allow it); of the minions that answered with `fun`
//! among their functions, `subset` are picked at random (`crate::subset`) and run the
//! call, as `local` does; the answer is `{minion: return}`, `false` for a picked minion
//! that did not return in time (Salt's `cmd`).

use std::collections::BTreeSet;

use serde_json::{json, Map, Value as J};

use super::local::{publish, ret_of, with_silent, Call, Follow};
use super::{ApiConfig, ApiError, Rules, Session};
pub use crate::subset::{parse, MAX_SUBSET};

pub async fn answer(cfg: &ApiConfig, s: &Session, c: &Call, n: usize) -> Result<J, ApiError> {
    let rules = Rules::load(cfg, s).await?;
    let none = Map::new();
    rules.check(cfg, "sys.list_functions", &[], &none, &c.tgt, &c.tgt_type).await?;
    let timeout = c.timeout(cfg);
    let Some(p) = publish(cfg, s, &c.tgt, &c.tgt_type, "sys.list_functions", &[], &none, &none).await? else { return Ok(json!({})) };
    let (answered, _) = Follow::open(cfg, &p.jid, timeout).await?.collect().await?;
    let able = crate::subset::pick(answered.into_iter().map(|(id, load)| (id, ret_of(&load))), &c.fun, n, &mut rand::thread_rng());
    if able.is_empty() {
        return Ok(json!({}));
    }
    let picked: BTreeSet<String> = able.iter().cloned().collect();
    rules.check_on(&c.fun, &c.arg, &c.kwarg, &picked)?;
    let list = J::Array(able.into_iter().map(J::String).collect());
    let Some(p) = publish(cfg, s, &list, "list", &c.fun, &c.arg, &c.kwarg, &c.publish_opts).await? else { return Ok(json!({})) };
    let (got, _) = Follow::open(cfg, &p.jid, timeout).await?.collect().await?;
    Ok(J::Object(with_silent(got, &p.minions, c.full_return)))
}
