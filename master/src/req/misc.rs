//! The small AES commands: `_master_opts`, `_master_tops`,
//! `_register_resources` and anything unknown (an empty map, as Salt answers). The mine
//! is [`super::mine`].

use rmpv::Value;

use super::{Answer, Ctx};
use crate::config::MasterConfig;
use crate::view::View;
use crate::wire::payload::get;

/// One of the small commands.
pub enum Misc {
    MasterOpts { env_only: bool },
    MasterTops,
    RegisterResources,
    Unknown(String),
}

impl Misc {
    pub fn parse(cmd: &str, inner: &Value) -> Misc {
        match cmd {
            "_master_opts" => Misc::MasterOpts { env_only: get(inner, "env_only").and_then(Value::as_bool).unwrap_or(false) },
            "_master_tops" => Misc::MasterTops,
            "_register_resources" => Misc::RegisterResources,
            other => Misc::Unknown(other.to_string()),
        }
    }

    pub fn answer(self, ctx: &Ctx, view: &dyn View) -> Answer {
        Answer::value(match self {
            Misc::MasterOpts { env_only } => master_opts(view.config(), env_only),
            Misc::MasterTops => Value::Map(vec![]),
            Misc::RegisterResources => Value::Boolean(true),
            Misc::Unknown(cmd) => {
                tracing::debug!(cmd = %cmd.escape_debug(), id = ctx.id, "unknown command");
                Value::Map(vec![])
            }
        })
    }
}

/// The nodegroups for a minion's state top (`- match: nodegroup`), each already expanded
/// (no `N@` left), so the minion's own expansion has nothing nested to get wrong.
fn nodegroups(cfg: &MasterConfig) -> Value {
    Value::Map(
        cfg.nodegroups
            .keys()
            .filter_map(|name| crate::nodegroups::expand(name, &cfg.nodegroups).ok().map(|e| (Value::from(name.as_str()), Value::from(e))))
            .collect(),
    )
}

/// `_master_opts`: the options a minion's state compiler needs from its master.
pub fn master_opts(cfg: &MasterConfig, env_only: bool) -> Value {
    let roots = Value::Map(cfg.file_roots.keys().map(|k| (Value::from(k.as_str()), Value::Array(vec![]))).collect());
    let mut m = vec![
        (Value::from("file_roots"), roots),
        (Value::from("top_file_merging_strategy"), Value::from("merge")),
        (Value::from("env_order"), Value::Array(vec![])),
        (Value::from("default_top"), Value::from("base")),
    ];
    if !env_only {
        for (k, v) in [
            ("renderer", Value::from("jinja|yaml")),
            ("failhard", Value::Boolean(false)),
            ("state_top", Value::from("top.sls")),
            ("state_top_saltenv", Value::Nil),
            ("nodegroups", nodegroups(cfg)),
            ("state_auto_order", Value::Boolean(true)),
            ("state_events", Value::Boolean(false)),
            ("state_aggregate", Value::Boolean(false)),
            ("jinja_env", Value::Map(vec![])),
            ("jinja_sls_env", Value::Map(vec![])),
            ("jinja_lstrip_blocks", Value::Boolean(false)),
            ("jinja_trim_blocks", Value::Boolean(false)),
        ] {
            m.push((Value::from(k), v));
        }
    }
    Value::Map(m)
}
