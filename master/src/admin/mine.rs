//! `salt-run mine.get TGT FUN [TGT_TYPE]`: the mine read as Salt's runner does it, asked
//! as the master's own `id` (so the `mine_get` option applies to it as to a minion),
//! answered from this member's applied state (`crate::mine`).

use serde_json::Value as J;

use super::{AdminView, Plan};
use crate::error::{Error, Result};
use crate::mine::{get_mine, Query};
use crate::wire::payload;

/// A `mine.get` runner request: `tgt`, `mine_fun` (one function, comma-separated ones
/// or a list), `tgt_type` (default glob).
#[derive(Debug, Clone, PartialEq)]
pub struct MineCmd {
    pub tgt: J,
    pub fun: J,
    pub tgt_type: String,
}

impl MineCmd {
    pub fn parse(req: &J) -> Result<MineCmd> {
        let tgt = req.get("tgt").cloned().ok_or_else(|| Error::refused("mine.get needs a target"))?;
        let fun = req.get("mine_fun").cloned().ok_or_else(|| Error::refused("mine.get needs a function"))?;
        let tgt_type = req.get("tgt_type").and_then(J::as_str).unwrap_or("glob").to_string();
        Ok(MineCmd { tgt, fun, tgt_type })
    }

    pub fn answer(self, view: &dyn AdminView) -> Result<Plan> {
        let cfg = view.config();
        let load = payload::from_json(&serde_json::json!({ "tgt": self.tgt, "fun": self.fun, "tgt_type": self.tgt_type }));
        let Some(q) = Query::from_load(&cfg.id, &load) else { return Ok(Plan::answer(serde_json::json!({ "return": {} }))) };
        Ok(Plan::answer(serde_json::json!({ "return": payload::to_json(&get_mine(cfg, &view.state(), &q)?) })))
    }
}
