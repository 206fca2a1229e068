//! `hook.fire`: salt-api's `POST /hook/<tag>` (rest_cherrypy's `Webhook`), an event
//! fired on the master's bus (and so seen by its reactor, and forwarded to the other
//! members of a cluster) with the request's data.
//!
//! `{"cmd": "hook.fire", "tag": "salt/netapi/hook[/...]", "data": {...}}`: only tags
//! under [`PREFIX`] are fired (the admin socket fires no other event on request), of at
//! most [`MAX_TAG_LEN`] bytes, without control characters; the answer is
//! `{"success": true}` once fired.

use serde_json::{json, Value as J};

use super::Plan;
use crate::error::{Error, Result};
use crate::events::event;

/// The tag every hook event starts with (Salt's `tag_base`).
pub const PREFIX: &str = "salt/netapi/hook";
/// Longest tag fired.
pub const MAX_TAG_LEN: usize = 1024;

#[derive(Debug, Clone, PartialEq)]
pub struct HookFire {
    pub tag: String,
    pub data: J,
}

impl HookFire {
    pub fn parse(req: &J) -> Result<HookFire> {
        let tag = req.get("tag").and_then(J::as_str).unwrap_or("");
        let under = tag == PREFIX || tag.strip_prefix(PREFIX).is_some_and(|rest| rest.starts_with('/'));
        if !under || tag.len() > MAX_TAG_LEN || tag.chars().any(char::is_control) {
            return Err(Error::refused(format!("hook.fire: the tag must start with {PREFIX}/, at most {MAX_TAG_LEN} bytes, no control characters")));
        }
        let data = match req.get("data") {
            Some(d @ J::Object(_)) => d.clone(),
            _ => return Err(Error::refused("hook.fire: data must be a map")),
        };
        Ok(HookFire { tag: tag.to_string(), data })
    }

    pub fn answer(self) -> Result<Plan> {
        let mut plan = Plan::answer(json!({ "success": true }));
        plan.events.push(event(self.tag, self.data));
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_hook_tags_are_fired() {
        let ok = HookFire::parse(&json!({ "tag": "salt/netapi/hook/ci/build", "data": { "post": {} } })).unwrap();
        let plan = ok.answer().unwrap();
        assert_eq!(plan.events.len(), 1);
        assert_eq!(plan.events[0].tag, "salt/netapi/hook/ci/build");
        assert!(HookFire::parse(&json!({ "tag": "salt/netapi/hook", "data": {} })).is_ok());
        for bad in ["salt/key", "salt/netapi/hooks/x", "", "salt/netapi/hook/a\nb"] {
            assert!(HookFire::parse(&json!({ "tag": bad, "data": {} })).is_err(), "{bad:?}");
        }
        assert!(HookFire::parse(&json!({ "tag": format!("salt/netapi/hook/{}", "x".repeat(MAX_TAG_LEN)), "data": {} })).is_err());
        assert!(HookFire::parse(&json!({ "tag": "salt/netapi/hook/x", "data": [1] })).is_err());
    }
}
