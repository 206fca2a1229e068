//! The mine commands (`crate::mine`): `_mine`, `_mine_delete` and `_mine_flush` answer
//! `True` once their `mine_update` record is committed, for the minion that sent them;
//! `_mine_get` is answered from the applied state. A load that cannot be stored (no
//! data map, a bad function name, more than the bounds of `halite_storage::format`)
//! is answered `False`, as Salt answers an incomplete one, and counted as refused.

use rmpv::Value;

use super::{Answer, Ctx};
use crate::metrics::{refuse, Port};
use crate::mine::{self, Query};
use crate::view::View;

/// A mine request.
pub enum Mine {
    Send(Value),
    Delete(Value),
    Flush,
    Get(Value),
}

impl Mine {
    pub fn parse(cmd: &str, inner: &Value) -> Option<Mine> {
        Some(match cmd {
            "_mine" => Mine::Send(inner.clone()),
            "_mine_delete" => Mine::Delete(inner.clone()),
            "_mine_flush" => Mine::Flush,
            "_mine_get" => Mine::Get(inner.clone()),
            _ => return None,
        })
    }

    pub fn answer(self, ctx: &Ctx, view: &dyn View) -> Answer {
        let now = view.now_ns();
        let rec = match self {
            Mine::Send(load) => mine::send(ctx.id, &load, now),
            Mine::Delete(load) => mine::delete(ctx.id, &load, now),
            Mine::Flush => mine::flush(ctx.id, now),
            Mine::Get(load) => {
                let Some(q) = Query::from_load(ctx.id, &load) else { return Answer::value(Value::Map(vec![])) };
                return match mine::get_mine(view.config(), view.mine_read(), &q) {
                    Ok(v) => Answer::value(v),
                    Err(e) => {
                        tracing::error!(id = ctx.id, "mine.get: cannot read the mine: {e}");
                        Answer::value(Value::Map(vec![]))
                    }
                };
            }
        };
        match rec {
            Ok(r) => Answer { records: vec![r], ..Answer::value(Value::Boolean(true)) },
            Err(e) => {
                refuse(Port::Request, ctx.id, "mine_refused", &e);
                Answer::value(Value::Boolean(false))
            }
        }
    }
}
