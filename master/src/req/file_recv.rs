//! `_file_recv`: a piece of a file a minion pushes with `cp.push` / `cp.push_dir`
//! (Salt's `_file_recv`), kept only with `file_recv: True`.
//!
//! The load names the file by a list of path components, its `size`, the piece's offset
//! `loc` and its `data`. The answer is Salt's: `True` once the piece is committed,
//! `False` for anything refused, and nothing is written then:
//!
//! | refused when | metric reason |
//! |---|---|
//! | `file_recv` is off (Salt's default) | `file_recv_off` |
//! | the load lacks `path` (a list of strings), `loc`, `size` or `data`, or they are not of their types | `file_recv_load` |
//! | `loc` + the piece, or the declared `size`, exceeds `file_recv_max_size` MiB (Salt's rule; the declared size is checked too, so an oversized file is refused at its first piece) | `file_recv_size` |
//! | the path is absolute, leaves the minion's folder (`..`), names the folder itself, holds NUL or is too long (`halite_storage::file_recv::push_path`) | `file_recv_path` |
//! | the piece does not continue the file (offset other than 0 or the bytes held, another size, past the size), or another pushed file of the minion is in its way | `file_recv_order` |
//!
//! Refusals are counted (`halite_refused_total{port="request",reason=...}`) and logged
//! at most once a minute per minion and reason. An accepted piece becomes `file_recv`
//! records (kind 20, at most 1 MiB each) that every member applies the same way
//! (`halite_storage::file_recv`); once the file is complete the roots view writes it to
//! `cachedir/minions/<id>/files/<path>` on each member.

use rmpv::Value;

use halite_storage::file_recv::{push_path, split};
use halite_storage::format::Record;

use super::{Answer, Ctx};
use crate::metrics::{refuse, Port};
use crate::view::View;
use crate::wire::payload::{bytes, get, text};

/// A `_file_recv` request, as read from its load.
pub struct Push {
    parts: Option<Vec<String>>,
    loc: Option<i64>,
    size: Option<u64>,
    data: Option<Vec<u8>>,
}

impl Push {
    pub fn parse(inner: &Value) -> Push {
        let parts = match get(inner, "path") {
            Some(Value::Array(a)) => a.iter().map(|v| text(v).map(str::to_string)).collect(),
            _ => None,
        };
        Push { parts, loc: get(inner, "loc").and_then(Value::as_i64), size: get(inner, "size").and_then(Value::as_u64), data: get(inner, "data").and_then(bytes).map(<[u8]>::to_vec) }
    }

    pub fn answer(self, ctx: &Ctx, view: &dyn View) -> Answer {
        let id = ctx.id;
        let no = |reason: &'static str, detail: &dyn std::fmt::Display| {
            refuse(Port::Request, id, reason, &format_args!("_file_recv: {detail}"));
            Answer::value(Value::Boolean(false))
        };
        let cfg = view.config();
        if !cfg.file_recv {
            return no("file_recv_off", &"file_recv is off: the pushed file is not kept (set file_recv: True to allow cp.push)");
        }
        let (Some(parts), Some(loc), Some(size), Some(data)) = (self.parts, self.loc, self.size, self.data) else {
            return no("file_recv_load", &"the load lacks a path list of strings, loc, size or data");
        };
        let Ok(loc) = u64::try_from(loc) else {
            return no("file_recv_load", &format_args!("invalid file pointer {loc}"));
        };
        let max = cfg.file_recv_max_size.saturating_mul(1 << 20);
        let end = loc.saturating_add(data.len() as u64);
        if end > max || size > max {
            return no("file_recv_size", &format_args!("file_recv_max_size limit of {} MiB exceeded by {parts:?} ({size} bytes)", cfg.file_recv_max_size));
        }
        let path = match push_path(&parts) {
            Ok(p) => p,
            Err(why) => return no("file_recv_path", &format_args!("{why}: {parts:?}")),
        };
        let read = match view.pushed(id, &path) {
            Ok(r) => r,
            Err(e) => {
                tracing::error!(id, path = %path, "cannot read the pushed file's state: {e}");
                return Answer::value(Value::Boolean(false));
            }
        };
        let continues = match read.held {
            _ if end > size => false,
            None => loc == 0 && !read.conflict,
            Some(_) if loc == 0 => true,
            Some(m) => m.held == loc && m.size == size && !m.complete(),
        };
        if !continues {
            let held = read.held.map(|m| (m.held, m.size));
            return no("file_recv_order", &format_args!("a piece at {loc} of {} bytes does not continue {path} (held, size: {held:?}; declared size {size}; another file in the way: {})", data.len(), read.conflict));
        }
        let records: Vec<Record> = split(id, &path, size, loc, &data, view.now_ns()).into_iter().map(Record::FileRecv).collect();
        if let Some(e) = records.iter().find_map(|r| r.validate().err()) {
            return no("file_recv_load", &e);
        }
        Answer { value: Value::Boolean(true), private: false, records, events: vec![] }
    }
}
