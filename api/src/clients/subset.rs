//! `local_subset`: Salt's `cmd_subset`. The target is asked for `sys.list_functions`
//! (as the caller: the rules must allow it); of the minions that answered with `fun`
//! among their functions, `subset` are picked at random (`halite_tools::subset`) and run the
//! call, as `local` does; the answer is `{minion: return}`, `false` for a picked minion
//! that did not return in time (Salt's `cmd`).

use std::collections::BTreeSet;

use serde_json::{json, Map, Value as J};

use super::local::{publish, ret_of, with_silent, Call, Follow};
use super::{count, ApiConfig, ApiError, Rules, Session};
pub use halite_tools::subset::{DEFAULT_SUBSET, MAX_SUBSET};

/// A lowstate's `subset` (or Salt's older `sub`, which wins when both are given, as
/// `cmd_subset` reads it): a whole number, 1 to [`MAX_SUBSET`]; [`DEFAULT_SUBSET`] when
/// neither is there.
pub fn parse(chunk: &Map<String, J>) -> Result<usize, ApiError> {
    let given = |k: &str| chunk.get(k).filter(|v| !v.is_null());
    match given("sub").or_else(|| given("subset")) {
        None => Ok(DEFAULT_SUBSET),
        Some(v) => Ok(count(v, "subset", MAX_SUBSET)? as usize),
    }
}

pub async fn answer(cfg: &ApiConfig, s: &Session, c: &Call, n: usize) -> Result<J, ApiError> {
    let rules = Rules::load(cfg, s).await?;
    let none = Map::new();
    rules.check(cfg, "sys.list_functions", &[], &none, &c.tgt, &c.tgt_type).await?;
    let timeout = c.timeout(cfg);
    let Some(p) = publish(cfg, s, &c.tgt, &c.tgt_type, "sys.list_functions", &[], &none, &none).await? else { return Ok(json!({})) };
    let (answered, _) = Follow::open(cfg, &p.jid, timeout).await?.collect().await?;
    let able = halite_tools::subset::pick(answered.into_iter().map(|(id, load)| (id, ret_of(&load))), &c.fun, n, &mut rand::thread_rng());
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_subset_argument() {
        let n = |c: J| parse(c.as_object().unwrap());
        assert_eq!(n(json!({"subset": 1})), Ok(1));
        assert_eq!(n(json!({"subset": "2"})), Ok(2), "a form's string");
        assert_eq!(n(json!({"subset": null})), Ok(DEFAULT_SUBSET), "Salt's default");
        assert_eq!(n(json!({})), Ok(3));
        assert_eq!(n(json!({"sub": 4})), Ok(4), "Salt's older name");
        assert_eq!(n(json!({"sub": 4, "subset": 2})), Ok(4), "cmd_subset takes `sub` over `subset`");
        for bad in [json!(0), json!(-2), json!(2.5), json!(false), json!("two"), json!(MAX_SUBSET + 1), json!(u64::MAX), json!([1])] {
            let e = n(json!({ "subset": bad })).unwrap_err();
            assert_eq!(e.status, 400, "{bad}");
            assert!(e.msg.starts_with("subset must be a whole number"), "{e:?}");
        }
    }
}
